"""The reference transformer: its cache, masks and variants agree with slower, obvious
computations, and what its modules really hold and compute agrees with the ledger."""

import math

import pytest

torch = pytest.importorskip("torch")

from phasewise.ledger import Step, build_ledger, param_counts  # noqa: E402
from phasewise.measure.reference import (  # noqa: E402
    attention_mask,
    build_model,
    decode_one_token,
    prefer_vector_layouts,
    prefill,
    rope_tables,
)
from phasewise.specs import ModelSpec, Precision  # noqa: E402

FP32 = Precision("fp32", "fp32", "fp32")


def dense(**changes) -> ModelSpec:
    fields = dict(name="tiny-dense", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=16, intermediate_size=96, vocab_size=101)
    return ModelSpec(**(fields | changes))


def moe() -> ModelSpec:
    return dense(name="tiny-moe", num_experts=4, experts_per_token=2, moe_intermediate_size=32,
                 shared_expert_intermediate_size=48)


def mla() -> ModelSpec:
    return dense(name="tiny-mla", num_heads=4, num_kv_heads=4, kv_lora_rank=24, q_lora_rank=20,
                 qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12)


def sliding() -> ModelSpec:
    return dense(name="tiny-sliding", layer_types=("sliding", "full"), sliding_window=5)


VARIANTS = [dense(), dense(name="tiny-mqa", num_kv_heads=1), dense(name="tiny-ungated",
            gated_mlp=False, hidden_act="gelu_pytorch_tanh"), moe(), mla(), sliding(),
            dense(name="tiny-tied", tie_word_embeddings=True)]


def test_rope_tables_rotate_dimension_i_by_position_times_theta_power():
    cos, sin = rope_tables(head_dim=4, max_tokens=3, theta=100.0)
    # frequencies 100^(-0/4) = 1 and 100^(-2/4) = 0.1, each repeated for the two halves
    assert cos[2].tolist() == pytest.approx([math.cos(2), math.cos(0.2)] * 2)
    assert sin[1].tolist() == pytest.approx([math.sin(1), math.sin(0.1)] * 2)


def test_attention_mask_is_causal_and_capped_by_the_window():
    mask = attention_mask(start=2, new_tokens=3, key_start=0, key_end=5, window=2,
                          device=torch.device("cpu"))
    # query positions 2, 3, 4 see keys p-1 and p
    assert mask.int().tolist() == [[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]
    assert attention_mask(7, 1, 0, 8, None, torch.device("cpu")) is None


@pytest.mark.parametrize("spec", VARIANTS, ids=lambda s: s.name)
def test_decoding_with_the_cache_matches_a_forward_pass_over_the_whole_sequence(spec):
    model = build_model(spec, seed=1)
    tokens = torch.randint(0, spec.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model.setup_caches(2, 16)
        whole = model(tokens, 0, all_logits=True)  # (batch, 12, vocab)
        model.setup_caches(2, 16)
        prefill(model, tokens[:, :9])
        steps = [decode_one_token(model, tokens[:, i:i + 1], i) for i in range(9, 12)]
    for offset, logits in enumerate(steps):
        torch.testing.assert_close(logits, whole[:, 9 + offset], rtol=1e-4, atol=1e-4)


def test_a_prompt_in_chunks_matches_the_prompt_in_one_step():
    spec = sliding()
    model = build_model(spec, seed=2)
    tokens = torch.randint(0, spec.vocab_size, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        model.setup_caches(1, 20)
        whole = prefill(model, tokens)
        model.setup_caches(1, 20)
        prefill(model, tokens[:, :8])
        chunked = prefill(model, tokens[:, 8:], 8)
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-4)


def test_a_sliding_layer_does_not_see_tokens_beyond_its_window():
    spec = dense(name="one-sliding-layer", num_layers=1, layer_types=("sliding",), sliding_window=4)
    model = build_model(spec, seed=3)
    tokens = torch.randint(1, spec.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[0, 5] = 0  # position 5 is outside the window of the last query (positions 6-9)
    with torch.inference_mode():
        model.setup_caches(1, 10)
        before = prefill(model, tokens)
        model.setup_caches(1, 10)
        after = prefill(model, changed)
    torch.testing.assert_close(before, after)


def prefill_before_and_after_vector_layouts(model):
    """The same prompt's logits before and after ``prefer_vector_layouts``, which must agree."""
    tokens = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.inference_mode():
        model.setup_caches(1, 8)
        before = prefill(model, tokens)
        prefer_vector_layouts(model)
        model.setup_caches(1, 8)
        after = prefill(model, tokens)
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


def test_vector_layouts_change_strides_not_results():
    spec = dense(name="wide-mlp", intermediate_size=256, tie_word_embeddings=True)
    model = build_model(spec, seed=4)
    prefill_before_and_after_vector_layouts(model)
    up = model.layers[0].mlp.w_up.weight  # (512, 64): wider out than in, so column-major
    assert up.shape == (512, 64) and up.stride() == (1, 512)
    assert model.lm_head.weight is model.embed.weight


def test_vector_layouts_order_each_stacked_expert_by_its_longer_side():
    model = build_model(moe(), seed=5)  # experts' w_up (4, 64, 64); w_down (4, 64, 32)
    prefill_before_and_after_vector_layouts(model)
    mlp = model.layers[0].mlp
    assert mlp.w_up.stride() == (64 * 64, 64, 1)  # out = in: left row-major
    assert mlp.w_down.shape == (4, 64, 32) and mlp.w_down.stride() == (64 * 32, 1, 64)


@pytest.mark.parametrize("spec", VARIANTS, ids=lambda s: s.name)
def test_the_reference_holds_as_many_parameters_as_the_ledger_counts(spec):
    model = build_model(spec)
    held = sum(p.numel() for p in model.parameters())  # a tied head is one tensor
    assert held == param_counts(spec).total


@pytest.mark.parametrize("spec", [dense(), dense(name="tiny-mqa", num_kv_heads=1), moe()],
                         ids=lambda s: s.name)
def test_prefill_matmul_flops_match_the_ledger_row_by_row(spec):
    """torch's own FLOP counter over a real prefill against the ledger: the GEMMs equal, and
    attention equals once the counter's full S×S score matrix is scaled to the causal half."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    tokens_per_prompt = 16
    model = build_model(spec)
    model.setup_caches(1, tokens_per_prompt)
    tokens = torch.randint(0, spec.vocab_size, (1, tokens_per_prompt))
    counter = FlopCounterMode(display=False)
    # The math backend spells attention as batched matmuls the counter sees (bmm); the
    # projections are plain matmuls (mm, addmm).
    with counter, torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
        prefill(model, tokens)
    counted = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    gemm = sum(n for op, n in counted.items() if op.endswith((".mm", ".addmm")))
    sdpa = sum(n for op, n in counted.items() if op.endswith(".bmm"))
    ledger = build_ledger(spec, Step.prefill(tokens_per_prompt), FP32)
    ledger_gemm = sum(op.flops for op in ledger.ops if op.kind == "gemm")
    ledger_attention = sum(op.flops for op in ledger.ops if op.kind == "attention")
    if spec.is_moe:
        # routed experts run on the tokens routed to them: k per token, as the ledger has it
        assert gemm == pytest.approx(ledger_gemm, rel=1e-9)
    else:
        assert gemm == ledger_gemm
    s = tokens_per_prompt
    assert sdpa * (s + 1) / (2 * s) == pytest.approx(ledger_attention)


@pytest.mark.parametrize("grouped", [False, True], ids=["one-by-one", "grouped-gemm"])
def test_moe_layer_computes_each_tokens_top_k_experts_weighted_plus_the_shared_one(grouped):
    """Both ways of running the experts against the obvious loop over tokens: softmax over
    the router, the top k renormalised, each picked expert's gated MLP weighted. The
    grouped GEMM runs here on torch's CPU fallback; a GPU runs it in one kernel per
    projection (tests/test_cuda.py)."""
    if grouped and not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no grouped GEMM")
    spec = moe()
    layer = build_model(spec).layers[0].mlp
    layer.grouped = grouped
    x = torch.randn(2, 7, spec.hidden_size)
    with torch.inference_mode():
        got = layer(x)
    want = torch.empty_like(x)
    silu = torch.nn.functional.silu
    with torch.inference_mode():
        for b in range(2):
            for t in range(7):
                v = x[b, t]
                probs = (layer.router.weight @ v).softmax(dim=-1)
                top, experts = probs.topk(spec.experts_per_token)
                total = layer.shared(v)
                for p, e in zip(top / top.sum(), experts.tolist(), strict=False):
                    gate, up = (layer.w_up[e] @ v).split(spec.moe_intermediate_size)
                    total = total + p * (layer.w_down[e] @ (silu(gate) * up))
                want[b, t] = total
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
