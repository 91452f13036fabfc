"""`phasewise profile`: microbenchmarks, measured points beside the ledger, refusals,
the JSON document, the roofline, and a run interrupted half way."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from phasewise.catalog import load_model  # noqa: E402
from phasewise.errors import InputError  # noqa: E402
from phasewise.ledger import Step, build_ledger  # noqa: E402
from phasewise.measure import (  # noqa: E402
    Ceilings,
    ProfilePlan,
    check_fits,
    hardware_from_ceilings,
    measure_ceilings,
    prepare_model,
    profile_points,
)
from phasewise.measure.profile import make_point, precision_for  # noqa: E402
from phasewise.measure.timing import Sample  # noqa: E402

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 512, "vocab_size": 1024, "max_position_embeddings": 512,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
# Round ceilings so every ratio below can be checked by hand: ridge = 1e11 / 2e10 = 5.
CEILINGS = Ceilings(device="cpu", device_name="test CPU", device_class="cpu", threads=1,
                    clock="thread-cpu", versions={"torch": "x"}, memory_bytes=16e9,
                    gemm_flops_per_s={"fp32": 1e11, "bf16": 2e11}, gemm_size=64,
                    copy_bytes_per_s=2e10, read_bytes_per_s=2.5e10, buffer_bytes=2**20,
                    warmup=0, repeats=1)


@pytest.fixture()
def tiny_config(tmp_path):
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_CONFIG))
    return path


@pytest.fixture()
def ceilings_file(tmp_path):
    path = tmp_path / "ceilings.json"
    path.write_text(CEILINGS.model_dump_json())
    return path


def run_cli(*args):
    """The CLI in this process; returns its exit code."""
    from phasewise.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code or 0


def test_microbenchmarks_measure_every_format_and_record_the_setup():
    ceilings = measure_ceilings("cpu", gemm_size=128, buffer_bytes=4 * 2**20, warmup=1, repeats=2)
    # bf16 is kept, or said to be left out for running slower than fp32 (torch's fallback;
    # at n = 128 even AMX's path can lose to fp32 on call overhead)
    left_out = {n.split()[0] for n in ceilings.notes if "GEMM left out" in n}
    assert set(ceilings.gemm_flops_per_s) | left_out == {"fp32", "bf16"}
    assert "fp32" in ceilings.gemm_flops_per_s and ceilings.vector_bits in (0, 128, 256, 512)
    assert min(ceilings.gemm_flops_per_s.values()) > 0
    assert ceilings.copy_bytes_per_s > 0 and ceilings.read_bytes_per_s > 0
    assert ceilings.threads == torch.get_num_threads()
    assert ceilings.versions["torch"] == torch.__version__
    assert ceilings.clock == ("thread-cpu" if ceilings.threads == 1 else "wall")


def test_the_local_device_takes_the_measured_ceilings_as_its_peaks():
    hardware = hardware_from_ceilings(CEILINGS)
    assert hardware.peak_flops("fp32") == 1e11
    assert hardware.memory_bandwidth_bytes_per_s == 2e10
    assert hardware.ridge_point("fp32") == 5.0


def test_the_plan_lists_prefill_then_decode_and_sizes_the_cache_for_the_largest():
    plan = ProfilePlan(prompt_lengths=(64, 256), batch_sizes=(1, 8), contexts=(100, 300))
    assert [(phase, s.new_tokens, s.sequences, s.groups[0].cached_tokens)
            for phase, s in plan.steps] == [
        ("prefill", 64, 1, 0), ("prefill", 256, 1, 0), ("decode", 1, 1, 100),
        ("decode", 8, 8, 100), ("decode", 1, 1, 300), ("decode", 8, 8, 300)]
    assert (plan.cache_batch, plan.cache_tokens) == (8, 301)


def test_a_point_sets_the_measured_time_beside_its_ledger():
    spec = load_model("smollm2-135m")
    step = Step.decode(4, 1000)
    point = make_point("decode", step, Sample(0.05, 0.04, 0.06, 3), spec, precision_for("fp32"),
                       hardware_from_ceilings(CEILINGS), CEILINGS, cost=None)
    ledger = build_ledger(spec, step, precision_for("fp32"))
    assert point.flops == ledger.flops and point.memory_bytes == ledger.memory_bytes
    assert point.tokens_per_s == pytest.approx(4 / 0.05)
    assert point.mfu == pytest.approx(ledger.flops / 0.05 / 1e11)
    assert point.mbu == pytest.approx(ledger.memory_bytes / 0.05 / 2e10)
    # four decode tokens read every weight once: far below the ridge of 5 FLOP/byte
    assert point.predicted_bound == "memory" and point.tpot_s == 0.05 and point.ttft_s is None


def test_a_model_that_does_not_fit_is_refused_before_anything_is_allocated(capsys):
    plan = ProfilePlan(prompt_lengths=(128,), batch_sizes=(1,), contexts=(128,))
    with pytest.raises(InputError, match=r"llama-3.1-405b in fp32 needs [\d,.]+ GB"):
        check_fits(load_model("llama-3.1-405b"), plan, "fp32", "cpu")
    assert run_cli("profile", "--model", "llama-3.1-405b", "--device", "cpu") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: llama-3.1-405b in fp32 needs") and err.count("\n") == 1


def test_decode_climbs_from_memory_bound_towards_compute_bound_as_the_batch_grows(tiny_config):
    spec = load_model(str(tiny_config))
    plan = ProfilePlan(prompt_lengths=(), batch_sizes=(1, 64), contexts=(32,), repeats=3)
    model = prepare_model(spec, plan, dtype="fp32", device="cpu")
    small, large = profile_points(model, spec, CEILINGS, plan, dtype="fp32", device="cpu")
    assert small.arithmetic_intensity < 5 < large.arithmetic_intensity  # the ridge
    assert (small.predicted_bound, large.predicted_bound) == ("memory", "compute")
    # how many times the FLOP/s of one token 64 tokens reach is measured, not asserted:
    # benchmarks/bench_profile.py (batch sizes 1 and 64)


def test_profile_writes_a_complete_document_a_table_and_a_roofline(tiny_config, ceilings_file,
                                                                  tmp_path, capsys):
    out, stem = tmp_path / "profile.json", tmp_path / "roofline"
    code = run_cli("profile", "--model", str(tiny_config), "--device", "cpu", "--ceilings",
                   str(ceilings_file), "--prompt-lengths", "16,64", "--batch-size", "1,4",
                   "--context", "32", "--repeats", "1", "--warmup", "0", "--out", str(out),
                   "--plot", str(stem), "--format", "json")
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    document = json.loads(out.read_text())
    assert printed == document and document["complete"] is True
    assert [p["label"] for p in document["points"]] == ["pp16", "pp64", "tg@32×1", "tg@32×4"]
    assert document["ceilings"]["gemm_flops_per_s"]["fp32"] == 1e11
    assert document["model_spec"]["hidden_size"] == 128
    assert stem.with_suffix(".png").stat().st_size > 0
    assert "tg@32×4" in stem.with_suffix(".html").read_text()
    assert run_cli("profile", "--model", str(tiny_config), "--device", "cpu", "--ceilings",
                   str(ceilings_file), "--prompt-lengths", "16", "--batch-size", "1",
                   "--context", "8", "--repeats", "1") == 0
    table = capsys.readouterr().out
    assert "pp16" in table and "MBU" in table and "speed of light" in table


def test_an_interrupted_profile_keeps_the_points_already_measured(tiny_config, ceilings_file,
                                                                 tmp_path, monkeypatch):
    import phasewise.measure.profile as profile_module

    real_measure, calls = profile_module.measure_step, []

    def interrupt_on_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # what Ctrl-C raises
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(profile_module, "measure_step", interrupt_on_the_third)
    out = tmp_path / "partial.json"
    code = run_cli("profile", "--model", str(tiny_config), "--device", "cpu", "--ceilings",
                   str(ceilings_file), "--prompt-lengths", "16,32", "--batch-size", "1,2",
                   "--context", "16", "--repeats", "1", "--out", str(out))
    assert code == 130
    document = json.loads(out.read_text())
    assert document["complete"] is False
    assert [p["label"] for p in document["points"]] == ["pp16", "pp32"]


def test_micro_alone_prints_the_ceilings_as_json(tmp_path, capsys):
    out = tmp_path / "micro.json"
    assert run_cli("profile", "--micro", "--device", "cpu", "--gemm-size", "64", "--buffer-mib",
                   "2", "--repeats", "1", "--format", "json", "--out", str(out)) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) and printed["gemm_size"] == 64


def test_bad_ceilings_files_and_devices_are_one_line_errors(tmp_path, capsys):
    stray = tmp_path / "stray.json"
    stray.write_text("{}")
    assert run_cli("profile", "--ceilings", str(stray), "--device", "cpu") == 2
    assert "not the output of `phasewise profile --micro" in capsys.readouterr().err
    assert run_cli("profile", "--device", "tpu") == 2
    assert "--device tpu" in capsys.readouterr().err


def test_loading_the_cli_and_the_measure_package_does_not_import_torch():
    code = ("import sys, phasewise.cli, phasewise.measure, phasewise.commands.profile; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_fp16_on_a_cpu_is_refused():
    plan = ProfilePlan(prompt_lengths=(8,), batch_sizes=(1,), contexts=(8,))
    with pytest.raises(InputError, match="use --dtype fp32 or bf16"):
        check_fits(load_model("smollm2-135m"), plan, "fp16", "cpu")


def test_gpus_are_classed_by_their_names():
    from phasewise.measure.micro import gpu_class

    assert gpu_class("NVIDIA GeForce RTX 4090") == "consumer_gpu"
    assert gpu_class("NVIDIA RTX A6000") == "workstation_gpu"
    assert gpu_class("NVIDIA H100 80GB HBM3") == "datacenter_gpu"


def test_a_gpu_is_named_without_the_host_threads_a_cpu_with_them():
    from phasewise.measure.micro import measured_name

    gpu = CEILINGS.model_copy(update={"device": "cuda:0", "device_name": "NVIDIA H200",
                                      "device_class": "datacenter_gpu", "threads": 16})
    assert measured_name(gpu) == "NVIDIA H200 (measured)"
    assert measured_name(CEILINGS) == "test CPU (1 thread, measured)"
    assert hardware_from_ceilings(gpu).display_name == "NVIDIA H200 (measured)"


def test_an_mbu_above_100_percent_is_explained():
    from types import SimpleNamespace

    from phasewise.report.profile_view import _mbu_note

    over = SimpleNamespace(points=[SimpleNamespace(label="tg", mbu=1.3),
                                   SimpleNamespace(label="pp512", mbu=0.2)])
    assert "MBU above 100% (tg)" in _mbu_note(over) and "caches" in _mbu_note(over)
    assert _mbu_note(SimpleNamespace(points=[SimpleNamespace(label="tg", mbu=0.9)])) == ""
