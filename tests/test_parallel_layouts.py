"""Layouts the serving engines run: expert parallelism that does not divide the experts
(redundant expert slots), the collectives' message format, expert TP under
attention data parallelism. Expectations are hand counts from the models' config.json
files and the engines' documented behaviour."""

import pytest

from phasewise.catalog import load_model
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger
from phasewise.ledger.build import check_parallelism
from phasewise.ledger.memory import kv_bytes_per_token_per_device, weight_bytes_per_device
from phasewise.ledger.moe import expert_slots_per_rank
from phasewise.serving.layouts import engine_layout
from phasewise.specs import Parallelism, Precision

DEEPSEEK_V3 = load_model("deepseek-v3")
KIMI_K2 = load_model("kimi-k2")
MIXTRAL = load_model("mixtral-8x7b")
LLAMA_8B = load_model("llama-3.1-8b")
BF16 = Precision(weights="bf16")
# DeepSeek-V3 config.json: 58 MoE layers (61 layers, first_k_dense_replace 3), hidden 7168,
# moe_intermediate_size 2048, gated: 3 · 7168 · 2048 parameters an expert.
V3_MOE_LAYERS, V3_EXPERT_PARAMS = 58, 3 * 7168 * 2048


# ---------------------------------------------------------------- redundant expert slots


@pytest.mark.parametrize(("experts", "ep", "slots"), [
    (256, 72, 4),   # DeepSeek-V3 on a GB200 NVL72: 288 slots, 32 redundant
    (256, 48, 6),   # 288 slots again
    (384, 72, 6),   # Kimi-K2: 432 slots, 48 redundant
    (256, 64, 4),   # divides: no redundancy
    (256, 256, 1),
])
def test_expert_slots_per_rank_by_hand(experts: int, ep: int, slots: int) -> None:
    assert expert_slots_per_rank(experts, ep) == slots


@pytest.mark.parametrize(("model", "ep"), [(DEEPSEEK_V3, 72), (DEEPSEEK_V3, 48), (KIMI_K2, 72)])
def test_expert_parallelism_that_does_not_divide_the_experts_is_accepted(model, ep) -> None:  # noqa: ANN001
    check_parallelism(model, Parallelism(tp=1, ep=ep))


def test_more_ranks_than_experts_is_refused() -> None:
    with pytest.raises(InputError, match="wider than"):
        check_parallelism(MIXTRAL, Parallelism(tp=1, ep=16))


def test_weights_per_device_hold_four_slots_at_ep72() -> None:
    # At EP 72 and EP 64 a rank holds 4 expert slots of each of the 58 MoE layers, at EP 256
    # one: EP 72 holds 3 experts a layer more than EP 256, in bf16
    # 58 · 3 · 44,040,192 · 2 B = 15,325,986,816 B; and exactly what EP 64 holds.
    ep72 = weight_bytes_per_device(DEEPSEEK_V3, BF16, Parallelism(tp=1, ep=72))
    ep64 = weight_bytes_per_device(DEEPSEEK_V3, BF16, Parallelism(tp=1, ep=64))
    ep256 = weight_bytes_per_device(DEEPSEEK_V3, BF16, Parallelism(tp=1, ep=256))
    assert ep72 == pytest.approx(ep64)
    assert ep72 - ep256 == pytest.approx(V3_MOE_LAYERS * 3 * V3_EXPERT_PARAMS * 2)


def test_decode_reads_the_slots_its_tokens_touch_at_ep72() -> None:
    # 72 decode tokens (one per DP rank): an expert is missed by all of them with probability
    # (1 − 8/256)^72 = 0.10129; each of a rank's 4 slots is read with probability 0.89871,
    # 3.5948 experts · 44,040,192 · 2 B a layer over 58 layers.
    ledger = build_ledger(DEEPSEEK_V3, Step.decode(72, 1024), BF16, Parallelism(tp=1, ep=72))
    read = sum(op.weights for op in ledger.select("moe.experts"))
    touched = 1 - (1 - 8 / 256) ** 72
    assert read == pytest.approx(V3_MOE_LAYERS * 4 * touched * V3_EXPERT_PARAMS * 2)
    # FLOPs follow the routed tokens: 72 · 8 / 72 = 8 token-expert pairs a rank a layer.
    flops = sum(op.flops for op in ledger.select("moe.experts"))
    assert flops == pytest.approx(V3_MOE_LAYERS * 2 * 8 * V3_EXPERT_PARAMS)


# ---------------------------------------------------------------- collectives' format


@pytest.mark.parametrize("precision, element_bytes", [
    (Precision(), 2), (Precision(weights="fp8", activations="fp8"), 1),
    # fp4 activations: 4 bits and an 8-bit scale per 32 values, 4.25 bits (specs.precision)
    (Precision(weights="nvfp4", activations="fp4"), 4.25 / 8),
])
def test_tp_allreduce_moves_the_activation_format_the_link_fit_assumed(
        precision: Precision, element_bytes: float) -> None:
    # TP 2, one decode token: 2(p−1)/p · 4096 elements an all-reduce, two per layer over 32
    # layers, in the activation format until the link efficiency is refitted for 16-bit
    # messages (ledger.build.COLLECTIVES_IN_16_BITS).
    ledger = build_ledger(LLAMA_8B, Step.decode(1, 1024), precision, Parallelism(tp=2))
    assert sum(op.network for op in ledger.select("tp.allreduce")) == pytest.approx(
        64 * 4096 * element_bytes)


def test_fp8_dispatch_bf16_combine() -> None:
    # Mixtral EP 8, 64 decode tokens, 8 a rank: 8 · 2 · 4096 · 7/8 elements leave a rank each
    # way, dispatched in fp8 (1 B) and combined in the collectives' format (the activations'
    # 1 B until COLLECTIVES_IN_16_BITS): 57,344 · 2 B a layer.
    ledger = build_ledger(MIXTRAL, Step.decode(64, 1024), Precision(weights="fp8",
                          activations="fp8"), Parallelism(tp=1, ep=8))
    assert sum(op.network for op in ledger.select("ep.alltoall")) == pytest.approx(
        32 * 57_344 * 2)


# ---------------------------------------------------------------- expert TP under DP attention


def test_expert_tp_under_dp_attention_maps_to_the_ledger() -> None:
    # SGLang --tp 8 --dp 8 --enable-dp-attention, no EP: attention TP 1 × DP 8, MoE TP 8.
    par = engine_layout(tp=1, attention_dp=8, moe_tp=8, moe_ep=1)
    assert par == Parallelism(tp=1, ep=1, dp=8)
    assert (par.devices, par.attention_dp, par.moe_tp) == (8, 8, 8)
    # attention TP 1 × DP 64 over MoE TP 8 × EP 8
    wide = engine_layout(tp=1, attention_dp=64, moe_tp=8, moe_ep=8)
    assert (wide.devices, wide.attention_dp, wide.moe_tp, wide.ep) == (64, 64, 8, 8)


def test_expert_tp_under_dp_attention_by_hand() -> None:
    # Mixtral, attention DP 8 with the MoE TP 8 over all 8 ranks, 64 decode tokens: each
    # rank's attention runs 8 of them; the experts see all 64, 2 routed a token, each expert
    # 14336 / 8 wide: 2 · 64 · 2 · 3 · 4096 · 1792 FLOPs a layer. The 64 tokens' hidden states
    # are gathered and reduce-scattered: 2 · 7/8 · 64 · 4096 · 2 B = 917,504 B a layer, and
    # there is no attention all-reduce (attention TP 1).
    par = Parallelism(tp=1, ep=1, dp=8)
    ledger = build_ledger(MIXTRAL, Step.decode(64, 1024), Precision(), par)
    flops = sum(op.flops for op in ledger.select("moe.experts"))
    assert flops == pytest.approx(32 * 2 * 64 * 2 * 3 * 4096 * 1792)
    gathered = sum(op.network for op in ledger.select("dp.gather_scatter"))
    assert gathered == pytest.approx(32 * 917_504)
    assert not list(ledger.select("tp.allreduce")) and not list(ledger.select("ep.alltoall"))
    # All 8 experts, each an eighth of its width, on every rank: 8 · 3·4096·14336 / 8 · 2 B
    # of expert weights a layer; the KV cache of a rank's own sequences only.
    # (replicated attention, as TP 1 holds it): 7/8 of 32 · 8 · 3·4096·14336 · 2 B fewer
    # than one device holding everything.
    whole = weight_bytes_per_device(MIXTRAL, Precision(), Parallelism())
    assert whole - weight_bytes_per_device(MIXTRAL, Precision(), par) == pytest.approx(
        7 / 8 * 32 * 8 * 3 * 4096 * 14336 * 2)
    assert kv_bytes_per_token_per_device(MIXTRAL, Precision(), par) == pytest.approx(
        32 * 2 * 8 * 128 * 2 / 8)


def test_dp_given_apart_needs_ep_to_divide_the_group() -> None:
    with pytest.raises(InputError, match="must divide"):
        Parallelism(tp=1, ep=3, dp=8)
    with pytest.raises(InputError, match="replicas"):
        check_parallelism(LLAMA_8B, Parallelism(tp=1, dp=2))


def test_simulate_takes_expert_tp_under_dp_attention() -> None:
    from phasewise.commands.simulate import _parallelism

    # --tp 1 --attention-dp 8 --ep 2: 8 devices, experts 2 ways, each 8 / 2 = 4 ways wide
    par = _parallelism(1, 1, 2, 8)
    assert (par.devices, par.attention_dp, par.ep, par.moe_tp) == (8, 8, 2, 4)
    assert _parallelism(1, 1, None, 8) == Parallelism(tp=1, ep=8)  # DP attention + EP
    with pytest.raises(InputError, match="divides 8"):
        _parallelism(1, 1, 3, 8)
