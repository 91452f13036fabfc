"""The config normaliser across the key variants published configs use."""

import json

import pytest

from phasewise.catalog import load_model, model_from_config
from phasewise.errors import InputError

BASE = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 8, "vocab_size": 1000, "intermediate_size": 512}


def spec(**overrides):
    return model_from_config({**BASE, **overrides}, "test")


def test_missing_kv_heads_means_multi_head_attention():
    assert spec().num_kv_heads == 8


def test_explicit_head_dim_wins_over_hidden_over_heads():
    assert spec(head_dim=64).head_dim == 64
    assert spec().head_dim == 32


def test_text_config_nesting_is_flattened():
    nested = {"model_type": "gemma3", "text_config": {**BASE, "model_type": "llama"},
              "vision_config": {"hidden_size": 1152}}
    assert model_from_config(nested, "vlm").hidden_size == 256


@pytest.mark.parametrize("key", ["num_local_experts", "num_experts", "n_routed_experts"])
def test_expert_count_key_variants(key):
    moe = spec(**{key: 16, "num_experts_per_tok": 2, "moe_intermediate_size": 128})
    assert (moe.num_experts, moe.experts_per_token, moe.moe_intermediate_size) == (16, 2, 128)


def test_shared_experts_by_count_or_width():
    by_count = spec(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                    n_shared_experts=2)
    by_width = spec(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                    shared_expert_intermediate_size=100)
    assert by_count.shared_expert_intermediate_size == 128
    assert by_width.shared_expert_intermediate_size == 100


def test_first_k_dense_and_layer_frequency():
    moe = spec(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
               first_k_dense_replace=1, moe_layer_freq=2)
    assert moe.moe_layers == (False, False, True, False)


def test_decoder_sparse_step_and_mlp_only_layers():
    moe = spec(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
               decoder_sparse_step=2, mlp_only_layers=[3])
    assert moe.moe_layers == (False, True, False, False)


def test_mla_keys():
    mla = spec(kv_lora_rank=64, q_lora_rank=96, qk_rope_head_dim=16, qk_nope_head_dim=32,
               v_head_dim=32)
    assert mla.is_mla and mla.qk_head_dim == 48 and mla.value_head_dim == 32


def test_layer_types_mark_sliding_layers():
    hybrid = spec(sliding_window=128,
                  layer_types=["sliding_attention", "full_attention"] * 2)
    assert hybrid.layer_types == ("sliding", "full", "sliding", "full")


def test_gemma2_alternates_without_a_pattern_key():
    gemma = spec(model_type="gemma2", sliding_window=4096)
    assert gemma.layer_types == ("sliding", "full", "sliding", "full")


def test_sliding_window_pattern_marks_every_nth_layer_global():
    gemma3 = spec(sliding_window=1024, sliding_window_pattern=2)
    assert gemma3.layer_types == ("sliding", "full", "sliding", "full")


def test_sliding_window_switched_off():
    assert spec(sliding_window=4096, use_sliding_window=False).layer_types == ()


def test_tied_embeddings_default_by_model_type():
    assert spec().tie_word_embeddings is False  # LlamaConfig's default
    assert spec(model_type="gemma2").tie_word_embeddings is True
    assert spec(tie_word_embeddings=True).tie_word_embeddings is True


def test_old_and_new_rope_keys():
    old = spec(rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 2.0})
    new = spec(rope_parameters={"rope_theta": 1e6, "rope_type": "yarn"})
    assert (old.rope_theta, old.rope_scaling) == (500000.0, "linear")
    assert (new.rope_theta, new.rope_scaling) == (1e6, "yarn")
    assert spec(rope_scaling={"rope_type": "llama3"}).rope_scaling == "llama3"


def test_bloom_old_key_names():
    bloom = load_model("bloom-176b")
    assert (bloom.hidden_size, bloom.num_layers, bloom.num_heads) == (14336, 70, 112)
    assert not bloom.gated_mlp and bloom.intermediate_size == 4 * 14336


def test_gemma3_text_config_omits_defaults():
    gemma = load_model("gemma-3-4b")  # heads, KV heads, head_dim and vocab are class defaults
    assert (gemma.num_heads, gemma.num_kv_heads, gemma.head_dim, gemma.vocab_size) == \
        (8, 4, 256, 262_208)


def test_partial_config_names_what_is_missing(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(InputError, match="num_hidden_layers"):
        load_model(str(path))


def test_malformed_json_is_a_clear_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_model(str(path))


def test_heads_not_a_multiple_of_kv_heads_is_refused():
    with pytest.raises(InputError, match="multiple"):
        spec(num_key_value_heads=3)


def test_falcon_multi_query_means_one_kv_head_whatever_num_kv_heads_says():
    # Falcon-7B's architecture: 32 layers, 4544 wide, 71 query heads sharing one K/V head
    # (multi-query); a re-saved config carries num_kv_heads = 71, which transformers'
    # FalconAttention ignores unless new_decoder_architecture is set (Falcon-40B: 8 groups).
    falcon7 = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
               "num_attention_heads": 71, "num_kv_heads": 71, "multi_query": True,
               "new_decoder_architecture": False, "vocab_size": 65024}
    assert model_from_config(falcon7, "f7").num_kv_heads == 1
    falcon40 = {"model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60,
                "num_attention_heads": 128, "num_kv_heads": 8, "multi_query": True,
                "new_decoder_architecture": True, "vocab_size": 65024}
    assert model_from_config(falcon40, "f40").num_kv_heads == 8
