"""Hugging Face ``config.json`` → ``ModelSpec``, across the key variants published models use."""

from __future__ import annotations

from typing import Any

from phasewise.errors import InputError
from phasewise.specs import ModelSpec

# Model types whose MLP is a plain up/activation/down (no gate projection).
UNGATED_MLP_TYPES = {"bloom", "gpt2", "gpt_neox", "gptj", "falcon", "phi", "opt", "gpt_bigcode",
                     "mpt", "starcoder2", "bert"}
# transformers' per-class default for tie_word_embeddings when config.json omits it.
TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "bloom", "gpt2", "qwen2",
                   "smollm3", "phi"}
UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe",
                     "deepseek_v2", "deepseek_v3", "phi3", "gpt_oss", "falcon"}

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
                          "top_k_experts"),
}


def _first(cfg: dict[str, Any], field: str, default: Any = None) -> Any:
    for key in _KEYS[field]:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def flatten_text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under ``text_config``; its keys win."""
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


def model_from_config(raw: dict[str, Any], name: str) -> ModelSpec:
    """Normalise a published config.json into a ``ModelSpec``."""
    if not isinstance(raw, dict):
        raise InputError(f"{name}: config.json must be a JSON object.")
    cfg = with_class_defaults(flatten_text_config(raw))
    model_type = str(cfg.get("model_type", ""))
    hidden = _first(cfg, "hidden_size")
    layers = _first(cfg, "num_layers")
    heads = _first(cfg, "num_heads")
    vocab = _first(cfg, "vocab_size")
    missing = [f for f, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                              ("num_attention_heads", heads), ("vocab_size", vocab)) if v is None]
    if missing:
        raise InputError(f"{name}: config.json lacks {', '.join(missing)}; a decoder config "
                         "needs them (is this the model's config.json?).")
    kv_heads = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads")
    if model_type == "falcon" and cfg.get("multi_query") \
            and not cfg.get("new_decoder_architecture"):
        kv_heads = 1  # transformers' FalconAttention ignores num_kv_heads here (Falcon-7B)
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head_dim = cfg.get("head_dim") or hidden // heads
    intermediate = cfg.get("intermediate_size") or cfg.get("ffn_dim") or cfg.get("n_inner") \
        or 4 * hidden
    return ModelSpec(
        name=name,
        hidden_size=int(hidden), num_layers=int(layers), num_heads=int(heads),
        num_kv_heads=int(kv_heads), head_dim=int(head_dim), intermediate_size=int(intermediate),
        vocab_size=int(vocab),
        tie_word_embeddings=_tied(cfg, model_type),
        gated_mlp=model_type not in UNGATED_MLP_TYPES,
        max_context=int(_first(cfg, "max_context", 4096)),
        model_type=model_type,
        **_rope_and_norm(cfg),
        **_attention_pattern(cfg, int(layers), model_type),
        **_moe_fields(cfg, int(layers)),
        **_mla_fields(cfg),
    )


def _tied(cfg: dict[str, Any], model_type: str) -> bool:
    if "tie_word_embeddings" in cfg:
        return bool(cfg["tie_word_embeddings"])
    if model_type in UNTIED_BY_DEFAULT:
        return False
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
    act = cfg.get("hidden_act") or cfg.get("hidden_activation") or cfg.get("activation_function") \
        or "silu"
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
    shared_width = cfg.get("shared_expert_intermediate_size") or 0
    if not shared_width and cfg.get("n_shared_experts"):
        shared_width = int(cfg["n_shared_experts"]) * int(width)
    first_dense = int(cfg.get("first_k_dense_replace") or 0)
    freq = int(cfg.get("moe_layer_freq") or 1)
    step = int(cfg.get("decoder_sparse_step") or 1)
    dense_only = set(cfg.get("mlp_only_layers") or ())
    sparse = tuple(
        i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only
        for i in range(layers)
    )
    return {"num_experts": int(experts), "experts_per_token": int(top_k),
            "moe_intermediate_size": int(width), "shared_expert_intermediate_size": int(shared_width),
            "moe_layers": sparse}


def _mla_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    if not cfg.get("kv_lora_rank"):
        return {}
    return {"kv_lora_rank": int(cfg["kv_lora_rank"]), "q_lora_rank": int(cfg.get("q_lora_rank") or 0),
            "qk_rope_head_dim": int(cfg["qk_rope_head_dim"]),
            "qk_nope_head_dim": int(cfg["qk_nope_head_dim"]), "v_head_dim": int(cfg["v_head_dim"])}
