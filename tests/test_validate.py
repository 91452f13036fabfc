"""phasewise validate: rows to scenarios, predictions through estimate, bad rows, reports."""

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from phasewise import estimate
from phasewise.catalog.software_text import named_engine
from phasewise.cost.calibration import load_profile, resolve_engine
from phasewise.errors import InputError
from phasewise.report.output import rows_to_markdown
from phasewise.report.validate_plot import source_colours
from phasewise.specs.precision import number_format
from phasewise.validate import scenario as scenario_module
from phasewise.validate.measurements import bundled_paths, load_bundled, load_measurements
from phasewise.validate.run import (
    dataset,
    fit,
    holdout,
    leave_one_source_out,
    match_source,
    predict,
    sources,
)
from phasewise.validate.scenario import (
    MappingError,
    engine_for,
    parallelism_for,
    precision_for,
    resolve_device,
    resolve_model,
    scenario_for,
)
from phasewise.validate.score import score as score_by_source
from phasewise.validate.score import score_rows

HEADER = ("record_id,phase,source_name,hardware,num_accelerators,model,weight_dtype,"
          "software_stack,parallelism,batch_or_concurrency,input_len,output_len,kv_depth,"
          "metric,value,unit")
README = Path(__file__).resolve().parent.parent / "README.md"


def run(*args, check=True, timeout=300):
    result = subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                            text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.mark.parametrize("written, catalog", [
    ("NVIDIA GeForce RTX 3070 8GB", "rtx-3070"),
    ("NVIDIA RTX 6000 Ada 48GB", "rtx-6000-ada"),
    ("NVIDIA A100 PCIe 80GB", "a100-80gb-pcie"),
    ("NVIDIA A100 80GB (DGX-A100)", "a100-80gb-sxm"),
    ("NVIDIA H100 80GB (DGX-H100)", "h100-sxm"),
    ("Apple M2 Ultra 76-Core GPU 192GB", "m2-ultra"),
    ("Apple M1 7-Core GPU 8GB", "m1"),
    ("NVIDIA GH200 SXM (900W, 141GiB HBM3e)", "gh200"),
    ("NVIDIA GB200 SXM", "gb200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA V100", "v100-sxm2-32gb"),
])
def test_device_names_as_sources_write_them_find_their_sheet(written, catalog):
    assert resolve_device(written).name == catalog


@pytest.mark.parametrize("written, catalog", [
    ("Llama 3 8B", "llama-3-8b"), ("Llama-2 70B", "llama-2-70b"),
    ("BLOOM 176B", "bloom-176b"), ("Mixtral 8x7B (MoE)", "mixtral-8x7b"),
])
def test_model_names_as_sources_write_them_find_their_config(written, catalog):
    assert resolve_model(written).name == catalog


@pytest.mark.parametrize("written, catalog", [
    ("Mixtral 8x7B Instruct", "mixtral-8x7b"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("Mistral-7B-Instruct-v0.1", "mistral-7b"),
    ("Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
    ("Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b"),
    ("gemma-3-4b-it", "gemma-3-4b"),
    ("Qwen2.5-7B-Instruct-GGUF", "qwen2.5-7b"),
])
def test_checkpoint_words_and_repo_owners_are_peeled_off_model_names(written, catalog):
    assert resolve_model(written).name == catalog


def test_a_name_that_is_only_checkpoint_words_still_fails_clearly():
    with pytest.raises(MappingError, match="unknown model 'Instruct-v2'"):
        resolve_model("Instruct-v2")
    # A version may change the network (v0.2 dropped v0.1's sliding window): not peeled.
    with pytest.raises(MappingError, match="unknown model"):
        resolve_model("Mistral-7B-Instruct-v0.3")


@pytest.mark.parametrize("written, bits", [
    # ggml-common.h block_iq4_xs: fp16 d, uint16 scales_h, 4 bytes scales_l, 128 bytes of
    # nibbles = 136 bytes per 256 weights = 4.25 bits.
    ("IQ4_XS", 4.25),
    # block_iq4_nl: fp16 d + 16 bytes per 32 weights = 18 B / 32 = 4.5 bits.
    ("IQ4_NL", 4.5),
    # block_iq2_xxs: fp16 d + 32 uint16 = 66 B / 256 = 2.0625, listed as 2.06.
    ("IQ2_XXS", 2.06),
    # quantize's table: Q3_K_S is 3.41 GiB for Llama-3-8B's 8.03 B weights:
    # 3.41 * 2^30 * 8 / 8.03e9 = 3.648 bits.
    ("Q3_K - Small", 3.65),
    # llama-bench's 'MXFP4 MoE' (the MXFP4_MOE file type): every weight but the routed
    # experts in Q8_0, 34 B / 32 = 8.5 bits (the experts: 17 B / 32 = 4.25 bits)
    ("MXFP4 MoE", 8.5),
])
def test_gguf_i_quants_and_k_quant_mixes_map_to_their_bits(written, bits):
    precision = precision_for(written)
    assert precision.activations == "fp16"
    assert number_format(precision.weights).bits_per_element == pytest.approx(bits, abs=0.01)


def test_a_split_over_several_devices_without_a_degree_takes_the_engine_default():
    llama, vllm = resolve_engine("llama.cpp"), resolve_engine("vllm")
    # llama.cpp's default --split-mode layer: consecutive layers per device, run in turn.
    assert (parallelism_for("", 4, llama).tp, parallelism_for("", 4, llama).pp) == (1, 4)
    assert parallelism_for("layer split", 2).pp == 2
    assert parallelism_for("-sm row", 2, llama).tp == 2
    assert parallelism_for("2x GPUs", 2, vllm).tp == 2
    assert parallelism_for("", 8, vllm).tp == 8
    assert parallelism_for("", 1, llama).devices == 1
    with pytest.raises(MappingError, match="1 devices but the row says 8"):
        parallelism_for("single device", 8, llama)
    with pytest.raises(MappingError, match="layer split"):
        parallelism_for("expert magic", 4, vllm)


def test_formats_parallelism_and_engines_are_read_from_the_row():
    gguf = precision_for("Q4_K_M")
    assert (gguf.weights, gguf.activations, gguf.kv_cache) == ("Q4_K_M", "fp16", "fp16")
    assert precision_for("F16").weights == "F16" and precision_for("F16").activations == "fp16"
    fp8 = precision_for("FP8 (float8_e4m3fn)")
    assert (fp8.weights, fp8.activations, fp8.kv_cache) == ("fp8", "fp8", "fp16")
    assert precision_for("FP16").math_format == "fp16"
    assert parallelism_for("TP8", 8).tp == 8
    assert parallelism_for("single device", 1).devices == 1
    with pytest.raises(MappingError, match="4 devices"):
        parallelism_for("TP4", 8)
    assert named_engine("llama.cpp (May 2024) llama-bench, Metal") == "llama.cpp"
    assert named_engine("TensorRT-LLM v0.9.0 (gptSessionBenchmark)") == "trtllm"
    assert named_engine("not recorded (Splitwise paper's profiling setup)") == "unrecorded"
    h100 = resolve_device("H100 SXM")
    with pytest.raises(MappingError, match="unknown engine"):
        engine_for(SimpleNamespace(engine="", software_stack="MyServe 2.0"), h100)


def test_a_row_states_its_engine_and_variants_and_its_text_is_read_only_without_them():
    # the engine column wins over the text; without it, the text's flags select variants
    # (llama-bench's -fa 1 is llama.cpp's flash-attn variant, engines.toml)
    h100 = resolve_device("H100 SXM")
    stated = SimpleNamespace(engine="llama.cpp+ub1024", software_stack="llama-bench -fa 1")
    assert engine_for(stated, h100).name == "llama.cpp+ub1024"
    assert engine_for(stated, h100).prefill_ubatch_tokens == 1024
    read = SimpleNamespace(engine="", software_stack="llama.cpp llama-bench build 7941, -fa 1")
    assert engine_for(read, h100).name == "llama.cpp+flash-attn"
    with pytest.raises(MappingError, match="no variant 'fast'"):
        engine_for(SimpleNamespace(engine="llama.cpp+fast", software_stack=""), h100)


def _rows(*lines):
    return "\n".join([HEADER, *lines]) + "\n"


def test_metrics_become_the_time_they_measure(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(_rows(
        "A,prefill,S,NVIDIA GeForce RTX 4090 24GB,1,Llama 3 8B,Q4_K_M,llama.cpp,single device,1,512,,0,pp512_throughput,1024,tokens/s",
        "B,decode,S,NVIDIA GeForce RTX 4090 24GB,1,Llama 3 8B,Q4_K_M,llama.cpp,single device,1,,128,0,tg128_throughput,100,tokens/s",
        "C,prefill,S,NVIDIA H100,1,Llama-2 7B,FP8,TensorRT-LLM,TP1,1,128,1,,first_token_latency,6.3,ms",
        "D,end_to_end,S,NVIDIA H100,2,Llama-2 70B,FP8,TensorRT-LLM,TP2,64,128,128,,output_throughput_per_gpu,1000,output tokens/s per GPU",
    ))
    a, b, c, d = (scenario_for(r) for r in load_measurements(path).rows)
    assert (a.kind, a.workload.isl, a.measured_s) == ("prefill", 512, pytest.approx(0.5))
    assert (b.kind, b.workload.osl, b.measured_s) == ("decode", 128, pytest.approx(0.01))
    assert (c.kind, c.measured_s) == ("prefill", pytest.approx(0.0063))
    # 64 requests × 128 tokens at 1000 tokens/s on each of 2 GPUs: 4.096 s end to end
    assert (d.kind, d.parallelism.tp, d.measured_s) == ("end_to_end", 2, pytest.approx(4.096))


def test_the_estimate_for_a_row_is_the_validate_prediction_for_it():
    data = dataset(load_bundled())
    profile = load_profile()
    picked = {}
    for s in data.scenarios:
        picked.setdefault((s.source, s.kind, s.metric), s)
    for s in picked.values():
        p = predict(s, profile)
        if s.kind in ("gemm", "memory_bw"):
            continue
        est = estimate(s.model.name, s.hardware.name, s.workload, s.precision, s.parallelism,
                       cost="calibrated", engine=s.engine.name)
        expected = {"prefill": est.ttft_s, "decode": est.tpot_s,
                    "end_to_end": est.e2el_s}[s.kind]
        assert p.predicted_s == pytest.approx(expected, rel=1e-12), s.record_id


@pytest.mark.slow  # 10-20 s: a whole fit or validation run; `make test-all` runs it
def test_the_fit_prices_rows_exactly_as_estimates_do():
    data = dataset(load_bundled())
    chosen = data.scenarios[::7]
    result = fit(chosen)
    for scenario, fitted_s in zip(chosen, result.predicted_s, strict=True):
        assert predict(scenario, result.profile).predicted_s == pytest.approx(fitted_s, rel=1e-9)


def test_bad_rows_are_named_and_the_rest_kept(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(_rows(
        "OK-1,decode,S,NVIDIA GeForce RTX 4090 24GB,1,Llama 3 8B,Q4_K_M,llama.cpp,single device,1,,128,0,tg128_throughput,120,tokens/s",
        "BAD-DEV,decode,S,Imaginary GPU 9000,1,Llama 3 8B,Q4_K_M,llama.cpp,single device,1,,128,0,tg128_throughput,120,tokens/s",
        "BAD-MODEL,decode,S,NVIDIA GeForce RTX 4090 24GB,1,Llama 9 999B,Q4_K_M,llama.cpp,single device,1,,128,0,tg128_throughput,120,tokens/s",
        "BAD-UNIT,decode,S,NVIDIA GeForce RTX 4090 24GB,1,Llama 3 8B,Q4_K_M,llama.cpp,single device,1,,128,0,tg128_throughput,120,furlongs",
        "BAD-VALUE,decode,S,NVIDIA GeForce RTX 4090 24GB,1,Llama 3 8B,Q4_K_M,llama.cpp,single device,1,,128,0,tg128_throughput,fast,tokens/s",
    ).replace("unit\n", "unit,colour\n", 1))
    data = dataset([load_measurements(path)])
    assert [s.record_id for s in data.scenarios] == ["OK-1"]
    reasons = {p.record_id: p.reason for p in data.skipped}
    assert set(reasons) == {"BAD-DEV", "BAD-MODEL", "BAD-UNIT", "BAD-VALUE"}
    assert "Imaginary GPU 9000" in reasons["BAD-DEV"] and "Llama 9 999B" in reasons["BAD-MODEL"]
    assert "furlongs" in reasons["BAD-UNIT"] and "fast" in reasons["BAD-VALUE"]
    assert data.unknown_columns == ["bad.csv: colour"]
    result = run("validate", "--measurements", str(path))
    assert "OK-1" not in result.stderr
    for record in ("BAD-DEV", "BAD-MODEL", "BAD-UNIT", "BAD-VALUE"):
        assert record in result.stderr
    assert "skipped 4 row(s)" in result.stderr and "colour" in result.stderr
    why = run("validate", "--measurements", str(path), "--why", "bad-dev", check=False)
    assert why.returncode == 2 and "Traceback" not in why.stderr
    assert "BAD-DEV is skipped, not scored" in why.stderr and "Imaginary GPU 9000" in why.stderr


def test_rows_faster_than_the_speed_of_light_floor_are_named(tmp_path):
    # Llama 3.1 8B in bf16 holds 8.03e9 weights = 16.06 GB; an H100 SXM streams 3.35 TB/s,
    # so a decode step cannot take less than 16.06 / 3350 s = 4.8 ms: 1,000 tokens/s (1 ms)
    # beats the floor, 100 tokens/s (10 ms) does not.
    path = tmp_path / "fast.csv"
    path.write_text(_rows(
        "TOO-FAST,decode,S,NVIDIA H100 SXM,1,Llama 3.1 8B,BF16,vLLM,TP1,1,,128,0,tg128_throughput,1000,tokens/s",
        "PLAUSIBLE,decode,S,NVIDIA H100 SXM,1,Llama 3.1 8B,BF16,vLLM,TP1,1,,128,0,tg128_throughput,100,tokens/s",
    ))
    result = run("validate", "--measurements", str(path))
    assert "1 row(s) measured faster than the speed-of-light floor" in result.stderr
    assert "TOO-FAST" in result.stderr and "PLAUSIBLE" not in result.stderr
    doc = json.loads(run("validate", "--measurements", str(path), "-f", "json").stdout)
    assert doc["faster_than_floor"] == ["TOO-FAST"]
    why = run("validate", "--measurements", str(path), "--why", "TOO-FAST").stdout
    assert "measured faster than the speed-of-light floor" in why
    assert "faster than" not in run("validate", "--measurements", str(path), "--why",
                                    "PLAUSIBLE").stdout


def test_rows_whose_workload_the_ledger_cannot_describe_are_excluded_one_line_a_reason(tmp_path):
    # llama-batched-bench feeds token 0 everywhere: a MoE model's decode of B > 1 copies and
    # its prompt of one repeated token are excluded (one shared reason, one summary line);
    # one sequence's decode, a dense model under the same tool and llama-bench are scored.
    tool = "llama.cpp llama-batched-bench (CUDA backend)"
    rows = [f"MOE-B{b},decode,S,NVIDIA GeForce RTX 4090,1,Qwen3-30B-A3B,Q4_0,{tool},"
            f"single device,{b},,32,512,tg32_throughput,{50 * b},tokens/s" for b in (1, 2, 4, 8, 16, 32)]
    rows += [f"MOE-PP,prefill,S,NVIDIA GeForce RTX 4090,1,Qwen3-30B-A3B,Q4_0,{tool},"
             "single device,1,512,,0,pp512_throughput,3000,tokens/s",
             f"DENSE-B32,decode,S,NVIDIA GeForce RTX 4090,1,Llama 3 8B,Q4_0,{tool},"
             "single device,32,,32,512,tg32_throughput,1500,tokens/s",
             "BENCH-PP,prefill,S,NVIDIA GeForce RTX 4090,1,Qwen3-30B-A3B,Q4_0,llama.cpp llama-bench,"
             "single device,1,512,,0,pp512_throughput,3000,tokens/s"]
    path = tmp_path / "batched.csv"
    path.write_text(_rows(*rows))
    data = dataset([load_measurements(path)])
    assert {s.record_id for s in data.scenarios} == {"MOE-B1", "DENSE-B32", "BENCH-PP"}
    assert {p.record_id for p in data.excluded} == {"MOE-B2", "MOE-B4", "MOE-B8", "MOE-B16",
                                                    "MOE-B32", "MOE-PP"}
    result = run("validate", "--measurements", str(path))
    assert "excluded 6 row(s)" in result.stderr
    line = [x for x in result.stderr.splitlines() if x.startswith("  6 rows (")]
    assert line == [f"  6 rows (MOE-B2, MOE-B4, MOE-B8, MOE-B16 and 2 more): "
                    f"{scenario_module.UNSCORABLE_SAME_TOKEN}"]
    doc = json.loads(run("validate", "--measurements", str(path), "-f", "json").stdout)
    assert len(doc["excluded"]) == 6
    why = run("validate", "--measurements", str(path), "--why", "MOE-B32", check=False)
    assert why.returncode == 2 and why.stderr.count("\n") == 1
    assert "MOE-B32 is excluded, not scored: a MoE model under llama-batched-bench" in why.stderr


def test_a_file_without_the_needed_columns_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("record_id,value\nA,1\n")
    result = run("validate", "--measurements", str(path), check=False)
    assert result.returncode == 2 and "missing column" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.slow  # a fit to every row but one source's
def test_holding_out_a_source_fits_without_any_of_its_rows():
    data = dataset(load_bundled())
    known = sources(data.scenarios)
    source = match_source("TensorRT-LLM", known)
    predictions, result = holdout(data.scenarios, source)
    assert predictions and {p.source for p in predictions} == {source}
    assert source not in {o.source for o in result.observations}
    with pytest.raises(InputError, match="Splitwise"):
        match_source("nonesuch", known)


@pytest.mark.slow  # 10-20 s: a whole fit or validation run; `make test-all` runs it
def test_json_document_scores_each_source_and_phase_for_both_models(tmp_path):
    # every bundled file but TensorRT-LLM's max-throughput tables, whose 246 replays take a
    # minute (benchmarks/bench_validate_serving_rows.py runs them)
    files = [a for path in bundled_paths() if not path.name.startswith("trtllm_perf_overview")
             for a in ("--measurements", str(path))]
    doc = json.loads(run("validate", *files, "--format", "json", "--plot", str(tmp_path)).stdout)
    assert doc["schema_version"] == 1 and doc["mode"]
    phases = {(s["source"], s["phase"]) for s in doc["scores"]}
    assert ("all", "prefill") in phases and ("all", "decode") in phases
    for score in doc["scores"]:
        assert score["count"] > 0 and score["sol_median_abs_error"] >= 0
    assert len(doc["excluded"]) >= 4
    # every layout of the bundled serving runs has a ledger form (dstack's SGLang rows run
    # their experts tensor-parallel under DP attention: docs/layouts.md)
    assert doc["skipped"] == []
    assert ("all", "serving") in phases
    assert (tmp_path / "validate.png").stat().st_size > 0
    assert "<svg" in (tmp_path / "validate.html").read_text()


def test_every_bundled_source_gets_a_colour_of_its_own_in_the_scatter_plot():
    count = len(sources(dataset(load_bundled()).scenarios))
    assert count > 10  # more sources than one ten-colour palette holds
    for n in (3, count, 60):
        assert len(set(source_colours(n))) == n


VALIDATION_DOC = README.parent / "docs" / "validation.md"
# The targets for leave-one-source-out: (median, p90) abs error per phase, and each
# median at least this many times below speed of light's.
TARGETS = {"prefill": (0.20, 0.40), "decode": (0.12, 0.30)}
BELOW_SPEED_OF_LIGHT = 3.0


def _marked_table(path: Path, marker: str) -> str:
    text = path.read_text()
    match = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", text, re.S)
    assert match, f"{path.name} has no table between the {marker} markers"
    return match.group(1).strip()


@pytest.fixture(scope="module")
def held_out():
    """Every bundled row predicted by a fit that never saw its source (minutes: run once
    for the slow tests below)."""
    return leave_one_source_out(dataset(load_bundled()).scenarios)


@pytest.mark.slow
def test_the_documented_held_out_figures_are_what_validate_prints(held_out):
    """docs/validation.md holds `validate --leave-one-source-out --format md` as it prints
    it (the same scores and rendering), and the README its rows over every source."""
    printed = rows_to_markdown(score_rows(score_by_source(held_out))).strip()
    assert _marked_table(VALIDATION_DOC, "validate:loso") == printed
    lines = printed.splitlines()
    summary = _marked_table(README, "validate:summary").splitlines()
    assert summary == lines[:2] + [line for line in lines if line.startswith("| all |")]


@pytest.mark.slow
def test_held_out_predictions_meet_the_accuracy_targets(held_out):
    """Decode median <= 12% and p90 <= 30%, prefill median <= 20% and p90 <= 40%, each
    median at least 3x below the speed-of-light floor's."""
    for phase, (median, p90) in TARGETS.items():
        rows = [p for p in held_out if p.phase == phase]
        errors = np.abs([p.error for p in rows])
        floor = np.abs([p.floor_error for p in rows])
        got_median, got_p90 = float(np.median(errors)), float(np.percentile(errors, 90))
        assert got_median <= median and got_p90 <= p90, (phase, got_median, got_p90)
        assert float(np.median(floor)) >= BELOW_SPEED_OF_LIGHT * got_median, phase


def test_leaving_each_source_out_reports_every_fold_before_it_runs():
    scenarios = [s for s in dataset(load_bundled()).scenarios
                 if s.source.startswith(("vLLM CI", "GitHub llama-bench"))]
    heard = []
    predictions = leave_one_source_out(scenarios, progress=lambda *fold: heard.append(fold))
    held = sorted({s.source for s in scenarios})
    assert [(done, total) for done, total, _ in heard] == [(0, 2), (1, 2)]
    assert sorted(source for _, _, source in heard) == held
    assert {p.source for p in predictions} == set(held)


def test_the_fold_progress_bar_stays_off_the_output_when_stderr_is_not_a_terminal():
    from phasewise.commands.validate import _fold_progress

    with _fold_progress(True) as progress:  # pytest captures stderr: not a terminal
        assert progress is None
    with _fold_progress(False) as progress:
        assert progress is None
