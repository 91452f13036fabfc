"""KV-cache compression (--kv-keep) and KV quantization in the ledger, by hand calculation."""

import pytest

from phasewise.catalog import load_model
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger, kv_cache_bytes_per_device
from phasewise.specs import Parallelism, Precision

LLAMA_8B = load_model("llama-3.1-8b")
# Llama-3.1-8B: 32 layers, 8 KV heads of 128 → 2·8·128 = 2048 KV elements per token and layer.
KV_ELEMENTS_PER_TOKEN_LAYER = 2 * 8 * 128
LAYERS = 32


def _op(ledger, name):
    return next(op for op in ledger.ops if op.name == name)


def test_keeping_half_the_cache_halves_decode_kv_reads():
    full = build_ledger(LLAMA_8B, Step.decode(1, 4096))
    half = build_ledger(LLAMA_8B, Step.decode(1, 4096), Precision(kv_keep=0.5))
    # 2048 kept tokens × 32 layers × 2048 elements × 2 bytes
    assert half.bytes("kv_read") == pytest.approx(2048 * LAYERS * KV_ELEMENTS_PER_TOKEN_LAYER * 2)
    assert full.bytes("kv_read") == pytest.approx(2 * half.bytes("kv_read"))
    # Weights are untouched by eviction.
    assert half.bytes("weights") == pytest.approx(full.bytes("weights"))


def test_kept_fraction_scales_attention_pairs_of_cached_tokens_only():
    # Decode: one query sees 2048 kept keys plus itself: 2049 pairs per layer;
    # 2·2·32 heads·128·2049 FLOPs per layer (DESIGN.md).
    ledger = build_ledger(LLAMA_8B, Step.decode(1, 4096), Precision(kv_keep=0.5))
    assert _op(ledger, "attn.score").flops == pytest.approx(2 * 2 * 32 * 128 * 2049 * LAYERS)
    # A prefill with an empty cache is unchanged: nothing cached to evict.
    plain = build_ledger(LLAMA_8B, Step.prefill(512))
    kept = build_ledger(LLAMA_8B, Step.prefill(512), Precision(kv_keep=0.25))
    assert kept.flops == pytest.approx(plain.flops)


def test_kv_memory_holds_the_kept_fraction():
    bytes_ = kv_cache_bytes_per_device(LLAMA_8B, Precision(kv_keep=0.25), Parallelism(),
                                       sequences=1, context_tokens=4096)
    assert bytes_ == pytest.approx(1024 * LAYERS * KV_ELEMENTS_PER_TOKEN_LAYER * 2)


def test_fp8_kv_cache_pays_a_conversion_per_element_read_and_written():
    ledger = build_ledger(LLAMA_8B, Step.decode(1, 4096), Precision(kv_cache="fp8"))
    read = 4096 * LAYERS * KV_ELEMENTS_PER_TOKEN_LAYER
    written = 1 * LAYERS * KV_ELEMENTS_PER_TOKEN_LAYER
    dequant = _op(ledger, "attn.kv_dequant")
    assert dequant.flops == pytest.approx(2 * (read + written))
    assert dequant.memory_bytes == 0  # its bytes are attn.score's, counted once
    assert ledger.bytes("kv_read") == pytest.approx(read * 1.0)  # one byte per element


def test_kv_in_the_activation_format_needs_no_conversion():
    ledger = build_ledger(LLAMA_8B, Step.decode(1, 4096))
    assert not ledger.select("attn.kv_dequant")


@pytest.mark.parametrize("keep", [0, -0.5, 1.5])
def test_kv_keep_outside_zero_one_is_refused(keep):
    with pytest.raises(InputError, match="kv_keep"):
        Precision(kv_keep=keep)
