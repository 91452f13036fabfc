"""The ledger's counting conventions (DESIGN.md), each from a hand calculation."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewise.catalog import load_model
from phasewise.ledger import Step, build_ledger, causal_pairs
from phasewise.specs import ModelSpec, Parallelism, Precision

LLAMA = load_model("llama-3.1-8b")
TINY = ModelSpec(name="tiny", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 head_dim=16, intermediate_size=128, vocab_size=100)

# Linear weights of Llama-3.1-8B per layer: q, k, v, o and the gated MLP.
LLAMA_LAYER_LINEAR = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336


def test_causal_pairs_without_cache():
    assert causal_pairs(4, 0) == 1 + 2 + 3 + 4


def test_causal_pairs_after_cache():
    assert causal_pairs(3, 5) == 6 + 7 + 8  # S·c + S(S+1)/2 = 15 + 6


def test_causal_pairs_capped_by_sliding_window():
    assert causal_pairs(6, 0, window=4) == 1 + 2 + 3 + 4 + 4 + 4
    assert causal_pairs(2, 10, window=4) == 8
    assert causal_pairs(3, 2, window=4) == 3 + 4 + 4


def test_decode_weight_bytes_do_not_grow_with_batch():
    one = build_ledger(LLAMA, Step.decode(1, 1000)).bytes("weights")
    many = build_ledger(LLAMA, Step.decode(64, 1000)).bytes("weights")
    rows = 63 * 4096 * 2  # embedding rows are read per token
    assert many - one == pytest.approx(rows)


def test_decode_kv_read_grows_linearly_with_batch():
    one = build_ledger(LLAMA, Step.decode(1, 1000)).bytes("kv_read")
    assert one == 1000 * 131_072
    assert build_ledger(LLAMA, Step.decode(64, 1000)).bytes("kv_read") == 64 * one


def test_llama_decode_weight_bytes_by_hand():
    # all linear layers, the untied LM head, 2 norms per layer + final norm, one embedding row
    params = 32 * LLAMA_LAYER_LINEAR + 128256 * 4096 + (2 * 32 + 1) * 4096 + 4096
    assert build_ledger(LLAMA, Step.decode(1, 10)).bytes("weights") == pytest.approx(2 * params)


def test_llama_prefill_flops_by_hand():
    s = 512
    gemm = 2 * s * 32 * LLAMA_LAYER_LINEAR
    attention = 32 * 2 * 2 * 32 * 128 * (s * (s + 1) // 2)
    head = 2 * 1 * 4096 * 128256  # logits for the last prompt token only
    ledger = build_ledger(LLAMA, Step.prefill(s))
    matmul_flops = sum(op.flops for op in ledger.ops if op.kind in ("gemm", "attention"))
    assert matmul_flops == pytest.approx(gemm + attention + head)


def test_lm_head_runs_only_where_logits_are_needed():
    prefill = build_ledger(LLAMA, Step.prefill(2048)).select("lm_head")[0]
    assert prefill.m == 1
    chunk = build_ledger(LLAMA, Step.prefill(2048, logit_tokens=0)).select("lm_head")
    assert chunk == ()


def test_kv_written_once_per_new_token():
    ledger = build_ledger(LLAMA, Step.prefill(100, batch=3))
    assert ledger.bytes("kv_write") == 300 * 131_072


def test_kv_format_sets_kv_bytes():
    fp8 = build_ledger(LLAMA, Step.decode(1, 1000), Precision(kv_cache="fp8")).bytes("kv_read")
    assert fp8 == 1000 * 65_536


def test_int4_weights_carry_their_group_scales():
    bf16 = build_ledger(LLAMA, Step.decode(1, 1)).bytes("weights")
    int4 = build_ledger(LLAMA, Step.decode(1, 1), Precision(weights="int4")).bytes("weights")
    assert int4 / bf16 == pytest.approx(4.125 / 16)


def test_gguf_q4_0_is_4_5_bits_per_weight():
    bf16 = build_ledger(LLAMA, Step.decode(1, 1)).bytes("weights")
    q4 = build_ledger(LLAMA, Step.decode(1, 1), Precision("Q4_0", "fp16", "fp16")).bytes("weights")
    assert q4 / bf16 == pytest.approx(4.5 / 16)


def test_tensor_parallel_halves_per_device_weights_and_adds_allreduce():
    one = build_ledger(LLAMA, Step.decode(1, 100))
    two = build_ledger(LLAMA, Step.decode(1, 100), parallelism=Parallelism(tp=2))
    embed_row = 4096 * 2
    norms = (2 * 32 + 1) * 4096 * 2  # norms are replicated
    assert two.bytes("weights") - norms - embed_row == pytest.approx(
        (one.bytes("weights") - norms - embed_row) / 2)
    allreduce = two.select("tp.allreduce")
    # two all-reduces per layer of one token's hidden state, ring: 2(p−1)/p of the message
    assert sum(op.network for op in allreduce) == pytest.approx(64 * 2 * 0.5 * 4096 * 2)


def test_sliding_window_caps_kv_reads():
    mistral = load_model("mistral-7b")  # every layer slides over 4096 tokens
    ledger = build_ledger(mistral, Step.decode(1, 10_000))
    assert ledger.bytes("kv_read") == 4096 * 32 * 2 * 8 * 128 * 2


def test_hybrid_model_reads_full_cache_only_on_global_layers():
    gemma = load_model("gemma-2-9b")  # 21 sliding (4096) + 21 global layers, 8 KV heads × 256
    ledger = build_ledger(gemma, Step.decode(1, 10_000))
    per_token_layer = 2 * 8 * 256 * 2
    assert ledger.bytes("kv_read") == (21 * 4096 + 21 * 10_000) * per_token_layer


def test_mla_decode_uses_the_absorbed_form():
    ds = load_model("deepseek-v3")
    c = 1000
    score = build_ledger(ds, Step.decode(1, c)).select("attn.score")
    pairs = c + 1
    per_pair = 2 * 128 * (2 * 512 + 64)  # scores over latent+rope, values over the latent
    assert sum(op.flops for op in score) == pytest.approx(61 * per_pair * pairs)


def test_mla_prefill_decompresses_keys_and_values():
    ds = load_model("deepseek-v3")
    kv_b = build_ledger(ds, Step.prefill(1000)).select("attn.kv_b")
    assert sum(op.flops for op in kv_b) == pytest.approx(61 * 2 * 1000 * 512 * 128 * (128 + 128))


sizes = st.integers(min_value=1, max_value=300)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(2, 300), cut_at=st.floats(0.01, 0.99), cached=st.integers(0, 500))
def test_chunked_prefill_sums_to_the_whole(total, cut_at, cached):
    """Two chunks score exactly the pairs one prefill does (the second chunk attends to the
    first through the cache), write the same KV, and only the last needs logits."""
    cut = min(max(1, int(total * cut_at)), total - 1)
    whole = build_ledger(TINY, Step.prefill(total, cached_tokens=cached))
    first = build_ledger(TINY, Step.prefill(cut, cached_tokens=cached, logit_tokens=0))
    second = build_ledger(TINY, Step.prefill(total - cut, cached_tokens=cached + cut))
    assert first.flops + second.flops == pytest.approx(whole.flops)
    assert first.bytes("kv_write") + second.bytes("kv_write") == whole.bytes("kv_write")


@settings(max_examples=60, deadline=None)
@given(tokens=sizes, more=st.integers(1, 100), cached=st.integers(0, 1000), batch=st.integers(1, 16))
def test_more_tokens_never_cost_less(tokens, more, cached, batch):
    small = build_ledger(TINY, Step.prefill(tokens, batch=batch, cached_tokens=cached))
    large = build_ledger(TINY, Step.prefill(tokens + more, batch=batch, cached_tokens=cached))
    assert large.flops > small.flops
    for byte_class in ("weights", "kv_write", "activations"):
        assert large.bytes(byte_class) >= small.bytes(byte_class)


@settings(max_examples=40, deadline=None)
@given(context=st.integers(0, 5000), extra=st.integers(1, 5000), batch=st.integers(1, 64))
def test_longer_context_never_costs_less(context, extra, batch):
    short = build_ledger(TINY, Step.decode(batch, context))
    long = build_ledger(TINY, Step.decode(batch, context + extra))
    assert long.flops > short.flops and long.bytes("kv_read") > short.bytes("kv_read")


@settings(max_examples=40, deadline=None)
@given(a=st.integers(1, 64), b=st.integers(1, 64), ctx=st.integers(0, 2000))
def test_a_mixed_step_is_the_sum_of_its_parts_except_shared_weights(a, b, ctx):
    prefill, decode = Step.prefill(a, cached_tokens=ctx), Step.decode(b, ctx)
    mixed = build_ledger(TINY, prefill + decode)
    parts = [build_ledger(TINY, s) for s in (prefill, decode)]
    assert mixed.flops == pytest.approx(sum(p.flops for p in parts))
    for byte_class in ("kv_read", "kv_write"):
        assert mixed.bytes(byte_class) == pytest.approx(sum(p.bytes(byte_class) for p in parts))


def test_model_specs_are_transformed_by_replace():
    fewer_layers = dataclasses.replace(LLAMA, num_layers=16)
    ratio = build_ledger(fewer_layers, Step.decode(1, 100)).bytes("kv_read") / \
        build_ledger(LLAMA, Step.decode(1, 100)).bytes("kv_read")
    assert ratio == 0.5


def test_an_operator_hashes_by_every_compared_field():
    # Op.__hash__ is written out by hand (cost models remember priced operators by value):
    # equal operators hash alike, and the hash covers each compared field.
    from dataclasses import fields, replace

    from phasewise.ledger import Op

    op = Op("attn.qkv", "gemm", "all", 2, 1.0, weights=2.0, m=1.0, n=2.0, k=3.0)
    assert hash(op) == hash(replace(op))
    compared = [f for f in fields(Op) if f.compare]
    assert len(compared) == 20
    for f in compared:
        value = getattr(op, f.name)
        other = replace(op, **{f.name: value + ("x" if isinstance(value, str) else 1)})
        assert other != op and hash(other) != hash(op), f.name
