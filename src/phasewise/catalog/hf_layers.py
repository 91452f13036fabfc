"""Per-layer readers: the config keys that give a model layers of different kinds.

Each reader returns the layers (``specs.model.Layer``) for one way a published config
describes them, or None when the config does not use that way; ``per_layer`` tries them in
turn. A uniform decoder (every layer the same attention, dense or MoE by a simple rule)
needs none of these: the uniform fields describe it.

Layer kinds follow the engines that run these models: vLLM's and SGLang's Nemotron-H build
a layer per character of ``hybrid_override_pattern`` (M mamba, * attention, - MLP, E MoE);
Qwen3-Next and Qwen3.5 alternate ``linear_attention`` and ``full_attention`` per
``layer_types``; Llama-4 interleaves dense and MoE layers and chunked and global attention;
Nemotron NAS models (DeciLM) list a ``block_configs`` entry per layer.
"""

from __future__ import annotations

import math
from typing import Any

from phasewise.errors import InputError
from phasewise.specs.model import (
    MLP,
    Attention,
    CompressedAttention,
    CrossAttention,
    DenseMLP,
    LatentAttention,
    Layer,
    LinearAttention,
    LinearMixer,
    LinearMLP,
    Mamba1,
    Mamba2,
    Mixer,
    MoE,
    ParallelMixers,
    ShortConv,
)

# Llama-4 leaves every 4th layer without RoPE, global; the others attend in chunks
# (transformers Llama4TextConfig: no_rope_layer_interval = 4).
LLAMA4_NO_ROPE_INTERVAL = 4
# Qwen3-Next: one full-attention layer every 4 (Qwen3NextConfig.full_attention_interval).
QWEN3_NEXT_FULL_ATTENTION_INTERVAL = 4


# Model types with no attention at all: a stack of state-space mixers, no MLP.
PURE_SSM_TYPES = {"mamba2", "mamba", "falcon_mamba"}


class Config(dict):
    """A config.json mapping that records which keys the reader looked at, so the keys it
    never read can be named in a warning."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(raw)
        self.read: set[str] = set()
        self.num_layers = 0  # the layer count the reader settled on

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


def whole(cfg: Config, key: str, default: int | None = None, *, name: str = "") -> int:
    """A positive whole number from the config, or a clear error."""
    value = cfg.get(key, default)
    if value is None:
        raise InputError(f"{name}: config.json lacks {key}, which this architecture needs.")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or value < 0:
        raise InputError(f"{name}: config.json's {key} must be a whole number, got {value!r}.")
    return int(value)


def positive(cfg: Config, key: str, default: int | None = None, *, name: str = "") -> int:
    """A whole number of at least 1 (a period, a head count), or a clear error."""
    value = whole(cfg, key, default, name=name)
    if value < 1:
        raise InputError(f"{name}: config.json's {key} must be at least 1, got {value}; fix the "
                         "file.")
    return value


def attention(cfg: Config, name: str, *, window: int | None = None, chunk: int | None = None,
              gated: bool = False) -> Attention:
    heads = whole(cfg, "num_attention_heads", name=name)
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or cfg.get("attention_head_dim") \
        or whole(cfg, "hidden_size", name=name) // heads
    return Attention(heads, int(kv), int(head_dim), window=window, chunk=chunk, gated=gated)


def latent_attention(cfg: Config, name: str) -> LatentAttention:
    return LatentAttention(
        whole(cfg, "num_attention_heads", name=name), int(cfg.get("q_lora_rank") or 0),
        whole(cfg, "kv_lora_rank", name=name), whole(cfg, "qk_rope_head_dim", name=name),
        whole(cfg, "qk_nope_head_dim", name=name), whole(cfg, "v_head_dim", name=name),
        index_topk=int(cfg.get("index_topk") or 0),
        index_heads=int(cfg.get("index_n_heads") or 0) if cfg.get("index_topk") else 0,
        index_head_dim=int(cfg.get("index_head_dim") or 0) if cfg.get("index_topk") else 0)


def softmax_mixer(cfg: Config, name: str, **kw: Any) -> Mixer:
    if cfg.get("kv_lora_rank"):
        return latent_attention(cfg, name)
    return attention(cfg, name, **kw)


def gated(cfg: Config, model_type: str) -> bool:
    act = str(cfg.get("mlp_hidden_act") or cfg.get("hidden_act") or "silu")
    return not (model_type in {"nemotron_h"} or act in {"relu2"})


def moe(cfg: Config, name: str, *, is_gated: bool) -> MoE:
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") \
        or cfg.get("num_experts") or cfg.get("moe_num_experts")
    top_k = cfg.get("num_experts_per_tok") or cfg.get("moe_topk") \
        or cfg.get("num_experts_per_token") or cfg.get("top_k_experts") or cfg.get("moe_k")
    if not experts or not top_k:
        raise InputError(f"{name}: a MoE layer needs the expert count and experts per token "
                         "(n_routed_experts / num_experts, num_experts_per_tok).")
    width = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
    shared = shared_expert_width(cfg, int(width))
    return MoE(int(experts), int(top_k), int(width), int(shared), is_gated,
               latent_size=int(cfg.get("moe_latent_size") or 0))


def shared_expert_width(cfg: dict[str, Any], width: int) -> int:
    """The shared experts' width in all, under each family's keys: one width
    (``shared_expert_intermediate_size``), a count of expert-wide shared experts
    (``share_expert_dim`` in Step-3), a count of expert-wide shared experts
    (DeepSeek ``n_shared_experts``, ERNIE-4.5 ``moe_num_shared_experts``, Ling
    ``num_shared_experts``), or Hunyuan's ``num_shared_expert`` MLPs of ``intermediate_size``
    when ``use_mixed_mlp_moe`` (HunYuanMoEV1's shared_mlp is intermediate_size ×
    num_shared_expert wide)."""
    shared = cfg.get("moe_shared_expert_intermediate_size") \
        or cfg.get("shared_expert_intermediate_size") or cfg.get("share_expert_dim") or 0
    if shared:
        return int(shared)
    for key in ("n_shared_experts", "moe_num_shared_experts", "num_shared_experts"):
        if cfg.get(key):
            return int(cfg[key]) * int(width)
    if cfg.get("use_mixed_mlp_moe") and cfg.get("num_shared_expert"):
        return int(cfg["num_shared_expert"]) * int(cfg.get("intermediate_size") or width)
    return 0


def nemotron_h_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Nemotron-H and Nemotron-3: one block per character of ``hybrid_override_pattern``, or
    per entry of ``layers_block_type`` — a Mamba-2 mixer, attention, a relu² MLP or a MoE."""
    pattern = cfg.get("hybrid_override_pattern")
    kinds: list[str]
    if isinstance(pattern, str) and pattern:
        table = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        unknown = sorted(set(pattern) - set(table))
        if unknown:
            raise InputError(f"{name}: hybrid_override_pattern has unknown block kinds "
                             f"{unknown}; phasewise knows M (Mamba-2), * (attention), - (MLP) "
                             "and E (MoE).")
        kinds = [table[c] for c in pattern]
    elif isinstance(cfg.get("layers_block_type"), list):
        kinds = [str(k).lower() for k in cfg["layers_block_type"]]
    else:
        return None
    mamba = Mamba2(whole(cfg, "mamba_num_heads", name=name), whole(cfg, "mamba_head_dim", name=name),
                   whole(cfg, "ssm_state_size", name=name), whole(cfg, "n_groups", 1, name=name),
                   whole(cfg, "conv_kernel", 4, name=name))
    is_gated = gated(cfg, "nemotron_h")
    layers = []
    for kind in kinds:
        if kind == "mamba":
            layers.append(Layer(mamba, None))
        elif kind == "attention":
            layers.append(Layer(attention(cfg, name), None))
        elif kind == "mlp":
            layers.append(Layer(None, DenseMLP(whole(cfg, "intermediate_size", name=name),
                                               is_gated)))
        elif kind == "moe":
            layers.append(Layer(None, moe(cfg, name, is_gated=is_gated)))
        else:
            raise InputError(f"{name}: unknown layer kind {kind!r} in layers_block_type; "
                             "phasewise knows mamba, attention, mlp and moe.")
    return tuple(layers)


def _dense_or_moe(cfg: Config, name: str, index: int, sparse: tuple[bool, ...],
                  dense_width: int, is_gated: bool) -> MLP:
    if sparse and sparse[index]:
        return moe(cfg, name, is_gated=is_gated)
    return DenseMLP(dense_width, is_gated)


def qwen3_next_layers(cfg: Config, name: str, sparse: tuple[bool, ...]) -> tuple[Layer, ...] | None:
    """Qwen3-Next / Qwen3.5: Gated DeltaNet layers with a gated full-attention layer every
    ``full_attention_interval`` (or as ``layer_types`` lists them)."""
    types = cfg.get("layer_types")
    layers_n = cfg.num_layers
    if isinstance(types, list) and any("linear" in str(t) for t in types):
        linear = ["linear" in str(t) for t in types]
    elif cfg.get("linear_num_value_heads") and cfg.get("full_attention_interval") is not None:
        interval = whole(cfg, "full_attention_interval", QWEN3_NEXT_FULL_ATTENTION_INTERVAL,
                         name=name)
        linear = [(i + 1) % interval != 0 for i in range(layers_n)]
    else:
        return None
    delta = LinearAttention(whole(cfg, "linear_num_key_heads", name=name),
                            whole(cfg, "linear_num_value_heads", name=name),
                            whole(cfg, "linear_key_head_dim", name=name),
                            whole(cfg, "linear_value_head_dim", name=name),
                            whole(cfg, "linear_conv_kernel_dim", 4, name=name))
    full = attention(cfg, name, gated=bool(cfg.get("attn_output_gate", True)))
    dense_width = int(cfg.get("intermediate_size") or 0)
    return tuple(Layer(delta if is_linear else full,
                       _dense_or_moe(cfg, name, i, sparse, dense_width, True))
                 for i, is_linear in enumerate(linear))


def kimi_linear_layers(cfg: Config, name: str, sparse: tuple[bool, ...]) -> tuple[Layer, ...] | None:
    """Kimi Linear: Kimi Delta Attention layers and MLA layers, as ``linear_attn_config``
    lists them (1-based layer numbers)."""
    linear_cfg = cfg.get("linear_attn_config")
    if not isinstance(linear_cfg, dict):
        return None
    layers_n = cfg.num_layers
    kda = {int(i) - 1 for i in linear_cfg.get("kda_layers") or ()}
    heads, head_dim = int(linear_cfg.get("num_heads") or 0), int(linear_cfg.get("head_dim") or 0)
    if not heads or not head_dim:
        raise InputError(f"{name}: linear_attn_config needs num_heads and head_dim.")
    delta = LinearAttention(heads, heads, head_dim, head_dim,
                            int(linear_cfg.get("short_conv_kernel_size") or 4), "kda")
    full = softmax_mixer(cfg, name)
    dense_width = int(cfg.get("intermediate_size") or 0)
    return tuple(Layer(delta if i in kda else full,
                       _dense_or_moe(cfg, name, i, sparse, dense_width, True))
                 for i in range(layers_n))


def llama4_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Llama-4: MoE every ``interleave_moe_layer_step`` layers (or as ``moe_layers`` lists),
    each MoE with a shared expert as wide as one routed expert, dense layers of
    ``intermediate_size_mlp``; RoPE layers attend in chunks of ``attention_chunk_size``,
    the NoPE layers (``no_rope_layers`` 0) globally."""
    if cfg.get("interleave_moe_layer_step") is None and cfg.get("intermediate_size_mlp") is None:
        return None
    n = cfg.num_layers
    listed = cfg.get("moe_layers")
    if isinstance(listed, list):
        moe_set = {int(i) for i in listed}
    else:
        step = whole(cfg, "interleave_moe_layer_step", 1, name=name)
        moe_set = {i for i in range(n) if step and (i + 1) % step == 0}
    no_rope = cfg.get("no_rope_layers")
    if not isinstance(no_rope, list) or len(no_rope) != n:
        no_rope = [int((i + 1) % LLAMA4_NO_ROPE_INTERVAL != 0) for i in range(n)]
    chunk = cfg.get("attention_chunk_size")
    experts = MoE(whole(cfg, "num_local_experts", name=name),
                  whole(cfg, "num_experts_per_tok", name=name),
                  whole(cfg, "intermediate_size", name=name),
                  shared_width=whole(cfg, "intermediate_size", name=name))
    dense = DenseMLP(whole(cfg, "intermediate_size_mlp", name=name))
    layers = []
    for i in range(n):
        mixer = attention(cfg, name, chunk=int(chunk) if chunk and no_rope[i] else None)
        layers.append(Layer(mixer, experts if i in moe_set else dense))
    return tuple(layers)


def _ffn_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's _ffn_mult_to_intermediate_size: int(2·mult·hidden/3) rounded up to 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


def nas_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Nemotron NAS (DeciLM): per block, attention with its own KV-head grouping, skipped
    (``no_op``) or replaced by a linear map, and an FFN of its own width (``ffn_mult``)."""
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list):
        return None
    hidden = whole(cfg, "hidden_size", name=name)
    heads = whole(cfg, "num_attention_heads", name=name)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    layers = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise InputError(f"{name}: block_configs[{index}] is not an object.")
        att, ffn = block.get("attention") or {}, block.get("ffn") or {}
        mixer: Mixer | None
        if att.get("no_op"):
            mixer = None
        elif att.get("replace_with_linear"):
            mixer = LinearMixer()
        else:
            kv = att.get("num_key_value_heads") or heads // int(att.get("n_heads_in_group") or 1)
            mixer = Attention(heads, int(kv), head_dim,
                              window=int(att["window_length"]) if att.get("window_length") else None)
        mlp: MLP | None
        if ffn.get("no_op"):
            mlp = None
        elif ffn.get("replace_with_linear"):
            mlp = LinearMLP()
        else:
            width = ffn.get("intermediate_size") or _ffn_width(float(ffn.get("ffn_mult") or 0), hidden)
            mlp = DenseMLP(int(width))
        layers.append(Layer(mixer, mlp))
    return tuple(layers)


def swa_geometry_layers(cfg: Config, name: str, sparse: tuple[bool, ...],
                        is_gated: bool) -> tuple[Layer, ...] | None:
    """Sliding-window layers with their own head geometry (MiMo-V2-Flash's ``swa_*`` keys) or
    global layers with theirs (Gemma's ``global_head_dim``, ``num_global_key_value_heads``),
    with the window pattern of ``layer_types`` / ``hybrid_layer_pattern``."""
    swa_keys = ("swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim")
    global_keys = ("global_head_dim", "num_global_key_value_heads")
    if not any(cfg.get(k) for k in swa_keys + global_keys):
        return None
    n = cfg.num_layers
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    pattern = cfg.get("hybrid_layer_pattern")
    if isinstance(types, list) and len(types) == n:
        sliding = ["sliding" in str(t) for t in types]
    elif isinstance(pattern, list) and len(pattern) == n:
        sliding = [bool(p) for p in pattern]  # 1: sliding-window layer
    else:
        return None
    base = attention(cfg, name)
    swa = Attention(int(cfg.get("swa_num_attention_heads") or base.heads),
                    int(cfg.get("swa_num_key_value_heads") or base.kv_heads),
                    int(cfg.get("swa_head_dim") or base.head_dim),
                    value_dim=int(cfg.get("swa_v_head_dim") or 0),
                    window=int(window) if window else None)
    full = Attention(base.heads, int(cfg.get("num_global_key_value_heads") or base.kv_heads),
                     int(cfg.get("global_head_dim") or base.head_dim),
                     value_dim=int(cfg.get("v_head_dim") or 0))
    dense_width = int(cfg.get("intermediate_size") or 0)
    if cfg.get("enable_moe_block"):  # Gemma-4: a dense MLP beside the experts in every layer
        experts = moe(cfg, name, is_gated=is_gated)
        beside = MoE(experts.experts, experts.top_k, experts.width, experts.shared_width,
                     is_gated, dense_width=dense_width)
        return tuple(Layer(swa if s else full, beside) for s in sliding)
    return tuple(Layer(swa if s else full, _dense_or_moe(cfg, name, i, sparse, dense_width, is_gated))
                 for i, s in enumerate(sliding))


def lfm2_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """LFM2: gated short-conv layers and GQA layers as ``layer_types`` lists them ("conv",
    "full_attention"), each with a SwiGLU MLP whose width transformers' Lfm2MLP adjusts:
    2/3 of ``block_ff_dim`` when ``block_auto_adjust_ff_dim``, times the multiplier, rounded
    up to ``block_multiple_of``."""
    types = cfg.get("layer_types")
    if not isinstance(types, list) or "conv" not in types:
        return None
    hidden = whole(cfg, "hidden_size", name=name)
    width = int(cfg.get("block_ff_dim") or whole(cfg, "intermediate_size", name=name))
    if cfg.get("block_auto_adjust_ff_dim"):
        width = int(2 * width / 3)
        if cfg.get("block_ffn_dim_multiplier"):
            width = int(float(cfg["block_ffn_dim_multiplier"]) * width)
        multiple = int(cfg.get("block_multiple_of") or 1)
        width = -(-width // multiple) * multiple
    conv = ShortConv(int(cfg.get("conv_dim") or hidden), int(cfg.get("conv_L_cache") or 3))
    full = attention(cfg, name)
    mlp = DenseMLP(width)
    if cfg.get("num_experts"):  # LFM2-MoE: experts after the first num_dense_layers
        dense_n = whole(cfg, "num_dense_layers", 0, name=name)
        experts = moe(cfg, name, is_gated=True)
        return tuple(Layer(conv if kind == "conv" else full, mlp if i < dense_n else experts)
                     for i, kind in enumerate(types))
    return tuple(Layer(conv if t == "conv" else full, mlp) for t in types)


def cross_attention_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Llama-3.2-Vision (mllama): the layers ``cross_attention_layers`` lists attend to the
    image tokens instead of the text."""
    listed = cfg.get("cross_attention_layers")
    if not isinstance(listed, list) or not listed:
        return None
    cross_at = {int(i) for i in listed}
    self_attn = attention(cfg, name)
    cross = CrossAttention(self_attn.heads, self_attn.kv_heads, self_attn.head_dim)
    mlp = DenseMLP(whole(cfg, "intermediate_size", name=name))
    return tuple(Layer(cross if i in cross_at else self_attn, mlp) for i in range(cfg.num_layers))


def compressed_attention(cfg: Config, name: str, ratio: int) -> CompressedAttention:
    """One DeepSeek-V4 attention layer at compress ratio ``ratio`` (0: the window alone)."""
    sparse = ratio == 4 and bool(cfg.get("index_topk"))
    return CompressedAttention(
        whole(cfg, "num_attention_heads", name=name), whole(cfg, "head_dim", name=name),
        whole(cfg, "qk_rope_head_dim", name=name), whole(cfg, "q_lora_rank", name=name),
        whole(cfg, "o_groups", name=name), whole(cfg, "o_lora_rank", name=name),
        whole(cfg, "sliding_window", name=name), ratio,
        index_topk=whole(cfg, "index_topk", name=name) if sparse else 0,
        index_heads=whole(cfg, "index_n_heads", name=name) if sparse else 0,
        index_head_dim=whole(cfg, "index_head_dim", name=name) if sparse else 0)


def compress_ratios(cfg: Config, name: str) -> list[int] | None:
    """DeepSeek-V4's ``compress_ratios``: one per layer, then one per MTP layer."""
    ratios = cfg.get("compress_ratios")
    if ratios is None:
        return None
    if not isinstance(ratios, list) or len(ratios) < cfg.num_layers:
        raise InputError(f"{name}: compress_ratios must list one ratio per layer "
                         f"({cfg.num_layers}); fix the config.json.")
    if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ratios):
        raise InputError(f"{name}: compress_ratios must hold whole numbers (0, 4, 128, ...); "
                         "fix the config.json.")
    return [int(r) for r in ratios]


def deepseek_v4_layers(cfg: Config, name: str, sparse: tuple[bool, ...]) -> tuple[Layer, ...] | None:
    """DeepSeek-V4: per layer, attention over a sliding window plus, by ``compress_ratios``,
    none (0), CSA (4: top-k of one entry per 4 tokens) or HCA (128: every entry of one per
    128 tokens); MoE layers with a shared expert, the first ``num_hash_layers`` routed by
    token id (the same experts per token, so priced as the learned router; their token→expert
    table is an integer lookup, not a weight)."""
    ratios = compress_ratios(cfg, name)
    if ratios is None:
        return None
    cfg.get("num_hash_layers")
    dense_width = int(cfg.get("intermediate_size") or 0)
    return tuple(Layer(compressed_attention(cfg, name, ratios[i]),
                       _dense_or_moe(cfg, name, i, sparse, dense_width, True))
                 for i in range(cfg.num_layers))


def _mamba1(cfg: Config, name: str, *, prefix: str = "", dt_norms: bool = False) -> Mamba1:
    """A Mamba mixer from ``{prefix}expand``, ``{prefix}d_state`` / ``state_size``,
    ``{prefix}d_conv`` / ``conv_kernel`` and ``{prefix}dt_rank`` / ``time_step_rank``
    ("auto": ceil(hidden / 16), transformers' MambaConfig)."""
    hidden = whole(cfg, "hidden_size", name=name)
    expand = cfg.get(f"{prefix}expand") or 2
    inner = int(cfg.get("intermediate_size") or 0) if not prefix else 0
    inner = inner or int(expand * hidden)
    rank = cfg.get(f"{prefix}dt_rank") if prefix else cfg.get("time_step_rank")
    rank = math.ceil(hidden / 16) if rank in (None, "auto") else rank
    state = cfg.get(f"{prefix}d_state") if prefix else cfg.get("state_size")
    conv = cfg.get(f"{prefix}d_conv") if prefix else cfg.get("conv_kernel")
    return Mamba1(inner, int(state or 16), int(conv or 4), int(rank), dt_norms)


def mamba_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Pure state-space models: Mamba-2 (transformers' Mamba2Config: num_heads × head_dim,
    state_size, n_groups, conv_kernel) or Mamba / FalconMamba, one mixer per block and no
    MLP."""
    model_type = str(cfg.get("model_type", ""))
    if model_type not in PURE_SSM_TYPES:
        return None
    if model_type == "mamba2":
        mixer: Mixer = Mamba2(whole(cfg, "num_heads", name=name), whole(cfg, "head_dim", name=name),
                              whole(cfg, "state_size", name=name), whole(cfg, "n_groups", 1, name=name),
                              whole(cfg, "conv_kernel", 4, name=name))
    else:
        mixer = _mamba1(cfg, name)
    return (Layer(mixer, None),) * cfg.num_layers


def granite_hybrid_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Granite-4.0 hybrids (transformers' GraniteMoeHybridDecoderLayer): a Mamba-2 or an
    attention mixer per ``layer_types`` entry, then in every layer the routed experts (when
    ``num_local_experts``) and a shared MLP of ``shared_intermediate_size``. The Mamba-2
    mixer is mamba_expand × hidden wide in mamba_n_heads heads."""
    types = cfg.get("layer_types")
    if cfg.get("model_type") != "granitemoehybrid" or not isinstance(types, list):
        return None
    hidden = whole(cfg, "hidden_size", name=name)
    heads = positive(cfg, "mamba_n_heads", name=name)
    inner = int((cfg.get("mamba_expand") or 2) * hidden)
    mamba = Mamba2(heads, int(cfg.get("mamba_d_head") or inner // heads),
                   whole(cfg, "mamba_d_state", name=name), whole(cfg, "mamba_n_groups", 1, name=name),
                   whole(cfg, "mamba_d_conv", 4, name=name))
    shared = whole(cfg, "shared_intermediate_size", name=name)
    if cfg.get("num_local_experts"):
        mlp: MLP = MoE(whole(cfg, "num_local_experts", name=name),
                       whole(cfg, "num_experts_per_tok", name=name),
                       whole(cfg, "intermediate_size", name=name), shared_width=shared)
    else:
        mlp = DenseMLP(shared)
    full = attention(cfg, name)
    unknown = sorted({str(t) for t in types} - {"mamba", "attention"})
    if unknown:
        raise InputError(f"{name}: layer_types has unknown kinds {unknown}; phasewise knows "
                         "mamba and attention.")
    return tuple(Layer(mamba if kind == "mamba" else full, mlp) for kind in types)


def jamba_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Jamba (transformers' JambaConfig): attention where i % attn_layer_period ==
    attn_layer_offset, Mamba elsewhere (with RMSNorms over dt, B and C); a MoE where
    i % expert_layer_period == expert_layer_offset, a dense MLP elsewhere."""
    if cfg.get("model_type") != "jamba":
        return None
    attn_period = positive(cfg, "attn_layer_period", 8, name=name)
    attn_offset = whole(cfg, "attn_layer_offset", 4, name=name)
    expert_period = positive(cfg, "expert_layer_period", 2, name=name)
    expert_offset = whole(cfg, "expert_layer_offset", 1, name=name)
    mamba = _mamba1(cfg, name, prefix="mamba_", dt_norms=True)
    full = attention(cfg, name)
    width = whole(cfg, "intermediate_size", name=name)
    experts = moe(cfg, name, is_gated=True) if cfg.get("num_experts", 0) > 1 else None
    dense = DenseMLP(width)
    return tuple(Layer(full if i % attn_period == attn_offset else mamba,
                       experts if experts and i % expert_period == expert_offset else dense)
                 for i in range(cfg.num_layers))


def arctic_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Snowflake Arctic (transformers' ArcticDecoderLayer): a MoE every moe_layer_frequency
    layers, and with ``parallel_attn_mlp_res`` a residual dense MLP beside it, hidden wide
    (ArcticMLP(is_residual_mlp=True) sets ffn_dim = hidden_size)."""
    if cfg.get("model_type") != "arctic":
        return None
    hidden = whole(cfg, "hidden_size", name=name)
    freq = positive(cfg, "moe_layer_frequency", 2, name=name)
    experts = moe(cfg, name, is_gated=True)
    residual = hidden if cfg.get("parallel_attn_mlp_res") else 0
    beside = MoE(experts.experts, experts.top_k, experts.width, dense_width=residual)
    dense = DenseMLP(whole(cfg, "intermediate_size", name=name))
    full = attention(cfg, name)
    return tuple(Layer(full, beside if (i + 1) % freq == 0 else dense)
                 for i in range(cfg.num_layers))


def falcon_h1_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Falcon-H1 (transformers' FalconH1DecoderLayer): attention and a Mamba-2 mixer read the
    same normed input and add their outputs, then a gated MLP. The Mamba-2 mixer has
    mamba_n_heads × mamba_d_head channels (mamba_d_ssm when given); ``attn_layer_indices``,
    when set, lists the layers that have attention at all."""
    if cfg.get("model_type") != "falcon_h1":
        return None
    hidden = whole(cfg, "hidden_size", name=name)
    heads = positive(cfg, "mamba_n_heads", name=name)
    inner = cfg.get("mamba_d_ssm") or (cfg.get("mamba_d_head") or 0) * heads \
        or int((cfg.get("mamba_expand") or 2) * hidden)
    mamba = Mamba2(heads, int(inner) // heads, whole(cfg, "mamba_d_state", name=name),
                   whole(cfg, "mamba_n_groups", 1, name=name), whole(cfg, "mamba_d_conv", 4, name=name))
    listed = cfg.get("attn_layer_indices")
    with_attention = set(range(cfg.num_layers)) if not isinstance(listed, list) \
        else {int(i) for i in listed}
    both = ParallelMixers((attention(cfg, name), mamba))
    mlp = DenseMLP(whole(cfg, "intermediate_size", name=name)) \
        if cfg.get("mamba_use_mlp", True) else None
    return tuple(Layer(both if i in with_attention else mamba, mlp) for i in range(cfg.num_layers))


MINIMAX_TYPES = {"minimax", "minimax_m1", "minimax_text_01"}


def minimax_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """MiniMax-Text-01 / M1: lightning (linear) attention layers and softmax layers as
    ``attn_type_list`` gives them (0 lightning, 1 softmax) or ``layer_types``
    ("linear_attention", "full_attention"), every layer a MoE."""
    if cfg.get("model_type") not in MINIMAX_TYPES:
        return None
    listed = cfg.get("attn_type_list")
    types = cfg.get("layer_types")
    if isinstance(listed, list):
        linear = [int(k) == 0 for k in listed]
    elif isinstance(types, list):
        linear = ["linear" in str(k) for k in types]
    else:
        return None
    full = attention(cfg, name)
    lightning = LinearAttention(full.heads, full.heads, full.head_dim, full.head_dim, 0,
                                "lightning")
    experts = moe(cfg, name, is_gated=True)
    return tuple(Layer(lightning if is_linear else full, experts) for is_linear in linear)


def low_rank_query_layers(uniform: Any, cfg: Config, name: str) -> tuple[Layer, ...]:
    """Step-3's multi-matrix factorisation attention: every attention layer's query goes
    through a rank of ``share_q_dim`` (transformers/vLLM Step3TextAttention)."""
    from dataclasses import replace

    from phasewise.specs.model import uniform_layers

    rank = whole(cfg, "share_q_dim", name=name)
    return tuple(Layer(replace(layer.mixer, q_rank=rank) if isinstance(layer.mixer, Attention)
                       else layer.mixer, layer.mlp) for layer in uniform_layers(uniform))


def bamba_layers(cfg: Config, name: str) -> tuple[Layer, ...] | None:
    """Bamba (transformers' BambaDecoderLayer): attention at ``attn_layer_indices``, a Mamba-2
    mixer of mamba_n_heads × mamba_d_head elsewhere, a gated MLP in every layer."""
    listed = cfg.get("attn_layer_indices")
    if cfg.get("model_type") != "bamba" or not isinstance(listed, list):
        return None
    hidden = whole(cfg, "hidden_size", name=name)
    heads = positive(cfg, "mamba_n_heads", name=name)
    head_dim = int(cfg.get("mamba_d_head") or (cfg.get("mamba_expand") or 2) * hidden // heads)
    mamba = Mamba2(heads, head_dim, whole(cfg, "mamba_d_state", name=name),
                   whole(cfg, "mamba_n_groups", 1, name=name), whole(cfg, "mamba_d_conv", 4, name=name))
    full = attention(cfg, name)
    mlp = DenseMLP(whole(cfg, "intermediate_size", name=name))
    at = {int(i) for i in listed}
    return tuple(Layer(full if i in at else mamba, mlp) for i in range(cfg.num_layers))
