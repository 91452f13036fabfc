"""DeepSeek-V4's compressed attention (``CompressedAttention``): a sliding window in every
layer, plus one compressed entry per 4 tokens read through a top-k indexer (CSA) or one per
128 tokens read in full (HCA); hyper-connections; fp4 experts. Counts by hand from the
reference implementation (deepseek-ai/DeepSeek-V4-Flash inference/model.py: Attention,
Compressor, Indexer, Block) and the model cards' published totals."""

from pathlib import Path

import pytest

from phasewise.catalog import model_from_config
from phasewise.catalog.models import load_model
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger, param_counts
from phasewise.ledger.attention import compressed_pairs
from phasewise.ledger.memory import kv_cache_bytes_per_device, weight_bytes_per_device
from phasewise.specs import Parallelism, Precision
from phasewise.specs.model import CompressedAttention

CONFIGS = Path(__file__).parent / "data" / "configs"
H = 256
# A small DeepSeek-V4: 4 heads of 64 (16 rope), query rank 32, 2 output groups of rank 32,
# a window of 8; layers at ratios 0 (window only), 4 (CSA) and 128 (HCA), then the MTP
# layer's ratio; an indexer of 2 heads × 16 picking 3 entries; 4 experts (top 2) and a
# shared one of 64; 2 residual streams.
TINY = {"model_type": "deepseek_v4", "hidden_size": H, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
        "qk_rope_head_dim": 16, "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 32,
        "sliding_window": 8, "compress_ratios": [0, 4, 128, 0], "index_topk": 3,
        "index_n_heads": 2, "index_head_dim": 16, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_shared_experts": 1,
        "hc_mult": 2, "vocab_size": 1000, "tie_word_embeddings": False,
        "num_nextn_predict_layers": 1}

ATTENTION = (4  # attn_sink, one per head
             + H * 32 + 32 + 32 * 4 * 64  # wq_a, q_norm, wq_b
             + H * 64 + 64  # wkv (one shared key/value), kv_norm
             + 4 * 64 * 32 + 2 * 32 * H)  # wo_a: 2 groups of (2·64 → 32); wo_b
CSA_COMPRESSOR = 2 * H * 128 + 4 * 128 + 64  # wkv, wgate (2·64 wide: overlap), ape, norm
HCA_COMPRESSOR = 2 * H * 64 + 128 * 64 + 64
INDEXER = 32 * 2 * 16 + H * 2 + (2 * H * 32 + 4 * 32 + 16)  # wq_b, weights_proj, compressor
MOE_TOTAL = H * 4 + 4 * 3 * H * 64 + 3 * H * 64  # router, 4 experts, the shared expert
MOE_ACTIVE = H * 4 + 2 * 3 * H * 64 + 3 * H * 64
HC_SUB_BLOCK = 8 * 2 * H + 8 + 3  # hc_fn (2+m)m × m·h, hc_base, hc_scale for m = 2
HC_HEAD = 2 * 2 * H + 2 + 1
PER_LAYER = ATTENTION + 2 * (H + HC_SUB_BLOCK)  # and the MLP; two pre-norms


def test_every_kind_of_v4_layer_is_counted_by_hand():
    counts = param_counts(model_from_config(TINY, "tiny-v4"))
    layers = 3 * PER_LAYER + CSA_COMPRESSOR + INDEXER + HCA_COMPRESSOR
    rest = 2 * 1000 * H + H + HC_HEAD  # embedding, untied head, final norm, head mixing
    assert counts.total == layers + 3 * MOE_TOTAL + rest
    assert counts.active == layers + 3 * MOE_ACTIVE + rest


def test_the_layers_follow_compress_ratios_and_the_mtp_layer_takes_its_own():
    model = model_from_config(TINY, "tiny-v4")
    assert [layer.mixer.label for layer in model.layers] == ["swa8", "csa4-top3", "hca128"]
    assert model.mtp_layers[0].mixer.compress_ratio == 0  # compress_ratios[num_layers]
    assert model.hyper_connections == 2
    assert not model.notes  # every key read


def test_kv_per_token_is_one_entry_per_ratio_and_the_window_is_state():
    # CSA: 64/4 values of the entry and 16/4 of the index key; HCA: 64/128; the window layer
    # adds nothing per token. bf16: 2 bytes.
    counts = param_counts(model_from_config(TINY, "tiny-v4"))
    assert counts.kv_bytes_per_token == (64 / 4 + 16 / 4) * 2 + 64 / 128 * 2
    # 3 windows of 8 × 64 at 2 bytes; fp32 pooling state kv and score: CSA 2·(8 × 128) and
    # its indexer's 2·(8 × 32), HCA 2·(128 × 64).
    windows = 3 * 8 * 64 * 2
    pooling = (2 * 8 * 128 + 2 * 8 * 32 + 2 * 128 * 64) * 4
    assert counts.state_bytes_per_sequence == windows + pooling


def _one_layer(ratio: int, **extra) -> dict:
    return {**TINY, "num_hidden_layers": 1, "compress_ratios": [ratio], "hc_mult": 0,
            "num_nextn_predict_layers": 0, **extra}


def test_an_hca_layers_cache_grows_at_one_128th_of_the_context():
    model = model_from_config(_one_layer(128), "hca")
    cache = [kv_cache_bytes_per_device(model, Precision(), Parallelism(), sequences=1,
                                       context_tokens=c) for c in (12_800, 25_600)]
    assert cache[1] - cache[0] == 12_800 / 128 * 64 * 2


def test_a_window_only_layer_holds_the_same_cache_at_any_context():
    model = model_from_config(_one_layer(0), "swa")
    cache = {c: kv_cache_bytes_per_device(model, Precision(), Parallelism(), sequences=1,
                                          context_tokens=c) for c in (1_000, 1_000_000)}
    assert cache[1_000] == cache[1_000_000] == 8 * 64 * 2


def _score(model, context: int):
    ledger = build_ledger(model, Step.decode(1, context))
    return next(op for op in ledger.ops if op.name == "attn.score")


def test_a_csa_decode_step_reads_the_top_k_entries_not_the_context():
    model = model_from_config(_one_layer(4), "csa")
    for context in (10_000, 1_000_000):
        # the window (8 raw tokens) and the 3 entries the indexer picks, 64 values × 2 bytes
        assert _score(model, context).kv_read == (8 + 3) * 64 * 2
    # the indexer does read every compressed key: ⌊c/4⌋ × 16 values × 2 bytes
    ledger = build_ledger(model, Step.decode(1, 10_000))
    indexer = next(op for op in ledger.ops if op.name == "attn.indexer")
    assert indexer.kv_read == 10_000 // 4 * 16 * 2


def test_an_hca_decode_step_reads_every_compressed_entry_and_the_window():
    model = model_from_config(_one_layer(128), "hca")
    assert _score(model, 12_800).kv_read == (8 + 100) * 64 * 2


def test_prefill_attention_flops_by_hand():
    # 20 prompt tokens through the HCA layer: query j sees min(j, 8) raw tokens and ⌊j/128⌋
    # = 0 entries; at ratio 4 with top-3 it also sees min(3, ⌊j/4⌋) entries.
    window_pairs = sum(min(j, 8) for j in range(1, 21))
    csa_pairs = sum(min(3, j // 4) for j in range(1, 21))
    per_pair = 2 * 4 * 2 * 64  # 2 FLOPs × heads × (score + value over d = 64)
    hca = next(op for op in build_ledger(model_from_config(_one_layer(128), "hca"),
                                         Step.prefill(20)).ops if op.name == "attn.score")
    csa = next(op for op in build_ledger(model_from_config(_one_layer(4), "csa"),
                                         Step.prefill(20)).ops if op.name == "attn.score")
    assert hca.flops == per_pair * window_pairs
    assert csa.flops == per_pair * (window_pairs + csa_pairs)


@pytest.mark.parametrize("new,cached,ratio,topk", [(1, 0, 4, None), (7, 5, 4, 3), (300, 40, 128, None),
                                                   (1, 99_999, 4, 512), (64, 1000, 4, 2)])
def test_compressed_pairs_sum_the_entries_each_query_sees(new, cached, ratio, topk):
    expected = sum(j // ratio if topk is None else min(topk, j // ratio)
                   for j in range(cached + 1, cached + new + 1))
    assert compressed_pairs(new, cached, ratio, topk) == expected


def test_the_grouped_output_projection_reads_each_group_once():
    ledger = build_ledger(model_from_config(_one_layer(0), "swa"), Step.decode(1, 100))
    out_a = next(op for op in ledger.ops if op.name == "attn.out_a")
    assert out_a.weights == 4 * 64 * 32 * 2  # heads·d·o_lora at bf16
    assert out_a.flops == 2 * 4 * 64 * 32  # one token


# deepseek-ai/DeepSeek-V4-Flash (config in tests/data/configs): h 4096, 43 layers (2 window,
# 21 CSA, 20 HCA), 64 heads of 512, q rank 1024, 8 output groups of rank 1024, indexer 64 × 128,
# 256 experts of 2048 (top 6) and one shared, vocab 129,280, 4 residual streams.
def _flash_by_hand() -> tuple[int, int]:
    h, d, v = 4096, 512, 129_280
    attention = 64 + h * 1024 + 1024 + 1024 * 64 * d + h * d + d + 64 * d * 1024 + 8 * 1024 * h
    csa = 2 * h * 1024 + 4 * 1024 + d + 1024 * 64 * 128 + h * 64 + 2 * h * 256 + 4 * 256 + 128
    hca = 2 * h * d + 128 * d + d
    expert = 3 * h * 2048
    hc = 24 * 4 * h + 24 + 3  # (2+4)·4 mixes × 4·h, per sub-block
    common = attention + h * 256 + expert + 2 * (h + hc)  # router, shared expert, two norms
    rest = 2 * v * h + h + 4 * 4 * h + 4 + 1
    total = 43 * (common + 256 * expert) + 21 * csa + 20 * hca + rest
    active = 43 * (common + 6 * expert) + 21 * csa + 20 * hca + rest
    return total, active


def test_deepseek_v4_flash_against_its_hand_count_and_model_card():
    counts = param_counts(load_model(str(CONFIGS / "deepseek-v4-flash.json")))
    total, active = _flash_by_hand()
    assert (counts.total, counts.active) == (total, active)
    # The model card (huggingface.co/deepseek-ai/DeepSeek-V4-Flash): 284B total, 13B active
    # (MTP apart; the active figure without the input embedding).
    assert counts.total / 1e9 == pytest.approx(284, rel=0.03)
    assert (counts.active - counts.embedding) / 1e9 == pytest.approx(13, rel=0.03)
    # KV per token at bf16: 21 CSA × (512 + 128)/4 + 20 HCA × 512/128 values, 2 bytes each.
    assert counts.kv_bytes_per_token == 21 * (512 + 128) / 4 * 2 + 20 * 512 / 128 * 2 == 6_880


def test_deepseek_v4_pro_against_its_model_card():
    # huggingface.co/deepseek-ai/DeepSeek-V4-Pro: 1.6T total, 49B active.
    counts = param_counts(load_model(str(CONFIGS / "deepseek-v4-pro.json")))
    assert counts.total / 1e12 == pytest.approx(1.6, rel=0.03)
    assert counts.active / 1e9 == pytest.approx(49, rel=0.03)
    # 30 CSA × (512 + 128)/4 + 31 HCA × 512/128 values at 2 bytes (layers 0 and 1 are HCA).
    assert counts.kv_bytes_per_token == 30 * 160 * 2 + 31 * 4 * 2


def test_fp4_experts_take_mxfp4_bytes_and_the_rest_fp8_blocks():
    model = load_model(str(CONFIGS / "deepseek-v4-flash.json"))
    precision = Precision().for_model(model)
    assert precision.weight_format_for("experts") == "fp4"
    assert precision.weight_bytes_for("experts") == pytest.approx(0.5 + 1 / 32)  # e8m0 per 32
    assert precision.weight_format_for("attention") == "fp8_block"
    counts = param_counts(model)
    weights = weight_bytes_per_device(model, Precision(), Parallelism())
    assert weights > counts.routed_experts * (0.5 + 1 / 32)


@pytest.mark.parametrize("ratios", [[0, 4], "4", [0, 4, -1], [0, True, 4]])
def test_bad_compress_ratios_are_one_clear_error(ratios):
    with pytest.raises(InputError, match="compress_ratios"):
        model_from_config({**TINY, "compress_ratios": ratios}, "bad")


def test_tensor_parallelism_must_split_the_output_groups():
    model = model_from_config(_one_layer(4, o_groups=1, num_attention_heads=4), "one-group")
    with pytest.raises(InputError, match="output groups"):
        build_ledger(model, Step.decode(1, 10), parallelism=Parallelism(tp=2))


def test_heads_that_do_not_split_into_groups_are_refused():
    with pytest.raises(InputError, match="output groups"):
        model_from_config(_one_layer(0, o_groups=3), "odd")
    assert isinstance(model_from_config(_one_layer(0), "ok").layers[0].mixer, CompressedAttention)


def test_the_reference_transformer_refuses_compressed_attention_in_one_line():
    """The profiler builds no CSA/HCA module: `check_buildable` names the layer kind before
    any ceiling is measured."""
    pytest.importorskip("torch")
    from phasewise.measure.reference import check_buildable
    with pytest.raises(InputError, match="compressed attention") as raised:
        check_buildable(model_from_config(_one_layer(4), "csa"))
    assert "\n" not in str(raised.value)
