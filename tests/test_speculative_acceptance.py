"""Speculative acceptance per draft kind and task kind: the catalog's figures are the
published ones, converted from acceptance length τ to the per-token rate α by hand here,
and they reach plan, simulate and estimate, which name them with their source.

The conversion: with k draft tokens a round and i.i.d. acceptance α (Leviathan et al.
2023, eq. 1) a verify step yields τ = 1 + α + α² + … + α^k tokens. Each α below was found by
hand and checked by putting it back into that sum, to four digits."""

from __future__ import annotations

import io
import json
import re
import tomllib
from contextlib import redirect_stderr, redirect_stdout

import pytest

from phasewise.catalog import load_hardware
from phasewise.catalog.speculative import (
    DEFAULT_TASK,
    DRAFT_KINDS,
    SPECULATIVE_PATH,
    TASKS,
    acceptance_length,
    acceptance_rate,
    check_task,
    default_acceptance,
    resolve_acceptance,
)
from phasewise.cli import main
from phasewise.errors import InputError
from phasewise.plan import Load, Problem, RequestClass, SearchSpace, Study, Target, Traffic, plan

# lightseekorg/kimi-k2.5-eagle3 model card, Performance table, Phase 2, SGLang with
# topk=1, num_steps=3, num_draft_tokens=4 (3 drafts a round):
#   HumanEval τ 3.285: α 0.8699 (1 + 0.8699 + 0.7567 + 0.6583 = 3.2849)
#   MTBench   τ 2.687: α 0.7386 (1 + 0.7386 + 0.5455 + 0.4029 = 2.6870)
#   GSM8K     τ 3.201: α 0.8529 (1 + 0.8529 + 0.7274 + 0.6204 = 3.2007)
HEAD_CODE, HEAD_CHAT, HEAD_MATH = 0.8699, 0.7386, 0.8529
# vLLM tests/v1/spec_decode/test_acceptance_length.py, llama3-8b-eagle3: τ 2.60 at 3 drafts:
#   α 0.7171 (1 + 0.7171 + 0.5142 + 0.3688 = 2.6001); its first position measured 0.7296.
HEAD_DEFAULT = 0.7171
# DeepSeek-V3 Technical Report §5.4.3: second-token acceptance 85%–90%; the low end.
MTP_ALL = 0.85
TOLERANCE = 5e-4  # the hand figures carry four digits


def test_the_sum_and_its_inverse_agree_with_a_hand_case():
    assert acceptance_length(0.5, 3) == pytest.approx(1.875)  # 1 + 0.5 + 0.25 + 0.125
    assert acceptance_rate(1.875, 3) == pytest.approx(0.5, abs=1e-12)
    assert acceptance_rate(1.0, 4) == pytest.approx(0.0, abs=1e-12)  # nothing accepted


@pytest.mark.parametrize(("task", "alpha"), [("code", HEAD_CODE), ("chat", HEAD_CHAT),
                                             ("math", HEAD_MATH),
                                             ("summarization", HEAD_DEFAULT)])
def test_a_draft_head_takes_the_published_figure_of_its_task(task, alpha):
    acceptance = default_acceptance("head", task)
    assert acceptance.alpha == pytest.approx(alpha, abs=TOLERANCE)
    source = "vLLM" if task == "summarization" else "kimi-k2.5-eagle3"
    assert source in acceptance.source


def test_a_task_without_a_figure_says_it_takes_the_default():
    source = default_acceptance("head", "summarization").source
    assert "no summarization figure" in source and "τ 2.6 at 3 draft tokens" in source


@pytest.mark.parametrize("task", TASKS)
def test_mtp_takes_deepseek_v3s_figure_on_every_task(task):
    acceptance = default_acceptance("mtp", task)
    assert acceptance.alpha == MTP_ALL
    assert "DeepSeek-V3" in acceptance.source and "§5.4.3" in acceptance.source


def test_a_separate_draft_model_falls_back_to_the_head_and_says_so():
    acceptance = default_acceptance("model", "code")
    assert acceptance.alpha == pytest.approx(HEAD_CODE, abs=TOLERANCE)
    assert acceptance.source.startswith("no published figure for a separate draft model")


def test_a_given_acceptance_wins_and_is_named_as_given():
    acceptance = resolve_acceptance(0.6, "head", "code")
    assert acceptance.alpha == 0.6 and acceptance.source == "given with --spec-accept"


def test_chat_is_the_default_task():
    assert DEFAULT_TASK == "chat"
    assert default_acceptance("head").alpha == pytest.approx(HEAD_CHAT, abs=TOLERANCE)


def test_an_unknown_task_is_one_clear_line():
    with pytest.raises(InputError) as err:
        check_task("coding")
    message = str(err.value)
    assert "\n" not in message and "did you mean code" in message
    assert "chat, code, math, summarization" in message


def test_every_figure_in_the_file_is_sourced_and_convertible():
    document = tomllib.loads(SPECULATIVE_PATH.read_text())
    kinds = {f["draft"] for f in document["figure"]}
    for figure in document["figure"]:
        assert figure["draft"] in DRAFT_KINDS
        assert figure["task"] in (*TASKS, "default")
        assert figure["source"] and figure["locator"] and figure["benchmark"]
        k = figure["draft_tokens"]
        if "acceptance_length" in figure:
            assert 1 < figure["acceptance_length"] < k + 1
        else:
            assert 0 < figure["acceptance_rate"] < 1
    for kind in DRAFT_KINDS:  # every kind reaches a figure
        assert (kind, "default") in {(f["draft"], f["task"]) for f in document["figure"]} \
            or document["fallback"][kind] in kinds


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit) as end:
        main(list(args))
    return end.value.code, out.getvalue(), err.getvalue()


SIM = ("simulate", "--model", "llama-3.2-1b", "--hardware", "l40s", "--isl", "128", "--osl",
       "32", "--rate", "2", "-n", "40", "--draft-head", "0.0625", "--spec-tokens", "3",
       "--format", "json")


def test_simulate_names_the_task_figure_and_its_source():
    code, out, _ = _cli(*SIM, "--task", "code")
    assert code == 0
    speculation = json.loads(out)["inputs"]["speculation"]
    assert speculation.startswith("head 0.0625, γ=3, α=0.8699")
    assert "code: lightseekorg/kimi-k2.5-eagle3" in speculation and "HumanEval" in speculation


def test_simulate_takes_a_given_acceptance_over_the_task():
    code, out, _ = _cli(*SIM, "--task", "code", "--spec-accept", "0.6")
    assert code == 0
    assert "α=0.6 (code: given with --spec-accept)" in json.loads(out)["inputs"]["speculation"]


def test_an_unknown_task_ends_with_exit_code_2():
    code, _, err = _cli(*SIM, "--task", "poetry")
    assert code == 2 and err.count("\n") == 1 and "--task poetry" in err


def test_estimate_names_the_acceptance_it_used():
    code, out, _ = _cli("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                        "--draft-head", "0.03", "--task", "math", "--format", "json")
    assert code == 0
    spec = json.loads(out)["speculative"]
    assert spec["spec_accept"] == pytest.approx(HEAD_MATH, abs=TOLERANCE)
    assert spec["task"] == "math" and "GSM8K" in spec["spec_accept_source"]


def _tight_tpot_plan(speculation: tuple[bool, ...], task: str):  # noqa: ANN202
    # Llama-3.1-8B in bf16 reads 16 GB of weights a decode step: at least 7.9 ms on an
    # A100-80GB's 2,039 GB/s, so a 6 ms TPOT needs the steps to yield more than one token.
    space = SearchSpace(hardware=(load_hardware("a100-80gb-sxm"),), tp=(1,), pp=(1,),
                        weight_dtypes=("bf16",), kv_dtypes=("bf16",), max_seqs=(64,),
                        chunk_tokens=(8192,), layouts=("aggregated",), speculation=speculation,
                        extra_replicas=0, task=task)
    traffic = Traffic((RequestClass(512, 128, 1.0),), 640, isl="512", osl="128")
    problem = Problem(traffic, Load("rate", 0.5), (Target("tpot", 0.006),), space)
    return plan(Study("llama-3.1-8b", problem, verify=2, requests=60))[0]


def test_plan_speculates_for_code_at_a_tight_tpot_at_the_cited_acceptance():
    without = _tight_tpot_plan((False,), "code")
    assert without.chosen is None  # no plain layout meets 6 ms
    report = _tight_tpot_plan((False, True), "code")
    assert report.chosen is not None and report.chosen.meets_slos and report.chosen.speculative
    draft = report.inputs["draft"]
    assert report.inputs["task"] == "code"
    assert draft["accept"] == pytest.approx(HEAD_CODE, abs=TOLERANCE)
    assert "kimi-k2.5-eagle3" in draft["source"] and "HumanEval" in draft["source"]
    assert f"--spec-accept {draft['accept']:g}" in report.chosen.simulate_command
    # The head drafts 3 tokens a round, as the card's runs did, so a round yields the card's
    # published τ 3.285 (to the two digits the reason shows).
    assert draft["tokens"] == 3
    shown = re.search(r"speculation yields ([0-9.]+) tokens a round", report.chosen.why)
    assert shown is not None and float(shown.group(1)) == pytest.approx(3.285, abs=0.006)


def test_simulate_inputs_name_the_checkpoints_formats_not_auto():
    # DeepSeek-V3's config.json declares quantization_config {quant_method: fp8,
    # weight_block_size: [128, 128]}: fp8 weights with block scales, read by `auto`.
    config = json.loads((SPECULATIVE_PATH.parent / "models" / "deepseek-v3.json").read_text())
    assert config["quantization_config"]["quant_method"] == "fp8"
    common = ("--model", "deepseek-v3", "--hardware", "h200-sxm", "--tp", "8", "--osl", "16",
              "--format", "json")
    code, out, _ = _cli("simulate", *common, "--isl", "256", "--rate", "1", "-n", "10")
    assert code == 0
    served = json.loads(out)["inputs"]
    code, out, _ = _cli("estimate", *common)
    assert code == 0
    estimated = json.loads(out)["inputs"]
    assert served["weight_dtype"] != "auto" and served["weight_dtype"].startswith("fp8")
    assert served["weight_formats"]["experts"].startswith("fp8")
    assert served["formats_source"].startswith("quantization_config")
    for key in ("weight_dtype", "kv_dtype", "weight_formats", "formats_source"):
        assert served[key] == estimated[key], key
