"""`phasewise validate --why`: one row's prediction taken apart."""

import json
import shlex
from dataclasses import replace

import pytest

from phasewise.cost.calibration import Profile, load_profile, parameter_defs, resolve_engine
from phasewise.errors import InputError
from phasewise.validate.measurements import load_bundled
from phasewise.validate.outcome import ValidationOutcome
from phasewise.validate.run import dataset, holdout, match_source, predict, sources
from phasewise.validate.trace import find_scenarios, trace

# One row of each shape the causes must add up over: a llama.cpp prompt in micro-batches
# through the dequant buffer (serial bytes), a Metal decode, a TP8 decode with collectives,
# a batched decode of 32 sequences, a MoE batch end to end, a server TTFT, an end-to-end
# batch latency, and a device ceiling.
ROWS = ("LPCU-0014", "LCPP-0362", "PHPR-0022", "SPRK-0033", "VLCI-0003", "LIB-T011",
        "LIB-E001", "GEMM-0001")


@pytest.fixture(scope="module")
def scenarios():
    return dataset(load_bundled()).scenarios


def test_the_causes_add_up_to_the_predicted_time(scenarios):
    profile = load_profile()
    for s in find_scenarios(scenarios, ROWS):
        t = trace(s, profile)
        assert sum(t.causes.values()) == pytest.approx(predict(s, profile).predicted_s,
                                                       rel=1e-9), s.record_id


def test_a_dequant_buffer_prompt_shows_its_conversion_as_serial_time(scenarios):
    # LPCU-0014: 2048 prompt tokens of Llama 3 8B Q4_K_S in 32 micro-batches of 64 on an
    # RTX 4090, MMQ throughout (PR #7860's 'vs. master MMQ'). Priced on master's default
    # path instead, each micro-batch first writes an fp16 copy of the 6.98e9 converted
    # weights (8.03e9 less the embedding and output matrices) in a kernel of its own:
    # serial time of at least 32 x 6.98e9 x 2 bytes at the sheet's 1008 GB/s.
    (s,) = find_scenarios(scenarios, ["LPCU-0014"])
    profile = load_profile()
    mmq = trace(s, profile)
    buffered = trace(replace(s, engine=resolve_engine("llama.cpp+cublas-fp16+ub64")), profile)
    converted = 8.03e9 - 2 * 128256 * 4096
    assert buffered.causes["serial"] - mmq.causes["serial"] >= 32 * converted * 2 / 1008e9
    assert sum(buffered.causes.values()) == pytest.approx(
        predict(replace(s, engine=resolve_engine("llama.cpp+cublas-fp16+ub64")),
                profile).predicted_s, rel=1e-9)


def test_each_constant_names_the_profile_level_it_came_from(scenarios):
    (s,) = find_scenarios(scenarios, ["LCPP-0362"])  # an M1 Max under llama.cpp (Metal)
    profile = Profile(name="hand", values={
        "device:m1-max": {"gemm_fraction": 0.5},
        "class:apple_gpu": {"gemm_fraction": 0.9, "bandwidth_fraction": 0.7},
        "engine:llama.cpp/class:apple_gpu": {"kernel_overhead_s": 3e-6},
        "engine:llama.cpp": {"kernel_overhead_s": 9e-6, "step_overhead_s": 1e-4},
        "global": {"step_overhead_s": 2e-4}})
    used = {c.name: c for c in trace(s, profile).constants}
    assert (used["gemm_fraction"].value, used["gemm_fraction"].level) == (0.5, "device:m1-max")
    assert (used["bandwidth_fraction"].value,
            used["bandwidth_fraction"].level) == (0.7, "class:apple_gpu")
    assert (used["kernel_overhead_s"].value,
            used["kernel_overhead_s"].level) == (3e-6, "engine:llama.cpp/class:apple_gpu")
    assert (used["step_overhead_s"].value, used["step_overhead_s"].level) == (1e-4,
                                                                              "engine:llama.cpp")
    prior = parameter_defs()["link_efficiency"].prior
    assert (used["link_efficiency"].value, used["link_efficiency"].level) == (prior, "prior")


def test_the_printed_command_reproduces_the_rows_prediction(scenarios, phasewise_cli):
    profile = load_profile()
    for record, key in (("LCPP-0362", "tpot_s"), ("LPCU-0014", "ttft_s"), ("PHPR-0022", "tpot_s")):
        (s,) = find_scenarios(scenarios, [record])
        t = trace(s, profile)
        args = shlex.split(t.command)
        assert args[:2] == ["phasewise", "estimate"]
        shown = json.loads(phasewise_cli(*args[1:], "--format", "json").stdout)
        assert shown[key] == pytest.approx(t.prediction.predicted_s, rel=1e-9), record


@pytest.mark.slow  # two fits without one source: in process and in the CLI
def test_why_under_a_held_out_source_is_that_folds_prediction(scenarios, phasewise_cli):
    source = match_source("Splitwise", sources(scenarios))
    expected = {p.record_id: p for p in holdout(scenarios, source)[0]}["PHPR-0022"]
    result = phasewise_cli("validate", "--why", "PHPR-0022", "--holdout-source", "Splitwise",
                 "--format", "json")
    (shown,) = json.loads(result.stdout)
    assert shown["predicted"] == pytest.approx(expected.predicted, rel=1e-9)
    assert shown["profile"] == "without Splitwise" and not shown["command_uses_this_fit"]
    assert sum(shown["causes_s"].values()) == pytest.approx(expected.predicted_s, rel=1e-9)


def test_why_prints_the_row_its_command_and_its_constants(phasewise_cli):
    result = phasewise_cli("validate", "--why", "lcpp-0362")
    text = result.stdout
    assert "LCPP-0362" in text and "m1-max" in text and "Q4_K_M" in text
    assert "reproduce: phasewise estimate -m llama-3-8b -H m1-max" in text
    assert "bandwidth_fraction" in text and "device:m1-max" in text


@pytest.mark.slow  # 10-20 s: a whole fit or validation run; `make test-all` runs it
def test_a_row_faster_than_the_floor_through_fp16_accumulation_says_so(phasewise_cli):
    # LCPP-0237: Llama 3 8B F16, 512-token prompt on an RTX 4080 in 70.6 ms, about 109
    # TFLOP/s of matmuls (7.5e9 weights x 2 x 512), over the sheet's 97.5 TFLOP/s fp16 with
    # fp32 accumulation. ggml-cuda's cuBLAS path accumulates in fp16, which GeForce Ada runs
    # at twice that rate (Ada whitepaper: RTX 4080 fp16 194.9 with fp16 accumulation).
    text = phasewise_cli("validate", "--why", "LCPP-0237").stdout
    assert "measured faster than the speed-of-light floor: the engine accumulates" in text
    assert "2x the sheet's fp16 rate" in text
    (row,) = json.loads(phasewise_cli("validate", "--why", "LCPP-0237", "--format",
                                      "json").stdout)
    assert row["faster_than_floor"] is True and row["fp16_accumulate_speedup"] == 2.0
    # an RTX 6000 Ada runs both accumulations at one rate: nothing to say, and it is slower
    assert "faster than" not in phasewise_cli("validate", "--why", "LCPP-0289").stdout


def test_the_summary_names_the_fp16_accumulate_reason_for_a_row_faster_than_its_floor(scenarios):
    # the summary's list of floor-beating rows gives LCPP-0237 (RTX 4080, F16 prompt) the
    # reason --why gives it; a row beating its floor without the speed-up keeps the generic
    # reason of the summary's header line alone
    (fast,) = find_scenarios(scenarios, ["LCPP-0237"])
    profile = load_profile()
    beaten = predict(fast, profile)
    assert beaten.beats_floor and beaten.fp16_accumulate_speedup == 2.0
    plain = replace(beaten, record_id="PLAIN-1", fp16_accumulate_speedup=1.0)
    lines = ValidationOutcome("in-sample", [beaten, plain], []).summary_lines()
    (named,) = [line for line in lines if "LCPP-0237" in line]
    assert "accumulates 16-bit matmuls in fp16" in named and "2x the sheet's fp16 rate" in named
    (other,) = [line for line in lines if "PLAIN-1" in line]
    assert "fp16" not in other
    # the speed-up is the engine's on this device: an RTX 6000 Ada runs both accumulations
    # at one rate
    (workstation,) = find_scenarios(scenarios, ["LCPP-0289"])
    assert predict(workstation, profile).fp16_accumulate_speedup == 1.0


def test_an_unknown_record_id_is_one_line_and_exit_2(scenarios, phasewise_cli):
    with pytest.raises(InputError, match="NOPE-1"):
        find_scenarios(scenarios, ["NOPE-1"])
    result = phasewise_cli("validate", "--why", "NOPE-1", check=False)
    assert result.returncode == 2
    assert "NOPE-1" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_why_with_a_table_format_or_another_output_is_a_clear_error(phasewise_cli):
    for extra in (["--format", "csv"], ["--rows"], ["--plot", "out"]):
        result = phasewise_cli("validate", "--why", "LCPP-0362", *extra, check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr, extra
        assert "--why" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # 10-20 s: a whole fit or validation run; `make test-all` runs it
def test_why_lists_the_kernels_the_engine_runs_otherwise_than_the_ledger(phasewise_cli):
    """GHLB-0001, a 512-token F16 prompt on an M2 Ultra under llama.cpp without -fa: the
    scores of its unfused attention (512 x 512 a head where the ledger counts 512 x 513 / 2
    causal pairs: 2 x 512 / 513 = 1.996 the FLOPs) move through memory."""
    text = phasewise_cli("validate", "--why", "GHLB-0001").stdout
    assert "kernels the engine runs otherwise than the ledger counts" in text
    score = next(line for line in text.splitlines() if line.strip().startswith("attn.score"))
    assert "attention-unfused" in score and "FLOPs x2" in score
    assert "[attention_score_bytes]" in score
    (doc,) = json.loads(phasewise_cli("validate", "--why", "GHLB-0001", "--format",
                                      "json").stdout)
    kernel = next(k for k in doc["kernels"] if k["op"] == "attn.score")
    assert kernel["flops"] / kernel["op_flops"] == pytest.approx(2 * 512 / 513)
