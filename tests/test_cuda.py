"""The CUDA paths of `phasewise profile`: event timing, the bf16 and fp8 ceilings, decode
captured as a CUDA graph, MoE experts as grouped GEMMs. CI has no GPU, so these are skipped
there; they run wherever torch sees a CUDA device (`python -m pytest tests/test_cuda.py`, as
benchmarks/bench_cuda.sh's machine does)."""

import json

import pytest

torch = pytest.importorskip("torch")

from phasewise.catalog.hf_config import model_from_config  # noqa: E402
from phasewise.measure import ProfilePlan, measure_ceilings, prepare_model  # noqa: E402
from phasewise.measure.micro import gpu_class  # noqa: E402
from phasewise.measure.profile import capture_graph  # noqa: E402
from phasewise.measure.reference import (  # noqa: E402
    build_model,
    decode_one_token,
    grouped_gemm_runs,
    prefill,
    use_grouped_gemm,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 512, "vocab_size": 1024, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
TINY_MOE = {**TINY, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "num_local_experts": 4, "num_experts_per_tok": 2}


def run_cli(*args):
    from phasewise.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code or 0


def test_ceilings_on_cuda_are_timed_with_events_in_bf16_and_fp8_where_the_chip_has_it():
    ceilings = measure_ceilings("cuda:0", gemm_size=2048, buffer_bytes=256 * 2**20, repeats=3)
    name = torch.cuda.get_device_name(0)
    assert ceilings.clock == "cuda-events"
    assert (ceilings.device_name, ceilings.device_class) == (name, gpu_class(name))
    assert ceilings.versions["cuda"] == torch.version.cuda
    assert ceilings.memory_bytes == torch.cuda.get_device_properties(0).total_memory
    has_fp8 = torch.cuda.get_device_capability(0) >= (8, 9)  # Ada and Hopper on
    assert set(ceilings.gemm_flops_per_s) == ({"bf16", "fp8"} if has_fp8 else {"bf16"})
    assert bool(ceilings.notes) != has_fp8  # a format that did not run is said, not dropped
    assert min(ceilings.gemm_flops_per_s.values()) > 0
    assert ceilings.copy_bytes_per_s > 0 and ceilings.read_bytes_per_s > 0


def test_decode_replayed_as_a_cuda_graph_computes_what_eager_decode_does():
    spec = model_from_config(TINY, "tiny")
    plan = ProfilePlan(prompt_lengths=(16,), batch_sizes=(2,), contexts=(16,))
    model = prepare_model(spec, plan, dtype="fp32", device="cuda:0")
    prompt = torch.randint(0, spec.vocab_size, (2, 16), device="cuda:0")
    token = torch.randint(0, spec.vocab_size, (2, 1), device="cuda:0")
    with torch.inference_mode():
        prefill(model, prompt)
        eager = decode_one_token(model, token, 16).clone()
        cache = model.layers[0].attn.cache
        written = cache.k[:, :, 16].clone()
        cache.k[:, :, 16] = 0  # the replay must write the new token's keys again
        replay = capture_graph(lambda: decode_one_token(model, token, 16))
        assert replay is not None
        cache.k[:, :, 16] = 0
        graphed = replay().clone()
        torch.cuda.synchronize()
    assert torch.allclose(graphed, eager, rtol=1e-5, atol=1e-6)
    assert torch.equal(cache.k[:, :, 16], written)
    assert written.abs().sum() > 0


def test_moe_experts_as_grouped_gemms_on_cuda_compute_what_running_them_one_by_one_does():
    spec = model_from_config(TINY_MOE, "tiny-moe")
    model = build_model(spec, dtype=torch.bfloat16, device="cuda:0")
    if not use_grouped_gemm(model):
        pytest.skip("torch._grouped_mm does not run bf16 on this GPU")
    layer = model.layers[0].mlp
    x = torch.randn(3, 5, spec.hidden_size, device="cuda:0", dtype=torch.bfloat16)
    with torch.inference_mode():
        grouped = layer(x).float()
        layer.grouped = False
        one_by_one = layer(x).float()
    torch.testing.assert_close(grouped, one_by_one, rtol=2e-2, atol=2e-2)


def test_profile_on_cuda_graphs_decode_unless_moe_experts_sync_with_the_host(tmp_path, capsys):
    for name, config in (("dense", TINY), ("moe", TINY_MOE)):
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        out = tmp_path / f"{name}.json"
        assert run_cli("profile", "--model", str(path), "--device", "cuda", "--isl", "16",
                       "-b", "1,4", "--context", "32", "--repeats", "2", "--gemm-size", "1024",
                       "--buffer-mib", "64", "--out", str(out), "--format", "json") == 0
        capsys.readouterr()
        document = json.loads(out.read_text())
        assert document["dtype"] == "bf16" and document["ceilings"]["clock"] == "cuda-events"
        graphed = {p["label"]: p["cuda_graph"] for p in document["points"]}
        # MoE experts run one by one read their counts back on the host; grouped, they do not
        decode_graphed = name == "dense" or grouped_gemm_runs("cuda:0", torch.bfloat16)
        assert graphed == {"pp16": False, "tg@32×1": decode_graphed, "tg@32×4": decode_graphed}
        assert all(p["time_s"] > 0 for p in document["points"])


def test_a_catalog_model_too_large_for_the_gpu_is_refused_before_allocating(capsys):
    # 405B parameters in bf16 are 810 GB: more than any one GPU holds
    assert run_cli("profile", "--model", "llama-3.1-405b", "--device", "cuda", "--isl", "16",
                   "-b", "1", "--context", "16", "--gemm-size", "1024", "--buffer-mib", "64") == 2
    assert "GB is free" in capsys.readouterr().err
