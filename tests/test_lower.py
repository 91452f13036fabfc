"""Lowering: each engine's kernels for the ledger's operators, one registry per engine."""

from __future__ import annotations

import math

import pytest

from phasewise import estimate
from phasewise.catalog import load_hardware, load_model
from phasewise.ledger import Step, build_ledger
from phasewise.lower import (
    LOWERINGS,
    Kernel,
    lower,
    lowering,
    register_lowering,
    resolve_engine,
    traits_for,
)
from phasewise.specs import Parallelism, Precision


def _op(name, tokens, *, model="llama-3-8b", precision=Precision("fp16", "fp16", "fp16"),
        step=None, par=Parallelism()):
    ledger = build_ledger(load_model(model), step or Step.prefill(tokens), precision, par)
    return next(op for op in ledger.ops if op.name == name)


def test_an_engine_takes_the_generic_lowering_for_kinds_it_registers_none_for():
    assert lowering("tgi", "gemm") is LOWERINGS["generic"]["gemm"]
    assert lowering("llama.cpp", "elementwise") is LOWERINGS["generic"]["elementwise"]
    assert lowering("llama.cpp", "gemm") is not LOWERINGS["generic"]["gemm"]


def test_registering_a_lowering_changes_that_engine_and_kind_only(monkeypatch):
    monkeypatch.setitem(LOWERINGS, "toy", {})

    @register_lowering("toy", "gemm")
    def twice(op, target):
        return Kernel.of(op).__class__(op, "matrix", 2 * op.flops, op.memory_bytes,
                                       op.weights, op.calls, op.hops, rules=("toy",))

    assert lowering("toy", "gemm") is twice and lowering("toy", "attention") is \
        LOWERINGS["generic"]["attention"]
    assert "toy" not in {fn.__name__ for fn in LOWERINGS["generic"].values()}


def test_the_generic_lowering_runs_each_operator_as_the_ledger_counts_it():
    h100 = load_hardware("h100-sxm")
    for op in build_ledger(load_model("llama-3-8b"), Step.prefill(512), Precision()).ops:
        k = lower(op, h100, "bf16")
        assert (k.flops, k.memory_bytes, k.launches, k.hops, k.passes) == \
            (op.flops, op.memory_bytes, op.calls, op.hops, 1.0)
        assert not k.changed and k.extra_bytes == 0


def test_metal_prefill_gemms_compute_whole_32_token_tiles():
    """kernel_mul_mm runs (ne11 + 31) / 32 threadgroups of 32 tokens: 40 tokens cost 64
    tokens' FLOPs, 1.6 times the ledger's; 64 tokens waste nothing."""
    metal = traits_for(resolve_engine("llama.cpp"), load_hardware("m2-ultra"))
    m2 = load_hardware("m2-ultra")
    for tokens, padding in ((40, 64 / 40), (64, 1.0)):
        k = lower(_op("mlp.up", tokens), m2, "fp16", metal)
        assert k.padding == pytest.approx(padding) and "gemm_tile_tokens" in k.rules
        assert k.unit == "matrix"


def test_llama_cpp_without_flash_attention_masks_a_prompt_s_scores_and_moves_them():
    """A 512-token prompt in one pass: kq spans every cell, 512 x 512 scores per head where
    the ledger counts 512 x 513 / 2 causal pairs, so 2 x 512 / 513 the FLOPs; each score
    moves 24 bytes on CUDA (engines.toml): Llama 3 8B has 32 heads and 32 layers."""
    rtx = load_hardware("rtx-4090")
    cuda = traits_for(resolve_engine("llama.cpp"), rtx)
    op = _op("attn.score", 512)
    k = lower(op, rtx, "fp16", cuda)
    assert k.unit == "attention-unfused"
    assert k.padding == pytest.approx(2 * 512 / 513)
    assert k.extra_bytes == pytest.approx(24.0 * 512 * 512 * 32 * 32)
    fused = lower(op, rtx, "fp16", traits_for(resolve_engine("llama.cpp+flash-attn"), rtx))
    assert fused.unit == "attention" and fused.extra_bytes == 0 and fused.flops == op.flops


def test_hip_prefill_converts_quantized_weights_to_a_16_bit_buffer_first():
    """Over 32 tokens ggml-cuda on HIP dequantizes to fp16 (2 bytes a weight) in a kernel
    of its own, then multiplies the copy: the extra bytes are the stored weights read and
    the buffer written, and the GEMM reads the buffer."""
    rx = load_hardware("rx-7900-xtx")
    hip = traits_for(resolve_engine("llama.cpp"), rx)
    op = _op("mlp.up", 512, precision=Precision("q4_0", "fp16", "fp16"))
    k = lower(op, rx, "fp16", hip)
    weights = op.k * op.n * op.calls
    assert k.extra_bytes == pytest.approx(op.weights + 2 * weights)
    assert k.weight_bytes == pytest.approx(2 * weights) and k.launches == 2 * op.calls
    assert not k.dequantized and "dequant_buffer_above_tokens" in k.rules


def test_serving_engines_all_reduce_in_three_rounds_over_nvlink_and_not_over_pcie():
    """vLLM's one-stage custom all-reduce: start barrier, read the peers, end barrier,
    whatever the device count; on PCIe the ledger's NCCL rounds stand."""
    par = Parallelism(tp=8)
    op = _op("tp.allreduce", 1, step=Step.decode(1, 1024), par=par)
    vllm = resolve_engine("vllm")
    for device, hops in (("h100-sxm", op.calls * 3), ("l40s", op.hops)):
        hardware = load_hardware(device)
        k = lower(op, hardware, "fp32", traits_for(vllm, hardware))
        assert k.hops == hops
    assert lower(op, load_hardware("h100-sxm"), "fp32",
                 traits_for(resolve_engine("llama.cpp"), load_hardware("h100-sxm"))).hops == op.hops


def test_detail_shows_the_padded_expert_tiles_the_cost_model_prices():
    """Qwen3-30B-A3B on CUDA: a 512-token micro-batch gives each of 128 experts about 32
    routed tokens in 128-wide MMQ tiles; --detail lists that kernel with its padding."""
    est = estimate("qwen3-30b-a3b", "rtx-4090", precision=Precision("q4_k_m", "fp16", "fp16"),
                   engine="llama.cpp", detail=True)
    experts = next(r for r in est.kernels if r.name == "moe.experts" and
                   r.phase.startswith("prefill"))
    assert experts.flops / experts.op_flops == pytest.approx(4.0, rel=0.02)
    assert experts.rules == ["moe_tile_tokens", "fp16_accumulate"]  # GeForce: 2x
    decode = [r for r in est.kernels if r.phase == "decode" and r.name == "mlp.up"]
    assert all(r.unit == "vector" for r in decode)
    assert estimate("llama-3-8b", "h100-sxm", cost="sol", detail=True).kernels is None
    assert math.isfinite(est.ttft_s)


def test_kernel_dispatch_keys_belong_to_the_engine_whose_lowering_reads_them():
    """matvec_max_tokens is llama.cpp's (its lowering registers it); on vLLM's table it
    means nothing, so engines.toml may not set it there."""
    from phasewise.errors import InputError
    from phasewise.lower.engines import _engine

    assert _engine("llama.cpp", {"matvec_max_tokens": 8}).traits == (("matvec_max_tokens", 8),)
    with pytest.raises(InputError, match="unknown trait 'matvec_max_tokens'"):
        _engine("vllm", {"matvec_max_tokens": 8})
    assert _engine("vllm", {"allreduce_rounds": 3}).traits == (("allreduce_rounds", 3),)
