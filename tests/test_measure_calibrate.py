"""`phasewise calibrate`: a profile fitted to one model predicts another on this machine,
and what it writes is read back by the calibrated cost model and `phasewise estimate`."""

import json
import tomllib

import pytest

torch = pytest.importorskip("torch")

from phasewise.catalog.hardware import hardware_from_sheet, load_hardware  # noqa: E402
from phasewise.cost.calibrated import Calibrated  # noqa: E402
from phasewise.cost.calibration import Profile as CalibrationProfile  # noqa: E402
from phasewise.cost.calibration import load_profile  # noqa: E402
from phasewise.errors import InputError  # noqa: E402
from phasewise.ledger import Step, build_ledger  # noqa: E402
from phasewise.measure import ProfilePlan, measure_ceilings, prepare_model, profile_points  # noqa: E402
from phasewise.measure.calibrate import (  # noqa: E402
    calibrated_model,
    fit_calibration,
    hardware_sheet_toml,
    spec_from_document,
    spec_to_document,
)
from phasewise.measure.micro import hardware_from_ceilings  # noqa: E402
from phasewise.measure.profile import precision_for  # noqa: E402
from phasewise.measure.types import Profile  # noqa: E402
from phasewise.specs import ModelSpec  # noqa: E402

# Two small random-weight models of different depth, width, vocabulary and attention shape.
CALIBRATED_ON = ModelSpec(name="small-a", hidden_size=512, num_layers=4, num_heads=8,
                          num_kv_heads=2, head_dim=64, intermediate_size=1536, vocab_size=8192,
                          tie_word_embeddings=True)
HELD_OUT = ModelSpec(name="small-b", hidden_size=576, num_layers=3, num_heads=9, num_kv_heads=3,
                     head_dim=64, intermediate_size=1600, vocab_size=10240)
HELD_OUT_TOLERANCE = 0.15  # the acceptance: within 15% of the measurement


@pytest.fixture(scope="module")
def ceilings():
    return measure_ceilings("cpu", gemm_size=512, buffer_bytes=32 * 2**20, repeats=3)


def profile_of(spec, plan, ceilings):
    model = prepare_model(spec, plan, dtype="fp32", device="cpu")
    points = list(profile_points(model, spec, ceilings, plan, dtype="fp32", device="cpu"))
    return Profile(tool_version="test", model=spec.name, model_spec=spec_to_document(spec),
                   weights="random (seed 0)", dtype="fp32", device="cpu", ceilings=ceilings,
                   points=points, complete=True)


# The points' times are only read by the fit's plumbing here (the held-out check re-times
# them), so a few repeats do.
CALIBRATION_PLAN = ProfilePlan(prompt_lengths=(64, 128, 256, 512), batch_sizes=(1,),
                               contexts=(64, 512), warmup=1, repeats=3)


@pytest.fixture(scope="module")
def calibration_profile(ceilings):
    return profile_of(CALIBRATED_ON, CALIBRATION_PLAN, ceilings)


# A machine that runs exactly as a calibrated model with these constants says: the
# deterministic clock of the held-out check (the measured check, on this machine's real
# times, is benchmarks/bench_profile.py: a neighbour's burst moves CPU times by 20-30%).
TRUE_WORLD = CalibrationProfile("true-world", values={"global": {
    "gemm_fraction": 0.9, "bandwidth_fraction": 0.9, "gemm_efficiency": 0.6,
    "bandwidth_efficiency": 0.7, "kernel_overhead_s": 2e-5, "step_overhead_s": 1e-4}})


def _step(point):
    return (Step.prefill(point.new_tokens, batch=point.batch_size) if point.phase == "prefill"
            else Step.decode(point.batch_size, point.context_tokens))


def test_a_calibration_on_one_model_predicts_another_on_a_machine_that_runs_as_modelled(
        calibration_profile):
    """Every point of the calibration run is re-timed by TRUE_WORLD on the run's measured
    ceilings; the fit sees only those times (and the ceilings), and must then price another
    model's prefill and decode, of other depth, width and attention shape, within 15% of the
    same clock."""
    hardware = hardware_from_ceilings(calibration_profile.ceilings, name="local")
    world = Calibrated.for_device(hardware, calibration=TRUE_WORLD)

    def clock(spec, step):
        ledger = build_ledger(spec, step, precision_for("fp32"))
        return world.step_time(ledger, hardware).total.time_s

    timed = calibration_profile.model_copy(update={"points": [
        p.model_copy(update={"time_s": clock(CALIBRATED_ON, _step(p))})
        for p in calibration_profile.points]})
    result, fitted_hardware = fit_calibration([timed])
    fitted = calibrated_model(result, fitted_hardware)
    for step in (Step.prefill(256), Step.decode(1, 256)):
        ledger = build_ledger(HELD_OUT, step, precision_for("fp32"))
        assert fitted.step_time(ledger, fitted_hardware).total.time_s == pytest.approx(
            clock(HELD_OUT, step), rel=HELD_OUT_TOLERANCE)


def test_the_fit_records_what_it_was_fitted_to(calibration_profile):
    result, hardware = fit_calibration([calibration_profile])
    fit = result.profile.fit
    # 6 points, a GEMM row per format kept as a ceiling (bf16 is left out where this CPU
    # runs it slower than fp32: micro.ceiling_formats), 1 copy
    gemms = len(calibration_profile.ceilings.gemm_flops_per_s)
    assert gemms in (1, 2)
    assert fit["models"] == ["small-a"] and fit["rows"] == 6 + gemms + 1
    assert "gemm_fraction" in result.profile.values[f"device:{hardware.name}"]


def test_calibrate_writes_a_profile_and_a_sheet_that_estimate_reads(calibration_profile,
                                                                   tmp_path, capsys):
    from phasewise.cli import main

    source = tmp_path / "profile.json"
    source.write_text(calibration_profile.model_dump_json())
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "--from", str(source), "--out-dir", str(tmp_path / "local"),
              "--format", "json"])
    assert exit_info.value.code in (0, None)
    report = json.loads(capsys.readouterr().out)
    profile = load_profile(report["calibration"])
    assert profile.values["global"]["kernel_overhead_s"] > 0
    sheet = load_hardware(report["hardware"])
    assert sheet.peak_flops("fp32") == pytest.approx(
        calibration_profile.ceilings.gemm_flops_per_s["fp32"], rel=1e-5)
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--model", "smollm2-135m", "--hardware", report["hardware"],
              "--cost", "calibrated", "--calibration", report["calibration"],
              "--weight-dtype", "fp32", "--act-dtype", "fp32", "--kv-dtype", "fp32",
              "--format", "json"])
    assert exit_info.value.code in (0, None)
    estimate = json.loads(capsys.readouterr().out)
    assert estimate["inputs"]["cost_model"] == "calibrated" and estimate["tpot_s"] > 0


def test_the_hardware_sheet_holds_the_measured_ceilings_with_their_source(ceilings):
    sheet = tomllib.loads(hardware_sheet_toml(ceilings))
    device = hardware_from_sheet(sheet, "local")
    assert device.name == "local" and device.device_class == "cpu"
    assert device.memory_bandwidth_bytes_per_s == pytest.approx(ceilings.copy_bytes_per_s, rel=1e-5)
    assert "measured" in sheet["compute"]["source"] and "copy" in sheet["memory"]["source"]


def test_a_profile_document_gives_back_the_model_it_ran():
    spec = ModelSpec(name="sliding", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=16, intermediate_size=96, vocab_size=100,
                     layer_types=("sliding", "full"), sliding_window=8)
    document = json.loads(json.dumps(spec_to_document(spec)))  # through JSON: tuples to lists
    assert spec_from_document(Profile(tool_version="t", model="sliding", model_spec=document,
                                      weights="", dtype="fp32", device="cpu",
                                      ceilings=_any_ceilings())) == spec


def _any_ceilings():
    from phasewise.measure.types import Ceilings

    return Ceilings(device="cpu", device_name="x", device_class="cpu", threads=1, clock="wall",
                    versions={}, memory_bytes=1e9, gemm_flops_per_s={"fp32": 1e10}, gemm_size=8,
                    copy_bytes_per_s=1e10, read_bytes_per_s=1e10, buffer_bytes=8, warmup=0,
                    repeats=1)


def test_hardware_local_reads_what_calibrate_measured_on_this_machine(calibration_profile,
                                                                      tmp_path, monkeypatch,
                                                                      capsys):
    from phasewise.cli import main

    monkeypatch.setenv("PHASEWISE_HOME", str(tmp_path / "home"))
    source = tmp_path / "profile.json"
    source.write_text(calibration_profile.model_dump_json())
    with pytest.raises(SystemExit):
        main(["calibrate", "--from", str(source), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["usage"] == "phasewise estimate --hardware local"
    common = ["estimate", "--model", "smollm2-135m", "--weight-dtype", "fp32", "--act-dtype",
              "fp32", "--kv-dtype", "fp32", "--format", "json"]
    with pytest.raises(SystemExit):
        main([*common, "--hardware", "local"])
    local = json.loads(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main([*common, "--hardware", report["hardware"], "--calibration", report["calibration"]])
    explicit = json.loads(capsys.readouterr().out)
    assert local["inputs"]["hardware"] == "local"
    assert local["tpot_s"] == explicit["tpot_s"] and local["ttft_s"] == explicit["ttft_s"]


def test_hardware_local_before_calibrating_says_to_calibrate(tmp_path, monkeypatch, capsys):
    from phasewise.cli import main

    monkeypatch.setenv("PHASEWISE_HOME", str(tmp_path / "empty"))
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--hardware", "local"])
    assert exit_info.value.code == 2
    assert "phasewise calibrate" in capsys.readouterr().err


@pytest.mark.parametrize("free_gb, chosen", [
    # bf16, prompts up to 4096 tokens, decode batches up to 8: the KV cache holds 8 × 4096
    # tokens. Llama-3.1-8B: 16.1 GB of weights + 32 layers × 8 KV heads × 128 × 2 × 2 B ×
    # 32,768 tokens = 4.3 GB; Llama-3.2-3B: 6.4 + 28 × 8 × 128 × 4 B × 32,768 = 3.8 GB;
    # Llama-3.2-1B: 2.5 + 16 × 8 × 64 × 4 B × 32,768 = 1.1 GB (activations on top of each).
    (80, "llama-3.1-8b"), (16, "llama-3.2-3b"), (8, "llama-3.2-1b")])
def test_calibrate_on_a_gpu_profiles_the_largest_default_model_that_fits(monkeypatch, free_gb,
                                                                          chosen):
    from phasewise.commands.calibrate import CUDA_DEFAULTS, CUDA_MODELS, _plan, largest_that_fits

    monkeypatch.setattr("phasewise.measure.profile.available_memory_bytes",
                        lambda device: free_gb * 1e9)
    plan = _plan(CUDA_DEFAULTS["prompt_lengths"], CUDA_DEFAULTS["batch_size"], "128,1024", 3)
    assert (plan.cache_batch, plan.cache_tokens) == (8, 4096)
    assert largest_that_fits(CUDA_MODELS, plan, "bf16", "cuda:0") == chosen


def test_calibrate_on_a_gpu_too_small_for_every_default_says_to_name_a_model(monkeypatch):
    from phasewise.commands.calibrate import CUDA_DEFAULTS, CUDA_MODELS, _plan, largest_that_fits

    monkeypatch.setattr("phasewise.measure.profile.available_memory_bytes", lambda device: 2e9)
    plan = _plan(CUDA_DEFAULTS["prompt_lengths"], CUDA_DEFAULTS["batch_size"], "128,1024", 3)
    with pytest.raises(InputError, match="llama-3.2-1b.*--model"):
        largest_that_fits(CUDA_MODELS, plan, "bf16", "cuda:0")
