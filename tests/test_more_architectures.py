"""Hybrid, state-space and MoE families beyond the frontier catalog, each from a hand count:
pure Mamba / Mamba-2 stacks, Jamba, Granite-4.0 hybrids, Falcon-H1's parallel mixers,
MiniMax lightning attention, Arctic's residual MLP, DBRX's nested blocks, per-layer lists
(Hunyuan), ERNIE-4.5's MoE layer range; and the published configs of those families
checked against their model cards."""

import json
import tomllib
from pathlib import Path

import pytest

from phasewise.catalog import model_from_config
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger, param_counts
from phasewise.ledger.memory import kv_cache_bytes_per_device
from phasewise.specs import Parallelism, Precision

CONFIGS = Path(__file__).parent / "data" / "configs"
H = 256
BASE = {"hidden_size": H, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": 1000, "intermediate_size": 512, "tie_word_embeddings": True}
ATTENTION_PARAMS = H * (4 * 64 + 2 * 2 * 64) + 4 * 64 * H  # q, k, v, o
GATED_MLP_PARAMS = 3 * H * 512
EMBEDDING = 1000 * H

# Mamba (transformers' MambaMixer): inner 512, state 16, 4 taps, dt rank 16.
MAMBA1 = {"model_type": "falcon_mamba", "hidden_size": H, "num_hidden_layers": 3,
          "vocab_size": 1000, "intermediate_size": 512, "state_size": 16, "conv_kernel": 4,
          "time_step_rank": 16, "tie_word_embeddings": False}
MAMBA1_PARAMS = (H * 2 * 512  # in_proj: x, z
                 + 512 * (4 + 1)  # depthwise conv with bias
                 + 512 * (16 + 2 * 16)  # x_proj: dt, B, C
                 + 16 * 512 + 512  # dt_proj with bias
                 + 512 * 16 + 512  # A_log, D
                 + 512 * H)  # out_proj
MAMBA1_STATE_ELEMENTS = 512 * 16 + 3 * 512  # SSM state + the conv's last 3 inputs


def test_pure_mamba_stack_by_hand():
    counts = param_counts(model_from_config(MAMBA1, "mamba"), kv_bytes=2)
    assert counts.total == 2 * EMBEDDING + 3 * (MAMBA1_PARAMS + H) + H  # untied; norms
    assert counts.kv_bytes_per_token == 0
    assert counts.state_bytes_per_sequence == 3 * MAMBA1_STATE_ELEMENTS * 2


def test_mamba_state_is_read_once_per_step_whatever_the_context():
    model = model_from_config(MAMBA1, "mamba")
    scans = [next(op for op in build_ledger(model, Step.decode(1, context)).ops
                  if op.name == "ssm.scan") for context in (100, 100_000)]
    assert scans[0].kv_read == scans[1].kv_read == 3 * MAMBA1_STATE_ELEMENTS * 2
    short, long = (kv_cache_bytes_per_device(model, Precision(), Parallelism(), sequences=1,
                                             context_tokens=c) for c in (100, 100_000))
    assert short == long


def test_pure_mamba2_has_no_attention_and_no_mlp():
    cfg = {"model_type": "mamba2", "hidden_size": H, "num_hidden_layers": 2, "vocab_size": 1000,
           "num_heads": 8, "head_dim": 64, "state_size": 16, "n_groups": 1, "conv_kernel": 4,
           "tie_word_embeddings": True}
    model = model_from_config(cfg, "mamba2")
    inner = 8 * 64
    mamba2 = (H * (2 * inner + 2 * 16 + 8) + (inner + 2 * 16) * 5 + 3 * 8 + inner + inner * H)
    assert param_counts(model).total == EMBEDDING + 2 * (mamba2 + H) + H
    assert not any(note.startswith("config.json gives no num_key_value_heads")
                   for note in model.notes)


JAMBA = {**BASE, "model_type": "jamba", "num_hidden_layers": 4, "attn_layer_period": 2,
         "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 0,
         "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 16, "mamba_d_conv": 4,
         "mamba_expand": 2, "mamba_dt_rank": 16}


def test_jamba_places_attention_and_experts_by_period_and_offset():
    model = model_from_config(JAMBA, "jamba")
    assert [layer.label for layer in model.layers] == \
        ["mamba1/moe4x2", "attn/mlp512", "mamba1/moe4x2", "attn/mlp512"]
    counts = param_counts(model, kv_bytes=2)
    dt_norms = 16 + 2 * 16  # Jamba's RMSNorms over dt, B and C
    moe_total = H * 4 + 4 * GATED_MLP_PARAMS  # router + experts
    moe_active = H * 4 + 2 * GATED_MLP_PARAMS
    layers_total = 2 * (MAMBA1_PARAMS + dt_norms + moe_total) \
        + 2 * (ATTENTION_PARAMS + GATED_MLP_PARAMS) + 4 * 2 * H
    assert counts.total == EMBEDDING + layers_total + H
    assert counts.total - counts.active == 2 * (moe_total - moe_active)
    assert counts.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2  # two attention layers


def test_granite_hybrid_runs_experts_and_a_shared_mlp_in_every_layer():
    cfg = {**BASE, "model_type": "granitemoehybrid", "num_hidden_layers": 3,
           "layer_types": ["mamba", "attention", "mamba"], "mamba_n_heads": 8,
           "mamba_d_head": 64, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4,
           "mamba_expand": 2, "num_local_experts": 4, "num_experts_per_tok": 1,
           "intermediate_size": 64, "shared_intermediate_size": 128}
    model = model_from_config(cfg, "granite")
    assert [layer.mixer.label for layer in model.layers] == ["mamba2", "attn", "mamba2"]
    mlp = model.layers[0].mlp
    assert (mlp.experts, mlp.top_k, mlp.width, mlp.shared_width) == (4, 1, 64, 128)
    assert param_counts(model, kv_bytes=2).kv_bytes_per_token == 2 * 2 * 64 * 2


FALCON_H1 = {**BASE, "model_type": "falcon_h1", "num_hidden_layers": 2, "mamba_n_heads": 8,
             "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4,
             "mamba_expand": 2}


def test_falcon_h1_counts_attention_and_mamba_side_by_side():
    model = model_from_config(FALCON_H1, "falcon-h1")
    inner = 8 * 32
    mamba2 = (H * (2 * inner + 2 * 16 + 8) + (inner + 2 * 16) * 5 + 3 * 8 + inner + inner * H)
    per_layer = ATTENTION_PARAMS + mamba2 + GATED_MLP_PARAMS + 2 * H  # one shared input norm
    counts = param_counts(model, kv_bytes=2)
    assert counts.total == EMBEDDING + 2 * per_layer + H
    assert counts.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert counts.state_bytes_per_sequence == 2 * (inner * 16 + 3 * (inner + 2 * 16)) * 2
    names = [op.name for op in build_ledger(model, Step.decode(1, 1_000)).ops]
    assert "attn.qkv" in names and "ssm.scan" in names


def test_minimax_lightning_layers_hold_a_fixed_state_per_head():
    cfg = {**BASE, "model_type": "minimax_m1", "num_hidden_layers": 4,
           "attn_type_list": [0, 0, 0, 1], "num_local_experts": 4, "num_experts_per_tok": 2,
           "num_key_value_heads": 4}
    model = model_from_config(cfg, "minimax")
    counts = param_counts(model, kv_bytes=2)
    width = 4 * 64
    lightning = H * 3 * width + H * width + width + width * H  # qkv, gate, norm, out
    softmax = H * (4 * 64 + 2 * 4 * 64) + 4 * 64 * H
    moe = H * 4 + 4 * GATED_MLP_PARAMS
    assert counts.total == EMBEDDING + 3 * lightning + softmax + 4 * (moe + 2 * H) + H
    assert counts.kv_bytes_per_token == 2 * 4 * 64 * 2  # the one softmax layer
    assert counts.state_bytes_per_sequence == 3 * 4 * 64 * 64 * 2  # heads × d × d


def test_arctic_adds_a_hidden_wide_residual_mlp_beside_the_experts():
    cfg = {**BASE, "model_type": "arctic", "num_hidden_layers": 2, "num_local_experts": 4,
           "num_experts_per_tok": 2, "moe_layer_frequency": 1, "parallel_attn_mlp_res": True}
    counts = param_counts(model_from_config(cfg, "arctic"))
    residual = 3 * H * H
    per_layer = ATTENTION_PARAMS + H * 4 + 4 * GATED_MLP_PARAMS + residual + 2 * H
    assert counts.total == EMBEDDING + 2 * per_layer + H
    assert counts.total - counts.active == 2 * 2 * GATED_MLP_PARAMS  # two idle experts a layer


def test_dbrx_reads_its_nested_attention_and_ffn_blocks():
    cfg = {"model_type": "dbrx", "d_model": H, "n_heads": 4, "n_layers": 2, "vocab_size": 1000,
           "attn_config": {"kv_n_heads": 1}, "tie_word_embeddings": False,
           "ffn_config": {"ffn_hidden_size": 512, "moe_num_experts": 4, "moe_top_k": 2}}
    model = model_from_config(cfg, "dbrx")
    counts = param_counts(model, kv_bytes=2)
    attention = H * (4 * 64 + 2 * 1 * 64) + 4 * 64 * H
    assert counts.kv_bytes_per_token == 2 * 1 * 2 * 64 * 2
    assert counts.total == 2 * EMBEDDING + 2 * (attention + H * 4 + 4 * GATED_MLP_PARAMS + 2 * H) + H
    assert not any("attn_config" in note or "ffn_config" in note for note in model.notes)


def test_per_layer_lists_that_repeat_one_value_are_read_and_differing_ones_refused():
    cfg = {**BASE, "model_type": "hunyuan_v1_moe", "num_hidden_layers": 2, "num_experts": 4,
           "moe_topk": [2, 2], "moe_intermediate_size": [64, 64], "num_shared_expert": [1, 1],
           "use_mixed_mlp_moe": True}
    mlp = model_from_config(cfg, "hunyuan").layers[0].mlp
    assert (mlp.top_k, mlp.width, mlp.shared_width) == (2, 64, 512)  # shared: 1 × intermediate
    with pytest.raises(InputError, match="moe_topk must be .* differ from layer to layer"):
        model_from_config({**cfg, "moe_topk": [2, 1]}, "hunyuan")


def test_ernie_moe_layers_run_from_the_start_index_every_interval():
    cfg = {**BASE, "model_type": "ernie4_5_moe", "num_hidden_layers": 4, "moe_num_experts": 4,
           "moe_k": 2, "moe_intermediate_size": 64, "moe_num_shared_experts": 2,
           "moe_layer_start_index": 1, "moe_layer_end_index": 3, "moe_layer_interval": 2}
    model = model_from_config(cfg, "ernie")
    assert [layer.mlp.label for layer in model.layers] == \
        ["mlp512", "moe4x2", "mlp512", "moe4x2"]  # (i + 1) % 2 == 0 and 1 <= i <= 3
    assert model.layers[1].mlp.shared_width == 2 * 64


def test_an_unsupported_architecture_is_one_clear_error():
    cfg = {**BASE, "model_type": "longcat_flash", "num_layers": 2}
    with pytest.raises(InputError, match="'longcat_flash' is not supported"):
        model_from_config(cfg, "longcat")


MANIFEST = tomllib.loads((CONFIGS / "manifest.toml").read_text())
# Published configs of these families and their model cards' totals (manifest.toml cites
# each card); KV bytes per token from the manifest's hand derivations.
CARD_CHECKED = ["falcon-h1-0.5b", "granite-4.0-h-small", "jamba-1.5-mini", "jamba-1.5-large",
                "mamba-codestral-7b", "falcon-mamba-7b", "minimax-m1-80k", "arctic-instruct",
                "dbrx-instruct", "hunyuan-a13b", "ernie-4.5-300b-a47b", "olmoe-1b-7b",
                "phi-3.5-moe", "dots.llm1-inst", "command-a", "gpt-neox-20b"]


@pytest.mark.parametrize("name", CARD_CHECKED)
def test_published_config_matches_its_model_card(name):
    entry = MANIFEST[name]
    model = model_from_config(json.loads((CONFIGS / f"{name}.json").read_text()), name)
    counts = param_counts(model, kv_bytes=2)
    card = entry["card_total_b"] * 1e9
    limit = max(0.03 * card, 0.1e9 if entry["card_basis"] == "name" else 0.0)
    assert abs(counts.total - card) <= limit
    assert counts.kv_bytes_per_token == entry["kv_bytes_per_token"]


def test_a_low_rank_query_counts_its_down_norm_and_up_projections():
    cfg = {**BASE, "model_type": "step3_text", "num_hidden_layers": 1, "share_q_dim": 32,
           "num_attention_groups": 1, "num_key_value_heads": None}
    model = model_from_config(cfg, "step3")
    q = H * 32 + 32 + 32 * 4 * 64  # q_proj, inter_norm, wq
    kv_o = H * 2 * 64 + 4 * 64 * H  # one KV group; o_proj
    assert param_counts(model).total == EMBEDDING + q + kv_o + GATED_MLP_PARAMS + 2 * H + H
    names = [op.name for op in build_ledger(model, Step.decode(1, 100)).ops]
    assert "attn.q_up" in names


def test_chatglm_keys_give_kv_groups_head_size_and_ffn_width():
    cfg = {"model_type": "chatglm", "num_layers": 2, "hidden_size": H, "num_attention_heads": 4,
           "kv_channels": 64, "multi_query_attention": True, "multi_query_group_num": 1,
           "ffn_hidden_size": 512, "padded_vocab_size": 1000, "tie_word_embeddings": False}
    counts = param_counts(model_from_config(cfg, "chatglm"), kv_bytes=2)
    assert counts.kv_bytes_per_token == 2 * 2 * 1 * 64 * 2
    attention = H * (4 * 64 + 2 * 64) + 4 * 64 * H
    assert counts.total == 2 * EMBEDDING + 2 * (attention + GATED_MLP_PARAMS + 2 * H) + H


def test_qwen2_vl_vision_tower_reads_embed_dim_as_its_width():
    cfg = {**BASE, "model_type": "qwen2_vl", "num_hidden_layers": 1,
           "vision_config": {"depth": 2, "embed_dim": 64, "hidden_size": H, "mlp_ratio": 4,
                             "spatial_merge_size": 2, "spatial_patch_size": 14,
                             "temporal_patch_size": 2, "in_chans": 3}}
    blocks = 2 * (4 * 64 * 64 + 2 * 64 * 256)  # attention and a GELU MLP of 4 × 64
    patch = 14 * 14 * 3 * 2 * 64
    merger = (4 * 64) ** 2 + 4 * 64 * H  # 2×2 patches concatenated, square layer, out to H
    assert model_from_config(cfg, "qwen2-vl").vision_params == blocks + patch + merger


def test_qwen3_omni_reads_the_thinkers_language_model_and_names_the_talker():
    cfg = {"model_type": "qwen3_omni_moe", "talker_config": {"hidden_size": 8},
           "thinker_config": {"model_type": "qwen3_omni_moe_thinker",
                              "text_config": {**BASE, "num_hidden_layers": 2}}}
    model = model_from_config(cfg, "omni")
    assert model.num_layers == 2 and model.hidden_size == H
    assert any("talker" in note for note in model.notes)


def test_cross_layer_kv_sharing_is_named_not_silent():
    cfg = {**BASE, "model_type": "hunyuan", "num_hidden_layers": 2, "use_cla": True,
           "cla_share_factor": 2}
    assert any("use_cla" in note for note in model_from_config(cfg, "hunyuan-large").notes)


def test_bamba_puts_attention_at_its_listed_layers_and_mamba2_elsewhere():
    cfg = {**BASE, "model_type": "bamba", "num_hidden_layers": 3, "attn_layer_indices": [1],
           "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 1,
           "mamba_d_conv": 4}
    model = model_from_config(cfg, "bamba")
    assert [layer.label for layer in model.layers] == ["mamba2/mlp512", "attn/mlp512",
                                                       "mamba2/mlp512"]


def test_lfm2_moe_runs_experts_after_its_dense_layers():
    cfg = {**BASE, "model_type": "lfm2_moe", "num_hidden_layers": 3, "num_dense_layers": 1,
           "layer_types": ["conv", "full_attention", "conv"], "num_experts": 4,
           "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    model = model_from_config(cfg, "lfm2-moe")
    assert [layer.label for layer in model.layers] == ["shortconv/mlp512", "attn/moe4x2",
                                                       "shortconv/moe4x2"]


def test_qwen_v1_intermediate_size_counts_both_mlp_halves():
    cfg = {**BASE, "model_type": "qwen", "num_hidden_layers": 1, "intermediate_size": 1024}
    assert model_from_config(cfg, "qwen-v1").layers[0].mlp.width == 512  # QWenMLP w1, w2


@pytest.mark.parametrize("key", ["attn_layer_period", "expert_layer_period"])
def test_a_zero_layer_period_is_one_clear_error(key):
    with pytest.raises(InputError, match=f"{key} must be at least 1"):
        model_from_config({**JAMBA, key: 0}, "jamba")


def test_a_dense_mlp_without_a_width_is_one_clear_error():
    cfg = {**BASE, "model_type": "gemma4_text", "num_hidden_layers": 2, "global_head_dim": 128,
           "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 512}
    del cfg["intermediate_size"]
    with pytest.raises(InputError, match="lack intermediate_size"):
        model_from_config(cfg, "no-width")


def test_kv_shared_layers_are_named_not_silent():
    cfg = {**BASE, "model_type": "gemma3n_text", "num_hidden_layers": 4, "num_kv_shared_layers": 2}
    assert any("num_kv_shared_layers" in note for note in model_from_config(cfg, "g3n").notes)
    assert not any("num_kv_shared_layers" in note
                   for note in model_from_config({**cfg, "num_kv_shared_layers": 0}, "g").notes)


def test_separate_text_and_vision_experts_are_refused_in_one_line():
    cfg = {**BASE, "model_type": "ernie4_5_moe_vl", "num_hidden_layers": 2,
           "moe_num_experts": [64, 64], "moe_intermediate_size": [1536, 512]}
    with pytest.raises(InputError, match="'ernie4_5_moe_vl' is not supported"):
        model_from_config(cfg, "ernie-vl")
