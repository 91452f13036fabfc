"""Hugging Face ``config.json`` → ``ModelSpec``, across the key variants published models use."""

from __future__ import annotations

import math
import re
from typing import Any

from phasewise.catalog import hf_layers
from phasewise.catalog.hf_layers import Config
from phasewise.catalog.hf_quant import checkpoint_formats, with_expert_format
from phasewise.errors import InputError
from phasewise.specs import ModelSpec
from phasewise.specs.model import Attention, Layer, MoE, projection_names, uniform_layers

# Model types whose MLP is a plain up/activation/down (no gate projection).
UNGATED_MLP_TYPES = {"bloom", "gpt2", "gpt_neox", "gptj", "falcon", "phi", "opt", "gpt_bigcode",
                     "mpt", "starcoder2", "bert", "apertus"}  # ApertusMLP: up, xIELU, down
# transformers' per-class default for tie_word_embeddings when config.json omits it.
TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "bloom", "gpt2", "qwen2",
                   "smollm3", "phi", "starcoder2", "cohere", "cohere2"}
UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe",
                     "deepseek_v2", "deepseek_v3", "deepseek_v32", "phi3", "gpt_oss", "falcon",
                     "nemotron_h", "qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text",
                     "qwen3_5_moe_text", "llama4", "llama4_text", "glm4_moe", "minimax_m2",
                     "kimi_k2", "kimi_linear", "nemotron-nas", "deci", "mimo_v2_flash",
                     "bailing_moe", "ernie4_5_moe", "hunyuan_v1_moe", "dots1", "step3_text",
                     "dbrx", "jamba", "olmoe", "olmo2", "phimoe", "bailing_moe_v2"}
# Keys that change the arithmetic and that no reader here handles: named in a warning.
ARITHMETIC_KEY = re.compile(r"layer|expert|moe|window|chunk|lora|ssm|mamba|linear|mtp|nextn|"
                            r"index|latent|head_dim|heads|kv_|sparse|attn|pattern|block|ffn|"
                            r"compress|ratio|hash|^hc_|groups|dtype")
# Keys that match that pattern but change neither FLOPs nor bytes.
HARMLESS_KEYS = {
    "attention_dropout", "attention_bias", "mlp_bias", "layer_norm_eps", "layer_norm_epsilon",
    "layernorm_epsilon", "router_aux_loss_coef", "output_router_logits", "norm_topk_prob",
    "routed_scaling_factor", "topk_method", "scoring_func", "n_group", "topk_group", "ep_size",
    "aux_loss_alpha", "seq_aux", "moe_router_dtype", "router_jitter_noise",
    "attn_logit_softcapping", "final_logit_softcapping", "use_qk_norm", "qk_layernorm",
    "attention_multiplier", "residual_multiplier", "attn_temperature_tuning", "attn_scale",
    "floor_scale", "mamba_hidden_act", "mamba_proj_bias", "mamba_conv_bias", "mamba_chunk_size",
    "chunk_size", "use_mamba_kernels", "ssm_state_dtype", "mamba_ssm_cache_dtype", "router_bias",
    "moe_aux_loss_coeff", "router_temperature", "expert_bias", "swiglu_limit",
    "moe_capacity_factor", "linear_bias", "ffn_bias", "attn_implementation",
    "_attn_implementation", "moe_router_enable_expert_bias", "e_score_correction_bias",
    "rope_interleave", "partial_rotary_factor", "use_shared_expert_gate", "expert_router_dtype",
    "layer_norm_type", "num_experts_per_group", "mlp_layer_types",
    "use_sliding_window", "max_window_layers", "moe_router_topk", "time_step_limit",
    "time_step_min", "time_step_max", "time_step_floor", "rescale_prenorm_residual",
    "residual_in_fp32", "head_dim_original", "attention_window_size", "query_pre_attn_scalar",
    "sliding_window_size", "qk_head_dim", "indexer_rope_interleave", "mtp_transformer_layers",
    "pruned_heads", "ignore_index", "use_unified_vision_chunk",
    "hidden_size_per_layer_input", "use_double_wide_mlp", "torch_dtype", "dtype",
    "hc_eps", "hc_sinkhorn_iters", "mamba_ssm_dtype", "num_beam_groups", "compress_rope_theta",
    # Scalings, training-only and placement keys of the families read here: no shapes.
    "parallel_attn", "moe_train_capacity_factor", "moe_capacity", "moe_gate", "downsample_ratio",
    "vision_feature_layer", "order_of_interleaved_layers", "no_rope_layers",
    "no_rope_layer_interval", "layernorm_full_attention_beta", "layernorm_linear_attention_beta",
    "ssm_in_multiplier", "ssm_out_multiplier", "ssm_multipliers", "mamba_rms_norm",
    "mamba_norm_before_gate", "attention_in_multiplier", "attention_out_multiplier",
    "mlp_multipliers", "key_multiplier", "projectors_bias", "mamba_expand",
    "moe_renormalize", "moe_router_activation_func", "num_expert_group",
}
TOKEN_KEY = re.compile(r"token_(index|id)s?$|_token$")

# transformers' config-class defaults for keys a published config.json may omit because
# they equal the default (Gemma-3's text_config leaves out vocab, heads and window).
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {  # transformers Gemma3TextConfig.__init__ defaults
        "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "max_position_embeddings": 131_072, "rope_theta": 1_000_000.0,
        "sliding_window": 4096, "sliding_window_pattern": 6, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
    },
}

_KEYS = {
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model", "dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_context": ("max_position_embeddings", "n_positions", "seq_length", "max_seq_len",
                    "model_max_length"),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_topk", "num_experts_per_token",
                          "top_k_experts", "moe_k", "moe_top_k"),
}


def _first(cfg: dict[str, Any], field: str, default: Any = None) -> Any:
    """The first of a field's key variants the config sets (all of them count as read)."""
    values = [cfg.get(key) for key in _KEYS[field]]
    return next((v for v in values if v is not None), default)


def flatten_text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under ``text_config``; its keys win.
    Qwen3-Omni nests it one level deeper, in the thinker (``thinker_config.text_config``)."""
    if isinstance(raw.get("thinker_config"), dict):
        thinker = raw["thinker_config"]
        raw = {**{k: v for k, v in raw.items() if k != "thinker_config"}, **thinker,
               "model_type": raw.get("model_type", thinker.get("model_type", ""))}
    text = raw.get("text_config") or raw.get("language_config") or raw.get("llm_config")
    if not isinstance(text, dict):
        return raw
    merged = {k: v for k, v in raw.items() if k not in ("text_config", "vision_config")}
    merged.update(text)
    merged.setdefault("model_type", raw.get("model_type", ""))
    return merged


def with_class_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    defaults = CLASS_DEFAULTS.get(str(cfg.get("model_type", "")))
    return {**defaults, **cfg} if defaults else cfg


# DBRX nests its attention and FFN geometry (transformers DbrxConfig: DbrxAttentionConfig
# kv_n_heads, rope_theta; DbrxFFNConfig ffn_hidden_size, moe_num_experts, moe_top_k); every
# layer is a MoE of GLU experts (DbrxExpertGLU: w1, v1, w2) that wide.
NESTED_KEYS = {
    "attn_config": {"kv_n_heads": "num_key_value_heads", "rope_theta": "rope_theta"},
    "ffn_config": {"ffn_hidden_size": "moe_intermediate_size", "moe_num_experts": "num_local_experts",
                   "moe_top_k": "num_experts_per_tok"},
}
# Keys some configs give as one value per layer (Hunyuan-A13B's moe_topk,
# moe_intermediate_size, num_shared_expert): read as one value when the list repeats it.
PER_LAYER_LIST_KEYS = ("moe_topk", "moe_intermediate_size", "num_shared_expert",
                       "num_experts_per_tok", "moe_k", "moe_num_shared_experts",
                       "intermediate_size")
# Architectures phasewise reads to a wrong shape if it tried: refused in one line.
UNSUPPORTED_TYPES = {
    "longcat_flash": "two attention and two dense MLP blocks per layer beside a shortcut MoE with "
                     "zero-computation experts",
    "zamba2": "shared transformer blocks reused across layers with per-use LoRA adapters",
    "phi4flash": "SambaY decoder (Mamba, sliding-window attention and gated memory units "
                 "sharing one cache)",
    "rwkv": "RWKV time-mix and channel-mix blocks", "rwkv7": "RWKV-7 time-mix blocks",
    "recurrent_gemma": "Griffin's RG-LRU recurrent blocks beside local attention",
    "ernie4_5_moe_vl": "separate text and vision experts in each MoE layer",
    "openelm": "layer-wise scaling (per-layer query and KV head counts and FFN multipliers)",
}


def normalise_nested(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """Lift DBRX's nested blocks to the flat keys and collapse per-layer lists that repeat one
    value; a per-layer list whose values differ is one clear error, never a silent pick."""
    cfg = dict(raw)
    for block, keys in NESTED_KEYS.items():
        nested = cfg.get(block)
        if isinstance(nested, dict) and cfg.get("model_type") == "dbrx":
            cfg.pop(block)
            for key, flat in keys.items():
                if nested.get(key) is not None:
                    cfg.setdefault(flat, nested[key])
    for key in PER_LAYER_LIST_KEYS:
        value = cfg.get(key)
        if isinstance(value, list) and value:
            if len(set(map(repr, value))) != 1:
                raise InputError(f"{name}: config.json's {key} must be a positive whole number; "
                                 f"it lists values that differ from layer to layer "
                                 f"({sorted(set(map(repr, value)))[:4]}), which phasewise "
                                 "cannot read yet.")
            cfg[key] = value[0]
    return cfg


def _normalised(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return with_class_defaults(normalise_nested(flatten_text_config(raw), name))


def model_from_config(raw: dict[str, Any], name: str, *, sidecar: Any = None) -> ModelSpec:
    """Normalise a published config.json (and a ModelOpt ``hf_quant_config.json`` beside it,
    ``sidecar``) into a per-layer ``ModelSpec``. A value of the wrong kind anywhere (a string,
    a list, NaN or infinity where a number goes) is one clear error."""
    if not isinstance(raw, dict):
        raise InputError(f"{name}: config.json must be a JSON object.")
    model_type = str(flatten_text_config(raw).get("model_type", ""))
    if model_type in UNSUPPORTED_TYPES:
        raise InputError(f"{name}: model type {model_type!r} is not supported: "
                         f"{UNSUPPORTED_TYPES[model_type]}; phasewise cannot price it yet.")
    _check_declared_sizes(_normalised(raw, name), name)
    try:
        return _read(raw, name, sidecar)
    except InputError:
        raise
    except (TypeError, ValueError, OverflowError, AttributeError, KeyError,
            ZeroDivisionError) as err:
        raise InputError(f"{name}: config.json holds a value phasewise cannot read as a number "
                         f"or list where the architecture needs one ({type(err).__name__}: "
                         f"{str(err)[:120]}); fix the file.") from None


def _read(raw: dict[str, Any], name: str, sidecar: Any) -> ModelSpec:
    cfg = Config(_normalised(raw, name))
    model_type = str(cfg.get("model_type", ""))
    notes: list[str] = []
    hidden = _first(cfg, "hidden_size")
    layers = _first(cfg, "num_layers") or _pattern_length(cfg)
    heads = _first(cfg, "num_heads")
    if model_type in hf_layers.PURE_SSM_TYPES:  # no attention: the uniform fields are nominal
        heads = heads or 1
    vocab = _first(cfg, "vocab_size")
    missing = [f for f, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                              ("num_attention_heads", heads), ("vocab_size", vocab)) if v is None]
    if missing:
        raise InputError(f"{name}: config.json lacks {', '.join(missing)}; a decoder config "
                         "needs them (is this the model's config.json?).")
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers),
                       ("num_attention_heads", heads), ("vocab_size", vocab)):
        _check_whole(name, key, value)
    # ChatGLM's multi_query_group_num and Step-3's num_attention_groups are KV head counts.
    kv_heads = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads") \
        or cfg.get("num_attention_groups") \
        or (cfg.get("multi_query_group_num") if cfg.get("multi_query_attention") else None)
    if model_type == "falcon" and cfg.get("multi_query") \
            and not cfg.get("new_decoder_architecture"):
        kv_heads = 1  # transformers' FalconAttention ignores num_kv_heads here (Falcon-7B)
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
        if model_type not in KNOWN_MHA_TYPES | hf_layers.PURE_SSM_TYPES:
            notes.append(f"config.json gives no num_key_value_heads: read as {heads} (one KV "
                         "head per attention head, multi-head attention).")
    head_dim = cfg.get("head_dim") or cfg.get("attention_head_dim") or cfg.get("kv_channels") \
        or int(hidden) // int(heads)
    if cfg.get("attention_head_dim") not in (None, head_dim):
        notes.append(f"config.json gives head_dim {head_dim} and attention_head_dim "
                     f"{cfg['attention_head_dim']}: read as {head_dim}.")
    intermediate = cfg.get("intermediate_size") or cfg.get("ffn_dim") or cfg.get("n_inner") \
        or cfg.get("ffn_hidden_size")
    if model_type == "qwen" and intermediate:  # QWenMLP: w1, w2 are intermediate_size // 2 wide
        intermediate = int(intermediate) // 2
    if intermediate is None:
        intermediate = 4 * int(hidden)
        every_moe = _first(cfg, "num_experts") and not any(
            cfg.get(k) for k in ("first_k_dense_replace", "mlp_only_layers", "moe_layer_freq",
                                 "decoder_sparse_step", "interleave_moe_layer_step"))
        if model_type not in FOUR_X_MLP_TYPES and not cfg.get("block_configs") and not every_moe \
                and model_type not in hf_layers.PURE_SSM_TYPES:
            notes.append(f"config.json gives no intermediate_size: read as 4 × hidden = "
                         f"{intermediate}.")
    for key, value in (("num_key_value_heads", kv_heads), ("head_dim", head_dim),
                       ("intermediate_size", intermediate)):
        _check_whole(name, key, value)
    uniform = dict(
        name=name,
        hidden_size=int(hidden), num_layers=int(layers), num_heads=int(heads),
        num_kv_heads=int(kv_heads), head_dim=int(head_dim), intermediate_size=int(intermediate),
        vocab_size=int(vocab),
        tie_word_embeddings=_tied(cfg, model_type, notes),
        gated_mlp=model_type not in UNGATED_MLP_TYPES and hf_layers.gated(cfg, model_type),
        max_context=int(_first(cfg, "max_context", 4096)),
        model_type=model_type,
        **_rope_and_norm(cfg),
        **_attention_pattern(cfg, int(layers), model_type),
        **_moe_fields(cfg, int(layers)),
        **_mla_fields(cfg),
    )
    cfg.num_layers = int(layers)
    if not cfg.get("hidden_size_per_layer_input"):  # no per-layer embeddings (Gemma-3n has them)
        cfg.read.add("vocab_size_per_layer_input")
    layer_specs = _per_layer(cfg, name, uniform)
    if cfg.get("share_q_dim") and not layer_specs:
        layer_specs = hf_layers.low_rank_query_layers(ModelSpec(**uniform), cfg, name)
    if layer_specs and len(layer_specs) != int(layers):
        raise InputError(f"{name}: the config describes {len(layer_specs)} layers but "
                         f"num_hidden_layers is {layers}.")
    probe = ModelSpec(**uniform, layer_specs=layer_specs)
    parts = tuple(dict.fromkeys(name for mixer in probe.mixers for name in projection_names(mixer)))
    quant, quant_notes = checkpoint_formats(raw.get("quantization_config")
                                            or cfg.get("quantization_config"), sidecar,
                                            moe=probe.is_moe, num_layers=int(layers),
                                            attention_parts=parts)
    notes += quant_notes
    mtp = _mtp_layers(cfg, probe)
    quant = with_expert_format(quant, cfg.get("expert_dtype"), probe.is_moe)
    streams = _hyper_connections(cfg, name)
    notes += _unread_keys(cfg)
    notes += _uncounted_parts(raw, cfg)

    return ModelSpec(**uniform, layer_specs=layer_specs, mtp_layers=mtp,
                     vision_params=_vision_params(raw), checkpoint=quant, notes=tuple(notes),
                     hyper_connections=streams)


def _hyper_connections(cfg: Config, name: str) -> int:
    """DeepSeek-V4's ``hc_mult``: copies of the residual stream (mHC); 0 when absent."""
    value = cfg.get("hc_mult")
    if value is None:
        return 0
    return hf_layers.whole(cfg, "hc_mult", name=name)


# Model types whose configs leave out num_key_value_heads because every head has its own
# K and V, and whose MLP is 4 × hidden when intermediate_size is absent (transformers'
# config-class defaults).
KNOWN_MHA_TYPES = {"llama", "gpt2", "gpt_neox", "gptj", "opt", "bloom", "phi", "mpt", "falcon",
                   "gpt_bigcode", "starcoder2", "bert", "mistral", "qwen", "baichuan", "internlm",
                   "deci", "nemotron-nas", "stablelm", "olmo"}
FOUR_X_MLP_TYPES = {"gpt2", "gpt_bigcode", "gptj", "bloom", "falcon", "mpt", "opt"}


# Sizes that, when a config sets them, must be positive whole numbers.
POSITIVE_SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads",
                      "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                      "moe_intermediate_size", "num_local_experts", "num_experts",
                      "n_routed_experts", "num_experts_per_tok", "max_position_embeddings",
                      "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                      "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                      "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                      "linear_value_head_dim", "attention_chunk_size", "index_topk")


def _check_declared_sizes(cfg: dict[str, Any], name: str) -> None:
    for key in POSITIVE_SIZE_KEYS:
        if cfg.get(key) is not None:
            _check_whole(name, key, cfg[key])
    window = cfg.get("sliding_window")
    if window is not None and window is not False:
        if isinstance(window, bool) or not isinstance(window, int | float) \
                or not math.isfinite(window) or window != int(window) or window < 0:
            raise InputError(f"{name}: config.json's sliding_window must be a whole number of "
                             f"tokens or null, got {window!r}; fix the file.")


# Bounds far above any published model (widths of ~10^5, vocabularies of ~10^6, a few
# hundred layers), so a size past them is a typo or a unit error, not a model.
MAX_CONFIG_SIZE = 1 << 31
MAX_CONFIG_LAYERS = 100_000


def _check_whole(name: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value != int(value) or value <= 0:
        raise InputError(f"{name}: config.json's {key} must be a positive whole number, got "
                         f"{value!r}; fix the file.")
    limit = MAX_CONFIG_LAYERS if key == "num_hidden_layers" else MAX_CONFIG_SIZE
    if value > limit:
        raise InputError(f"{name}: config.json's {key} = {value:g} is beyond any published "
                         f"model (at most {limit:,}); fix the file.")


def _pattern_length(cfg: Config) -> int | None:
    for key in ("hybrid_override_pattern", "layers_block_type", "block_configs"):
        value = cfg.get(key)
        if isinstance(value, str | list) and value:
            return len(value)
    return None


def _per_layer(cfg: Config, name: str, uniform: dict[str, Any]) -> tuple[Layer, ...]:
    """Explicit layers where the uniform fields cannot describe the model; () otherwise."""
    sparse = uniform.get("moe_layers") or ()
    if uniform.get("num_experts") and not sparse:
        sparse = (True,) * uniform["num_layers"]
    gated = uniform["gated_mlp"]
    for reader in (lambda: hf_layers.deepseek_v4_layers(cfg, name, sparse),
                   lambda: hf_layers.mamba_layers(cfg, name),
                   lambda: hf_layers.granite_hybrid_layers(cfg, name),
                   lambda: hf_layers.jamba_layers(cfg, name),
                   lambda: hf_layers.arctic_layers(cfg, name),
                   lambda: hf_layers.falcon_h1_layers(cfg, name),
                   lambda: hf_layers.bamba_layers(cfg, name),
                   lambda: hf_layers.minimax_layers(cfg, name),
                   lambda: hf_layers.nemotron_h_layers(cfg, name),
                   lambda: hf_layers.nas_layers(cfg, name),
                   lambda: hf_layers.qwen3_next_layers(cfg, name, sparse),
                   lambda: hf_layers.kimi_linear_layers(cfg, name, sparse),
                   lambda: hf_layers.llama4_layers(cfg, name),
                   lambda: hf_layers.lfm2_layers(cfg, name),
                   lambda: hf_layers.cross_attention_layers(cfg, name),
                   lambda: hf_layers.swa_geometry_layers(cfg, name, sparse, gated)):
        layers = reader()
        if layers is not None:
            return layers
    if cfg.get("index_topk") or cfg.get("moe_latent_size"):
        base = uniform_layers(ModelSpec(**uniform))
        mixer = hf_layers.softmax_mixer(cfg, name)
        return tuple(Layer(mixer if not isinstance(layer.mixer, Attention) else layer.mixer,
                           hf_layers.moe(cfg, name, is_gated=gated)
                           if isinstance(layer.mlp, MoE) else layer.mlp) for layer in base)
    return ()


def _mtp_layers(cfg: Config, model: ModelSpec) -> tuple[Layer, ...]:
    """Multi-token-prediction layers (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``):
    each a decoder layer like the model's last full-attention layer."""
    count = cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") \
        or (cfg.get("num_mtp_modules") if cfg.get("use_mtp") else 0) or 0
    if not count:
        return ()
    ratios = hf_layers.compress_ratios(cfg, model.name) or []
    if len(ratios) >= model.num_layers + int(count):  # DeepSeek-V4: each MTP layer's own ratio
        mlp = model.layers[-1].mlp
        return tuple(Layer(hf_layers.compressed_attention(cfg, model.name, ratio), mlp)
                     for ratio in ratios[model.num_layers:model.num_layers + int(count)])
    softmax = [layer for layer in model.layers if layer.mixer is not None
               and not model_is_recurrent(layer)]
    like = (softmax or list(model.layers))[-1]
    if like.mlp is None:  # Nemotron's single-purpose blocks: an MTP block has attention and MLP
        mlp = next((layer.mlp for layer in reversed(model.layers) if layer.mlp is not None), None)
        like = Layer(like.mixer, mlp)
    return (like,) * int(count)


def model_is_recurrent(layer: Layer) -> bool:
    return layer.mixer is not None and layer.mixer.label in ("mamba2", "mamba1", "gated_deltanet",
                                                             "kda")


def _vision_params(raw: dict[str, Any]) -> float:
    """A vision tower's parameters from ``vision_config``: per block the attention (4·d²)
    and the MLP (2·d·width, 3· for a gated one), the patch embedding, and a patch merger into
    the language model where the config gives one (Qwen2.5-VL: spatial_merge_size² patches
    of d concatenated, a square layer, then one to out_hidden_size)."""
    vision = raw.get("vision_config")
    if not isinstance(vision, dict):
        return 0.0
    # Qwen2-VL names the ViT width embed_dim and the merger's output hidden_size.
    d = vision.get("embed_dim") or vision.get("hidden_size") or vision.get("width")
    depth = vision.get("num_hidden_layers") or vision.get("depth") or vision.get("layers")
    if not isinstance(d, int) or not isinstance(depth, int) or d <= 0 or depth <= 0:
        return 0.0
    width = vision.get("intermediate_size") or vision.get("mlp_dim") \
        or int((vision.get("mlp_ratio") or 4) * d)
    mats = 3 if str(vision.get("hidden_act", "")).startswith(("silu", "swiglu")) else 2
    patch = int(vision.get("patch_size") or 14)
    channels = int(vision.get("num_channels") or vision.get("in_channels") or 3)
    temporal = int(vision.get("temporal_patch_size") or 1)
    merger = 0
    out = vision.get("out_hidden_size") or (vision.get("hidden_size") if vision.get("embed_dim")
                                            else None)
    if out and vision.get("spatial_merge_size"):
        merged = d * int(vision["spatial_merge_size"]) ** 2
        merger = merged * merged + merged * int(out)
    return float(depth * (4 * d * d + mats * d * int(width))
                 + patch * patch * channels * temporal * d + merger)


def _uncounted_parts(raw: dict[str, Any], cfg: Config) -> list[str]:
    """Parts of a checkpoint the arithmetic leaves out or shapes it does not share, named."""
    notes = []
    if isinstance(raw.get("talker_config"), dict):
        notes.append("the checkpoint's talker (speech output, talker_config) is not counted; "
                     "the thinker's language model is.")
    shared = cfg.get("num_kv_shared_layers")
    if isinstance(shared, int) and shared > 0:
        notes.append(f"num_kv_shared_layers: the last {shared} layers reuse earlier layers' KV "
                     "cache (Gemma-3n); phasewise gives them their own, so the KV footprint is "
                     "overstated.")
    if cfg.get("use_cla") and int(cfg.get("cla_share_factor") or 1) > 1:
        notes.append(f"use_cla: every {cfg['cla_share_factor']} layers share one KV cache "
                     "(cross-layer attention); phasewise gives every layer its own, so KV bytes "
                     "and the K/V projections are overstated.")
    return notes


def _unread_keys(cfg: Config) -> list[str]:
    """Keys that look as if they change the arithmetic and that no reader looked at."""
    unread = sorted(k for k, v in cfg.items() if k not in cfg.read and k not in HARMLESS_KEYS
                    and ARITHMETIC_KEY.search(k) and not TOKEN_KEY.search(k)
                    and v not in (None, False, 0, [], ""))
    if not unread:
        return []
    return [f"config.json keys phasewise does not read and that may change the arithmetic: "
            f"{', '.join(unread[:8])}{' …' if len(unread) > 8 else ''}."]

def _tied(cfg: dict[str, Any], model_type: str, notes: list[str]) -> bool:
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    if model_type in UNTIED_BY_DEFAULT:
        return False
    if model_type not in TIED_BY_DEFAULT:
        notes.append(f"config.json does not say whether embeddings are tied and model type "
                     f"{model_type or '(none)'!r} is not one phasewise knows: read as tied "
                     "(transformers' default), so the LM head adds no weights.")
    return True  # transformers' PretrainedConfig default, and TIED_BY_DEFAULT's


def _rope_and_norm(cfg: dict[str, Any]) -> dict[str, Any]:
    """RoPE base and scaling under the old keys (``rope_theta``, ``rope_scaling`` with ``type``
    or ``rope_type``, ``rotary_emb_base``) and the new ``rope_parameters`` table."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else {}
    theta = cfg.get("rope_theta") or params.get("rope_theta") or cfg.get("rotary_emb_base") \
        or 10000.0
    kind = scaling.get("rope_type") or scaling.get("type") or params.get("rope_type") or ""
    eps = cfg.get("rms_norm_eps") or cfg.get("layer_norm_epsilon") or cfg.get("layer_norm_eps") \
        or cfg.get("norm_eps") or 1e-5
    # Nemotron-H names its MLP's activation apart; its hidden_act is the Mamba mixer's.
    act = cfg.get("mlp_hidden_act") or cfg.get("hidden_act") or cfg.get("hidden_activation") \
        or cfg.get("activation_function") or "silu"
    return {"rope_theta": float(theta), "rope_scaling": "" if kind == "default" else str(kind),
            "norm_eps": float(eps), "hidden_act": str(act)}


def _attention_pattern(cfg: dict[str, Any], layers: int, model_type: str) -> dict[str, Any]:
    """Which layers attend through a sliding window: explicit ``layer_types``; Gemma-3's
    ``sliding_window_pattern`` (every Nth layer global); Gemma-2's alternation (even layers
    sliding); otherwise every layer when a window is set and not switched off."""
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False or not window:
        return {"layer_types": (), "sliding_window": None}
    window = int(window)
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        kinds = tuple("sliding" if "sliding" in str(t) else "full" for t in types)
    elif cfg.get("sliding_window_pattern"):
        period = int(cfg["sliding_window_pattern"])
        kinds = tuple("full" if (i + 1) % period == 0 else "sliding" for i in range(layers))
    elif model_type == "gemma2" or cfg.get("cache_implementation") == "hybrid":
        kinds = tuple("sliding" if i % 2 == 0 else "full" for i in range(layers))
    elif cfg.get("max_window_layers") is not None and model_type.startswith("qwen"):
        first_full = int(cfg["max_window_layers"])
        kinds = tuple("full" if i < first_full else "sliding" for i in range(layers))
    else:
        kinds = ("sliding",) * layers
    if "sliding" not in kinds:
        return {"layer_types": (), "sliding_window": None}
    return {"layer_types": kinds, "sliding_window": window}


def _moe_fields(cfg: dict[str, Any], layers: int) -> dict[str, Any]:
    experts = _first(cfg, "num_experts", 0) or 0
    if not experts:
        return {}
    top_k = _first(cfg, "experts_per_token", 0) or 0
    width = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
    shared_width = hf_layers.shared_expert_width(cfg, int(width))
    first_dense = int(cfg.get("first_k_dense_replace") or 0)
    freq = cfg.get("moe_layer_freq") or 1
    step = int(cfg.get("decoder_sparse_step") or 1)
    dense_only = set(cfg.get("mlp_only_layers") or ())
    if cfg.get("moe_layer_start_index") is not None:
        sparse = ernie_moe_layers(cfg, layers)
    elif isinstance(cfg.get("moe_layers_enum"), str):  # Step-3: "4,5,…,59"
        listed = {int(i) for i in cfg["moe_layers_enum"].split(",") if i.strip()}
        sparse = tuple(i in listed for i in range(layers))
    elif isinstance(freq, list):  # one flag per layer (MiMo-V2-Flash, MiniMax)
        if len(freq) != layers:
            raise InputError(f"moe_layer_freq lists {len(freq)} layers but the model has "
                             f"{layers}; fix the config.json.")
        sparse = tuple(bool(f) and i not in dense_only for i, f in enumerate(freq))
    else:
        sparse = tuple(
            i >= first_dense and i % int(freq) == 0 and (i + 1) % step == 0
            and i not in dense_only for i in range(layers))
    return {"num_experts": int(experts), "experts_per_token": int(top_k),
            "moe_intermediate_size": int(width), "shared_expert_intermediate_size": int(shared_width),
            "moe_layers": sparse}


def ernie_moe_layers(cfg: dict[str, Any], layers: int) -> tuple[bool, ...]:
    """ERNIE-4.5 (transformers Ernie4_5_MoeDecoderLayer): layer i is a MoE when
    (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index
    (an end of -1: the last layer)."""
    start = int(cfg["moe_layer_start_index"])
    end = int(cfg.get("moe_layer_end_index") if cfg.get("moe_layer_end_index") is not None
              else layers - 1)
    end = layers - 1 if end < 0 else end
    interval = int(cfg.get("moe_layer_interval") or 1)
    return tuple((i + 1) % interval == 0 and start <= i <= end for i in range(layers))


def _mla_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    if not cfg.get("kv_lora_rank"):
        return {}
    return {"kv_lora_rank": int(cfg["kv_lora_rank"]), "q_lora_rank": int(cfg.get("q_lora_rank") or 0),
            "qk_rope_head_dim": int(cfg["qk_rope_head_dim"]),
            "qk_nope_head_dim": int(cfg["qk_nope_head_dim"]), "v_head_dim": int(cfg["v_head_dim"])}
