"""Per-layer counts: parameters, KV bytes per token and recurrent state per sequence of each
token mixer and MLP kind. One function per kind, dispatched on the spec's type: a new mixer is
one new kind here, with its own test, not a branch inside every formula.

Module classes (``MODULE_CLASSES``) say which checkpoint format a weight takes: a mixer's
projections are "attention", a dense MLP and shared experts "mlp", routed experts "experts".
"""

from __future__ import annotations

from functools import singledispatch

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
    projection_names,
)

# vLLM's DeepSeek-V3.2 indexer cache stores each token's index key in fp8 with one fp32
# scale per 128 values (DeepseekV32IndexerCache: head_size = d + d // 128 * 4 bytes).
INDEXER_KEY_BYTES_PER_VALUE = 1
INDEXER_SCALE_BYTES_PER_BLOCK = 4
INDEXER_QUANT_BLOCK = 128


# DeepSeek-V4's reference implementation (deepseek-ai/DeepSeek-V4-Flash and -Pro,
# inference/model.py; a copy: github.com/Nicooo-Wang/DeepSeek-V4-Pro-code at commit
# 0ec3a03c2fc34f29b2e72696ceaed9ae7a373aeb) keeps each compressor's pooling state, kv_state
# and score_state, in fp32 (Compressor.__init__: dtype=torch.float32), and the
# hyper-connection mixing weights (Block.hc_attn_fn / hc_ffn_fn, the head's hc_head_fn) in
# fp32 too (set_dtype(torch.float32)).
COMPRESSOR_STATE_BYTES = 4
HYPER_CONNECTION_WEIGHT_BYTES = 4


# ---- parameters ---------------------------------------------------------------------------


@singledispatch
def mixer_params(mixer: Mixer, hidden: int) -> float:
    raise TypeError(f"no parameter count for {type(mixer).__name__}")


@mixer_params.register
def _(mixer: Attention, hidden: int) -> float:
    """Q (doubled by an output gate), K, V and O projections; a low-rank query as its down
    projection, norm and up projection (Step-3's Step3vAttention: q_proj, inter_norm, wq)."""
    return sum(params for _, params in mixer_projections(mixer, hidden))


@mixer_params.register
def _(mixer: LatentAttention, hidden: int) -> float:
    """MLA (DeepSeek-V2 §2.1): q_a, q_b (or one q projection without a query rank), kv_a with
    the shared rope key, kv_b, their norms and O; plus V3.2's indexer (wq_b from the query
    latent, wk, its LayerNorm and the per-head weights projection)."""
    return sum(params for _, params in mixer_projections(mixer, hidden))


@singledispatch
def mixer_projections(mixer: Mixer, hidden: int) -> tuple[tuple[str, float], ...]:
    """A mixer's parameters by the checkpoint's module name of each projection (the names
    Hugging Face checkpoints and their quantization configs use), so a checkpoint that
    quantizes some projections and not others is sized per projection. Norm weights go
    under "norm". A mixer no checkpoint names in parts is one part, ""."""
    return (("", mixer_params(mixer, hidden)),)


@mixer_projections.register
def _(mixer: Attention, hidden: int) -> tuple[tuple[str, float], ...]:
    """transformers' LlamaAttention: q_proj (doubled by an output gate), k_proj, v_proj,
    o_proj; a low-rank query (Step-3's Step3vAttention) as its down projection q_proj, the
    norm inter_norm and the up projection wq."""
    q = mixer.heads * mixer.head_dim * (2 if mixer.gated else 1)
    kv = ((hidden * mixer.kv_heads * mixer.head_dim, hidden * mixer.kv_heads * mixer.v_dim,
           mixer.heads * mixer.v_dim * hidden))
    if mixer.q_rank:
        low_rank = (("q_proj", float(hidden * mixer.q_rank)), ("norm", float(mixer.q_rank)),
                    ("wq", float(mixer.q_rank * q)))
        return low_rank + tuple(zip(("k_proj", "v_proj", "o_proj"), map(float, kv), strict=True))
    return tuple(zip(projection_names(mixer), map(float, (hidden * q, *kv)), strict=True))


@mixer_projections.register
def _(mixer: LatentAttention, hidden: int) -> tuple[tuple[str, float], ...]:
    """transformers' DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj (q_proj without
    a query rank), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; V3.2's indexer
    (wq_b, wk, k_norm, weights_proj) as one part, "indexer"."""
    heads, lora, rope, q_rank = (mixer.heads, mixer.kv_lora_rank, mixer.qk_rope_head_dim,
                                 mixer.q_lora_rank)
    query = ([hidden * q_rank, q_rank * heads * mixer.qk_head_dim] if q_rank
             else [hidden * heads * mixer.qk_head_dim])
    sizes = [*query, hidden * (lora + rope),
             lora * heads * (mixer.qk_nope_head_dim + mixer.v_head_dim),
             heads * mixer.v_head_dim * hidden]
    if mixer.index_topk:
        ih, id_ = mixer.index_heads, mixer.index_head_dim
        sizes.append((q_rank or hidden) * ih * id_ + hidden * id_ + 2 * id_ + hidden * ih)
    parts = tuple(zip(projection_names(mixer), map(float, sizes), strict=True))
    return (*parts, ("norm", float(q_rank + lora)))


def mixer_weight_bytes(mixer: Mixer, hidden: int, class_bytes: float,
                       projection_bytes: dict[str, float]) -> float:
    """Bytes per weight of a mixer whose checkpoint stores some projections in a format of
    their own (``projection_bytes``, by module name; the rest at ``class_bytes``): the
    parameter-weighted mean, Σ params_p · bytes_p / Σ params_p."""
    if not projection_bytes:
        return class_bytes
    parts = mixer_projections(mixer, hidden)
    total = sum(params for _, params in parts)
    if not total:
        return class_bytes
    return sum(params * projection_bytes.get(name, class_bytes) for name, params in parts) / total


@mixer_params.register
def _(mixer: CompressedAttention, hidden: int) -> float:
    """DeepSeek-V4 (inference/model.py, Attention.__init__): attn_sink (one per head), wq_a
    h×q_lora, q_norm, wq_b q_lora×heads·d, wkv h×d (the one shared key/value), kv_norm,
    wo_a (heads·d/g)×(g·o_lora) (each of the g groups of heads projects its heads·d/g
    outputs to o_lora: heads·d·o_lora in all), wo_b g·o_lora×h; a compressor when r > 0,
    and at r = 4 an indexer."""
    d, q_rank, o_rank = mixer.head_dim, mixer.q_lora_rank, mixer.o_lora_rank
    query = hidden * q_rank + q_rank + q_rank * mixer.heads * d
    key_value = hidden * d + d
    output = mixer.heads * d * o_rank + mixer.o_groups * o_rank * hidden
    total = mixer.heads + query + key_value + output
    if mixer.compress_ratio:
        total += compressor_params(hidden, d, mixer.compress_ratio, overlap=mixer.overlap)
    if mixer.sparse:
        total += v4_indexer_params(mixer, hidden)
    return float(total)


def compressor_params(hidden: int, head_dim: int, ratio: int, *, overlap: bool) -> int:
    """DeepSeek-V4's Compressor: wkv and wgate, h×(c·d) each, a learned position bias ``ape``
    r×(c·d) and an RMSNorm over d, where c = 2 for the overlapping ratio-4 compressor and 1
    otherwise (Compressor.__init__: coff = 1 + overlap)."""
    width = (2 if overlap else 1) * head_dim
    return 2 * hidden * width + ratio * width + head_dim


def v4_indexer_params(mixer: CompressedAttention, hidden: int) -> int:
    """DeepSeek-V4's Indexer: wq_b from the query latent (q_lora × heads·d_i), weights_proj
    h×heads, and its own overlapping ratio-4 compressor of width d_i."""
    ih, id_ = mixer.index_heads, mixer.index_head_dim
    return (mixer.q_lora_rank * ih * id_ + hidden * ih
            + compressor_params(hidden, id_, mixer.compress_ratio, overlap=True))


def hyper_connection_params(streams: int, hidden: int) -> int:
    """One sub-block's hyper-connection mixing (DeepSeek-V4 Block.__init__, mHC): hc_fn of
    (2+m)·m × m·h, a bias hc_base of (2+m)·m and 3 scales, for m = ``streams``."""
    if streams <= 1:
        return 0
    mix = (2 + streams) * streams
    return mix * streams * hidden + mix + 3


def hyper_connection_head_params(streams: int, hidden: int) -> int:
    """The head's reduction of the m streams to one (Transformer.hc_head_fn m × m·h,
    hc_head_base m, hc_head_scale 1)."""
    return streams * streams * hidden + streams + 1 if streams > 1 else 0


@mixer_params.register
def _(mixer: LinearAttention, hidden: int) -> float:
    """Gated DeltaNet (Qwen3-Next's Qwen3NextGatedDeltaNet): in_proj_qkvz, in_proj_ba, a
    depthwise conv over q, k, v, dt_bias and A_log per value head, a gated RMSNorm and
    out_proj. Kimi Delta Attention (fla's and SGLang's KimiDeltaAttention): q, k, v
    projections, low-rank decay (f_a, f_b: one decay per key channel) and output-gate
    (g_a, g_b) projections of rank = head dim, b_proj (β per head), convs, A_log per head,
    dt_bias per key channel, norm and o_proj."""
    nk, nv, dk, dv = mixer.key_heads, mixer.value_heads, mixer.key_head_dim, mixer.value_head_dim
    if mixer.variant == "lightning":
        return lightning_params(mixer, hidden)
    conv_channels = 2 * nk * dk + nv * dv
    if mixer.variant == "kda":
        low_rank = 2 * hidden * dv + dv * nk * dk + dv * nv * dv  # f_a/f_b, g_a/g_b
        return (hidden * conv_channels + low_rank + hidden * nv + conv_channels * mixer.conv_kernel
                + nv + nk * dk + dv + nv * dv * hidden)
    projections = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv
    return (projections + conv_channels * mixer.conv_kernel + 2 * nv + dv + nv * dv * hidden)


def lightning_params(mixer: LinearAttention, hidden: int) -> float:
    """MiniMax lightning attention (MiniMax-01 report §2.2; vLLM's MiniMaxText01LinearAttention):
    qkv_proj h→3·heads·d, an output gate h→heads·d, an RMSNorm over heads·d, out_proj
    heads·d→h; no convolution."""
    width = mixer.value_heads * mixer.value_head_dim
    return hidden * 3 * width + hidden * width + width + width * hidden


@mixer_params.register
def _(mixer: ParallelMixers, hidden: int) -> float:
    return sum(mixer_params(part, hidden) for part in mixer.parts)


@mixer_params.register
def _(mixer: Mamba2, hidden: int) -> float:
    """Mamba-2 (transformers' Mamba2Mixer / NemotronHMamba2Mixer): in_proj to
    (z, x, B, C, dt) = 2·inner + 2·groups·state + heads, a depthwise conv with bias over
    (x, B, C), dt_bias, A_log and D per head, a gated RMSNorm over inner, out_proj."""
    conv_channels = mixer.inner + 2 * mixer.groups * mixer.state_size
    in_proj = hidden * (2 * mixer.inner + 2 * mixer.groups * mixer.state_size + mixer.heads)
    conv = conv_channels * (mixer.conv_kernel + 1)
    return in_proj + conv + 3 * mixer.heads + mixer.inner + mixer.inner * hidden


@mixer_params.register
def _(mixer: Mamba1, hidden: int) -> float:
    """Mamba (transformers' MambaMixer / JambaMambaMixer): in_proj h→2·inner (x, z), a
    depthwise conv with bias over x, x_proj inner→(dt_rank + 2·state) for dt, B and C,
    dt_proj dt_rank→inner with bias, A_log (inner × state) and D, out_proj inner→h; Jamba's
    RMSNorms over dt, B and C."""
    inner, state, rank = mixer.inner, mixer.state_size, mixer.dt_rank
    norms = rank + 2 * state if mixer.dt_norms else 0
    return (hidden * 2 * inner + inner * (mixer.conv_kernel + 1) + inner * (rank + 2 * state)
            + rank * inner + inner + inner * state + inner + inner * hidden + norms)


@mixer_params.register
def _(mixer: ShortConv, hidden: int) -> float:
    """LFM2 (transformers' Lfm2ShortConv): in_proj h→3·width, a depthwise conv of ``kernel``
    taps, out_proj width→h."""
    return hidden * 3 * mixer.width + mixer.width * mixer.kernel + mixer.width * hidden


@mixer_params.register
def _(mixer: CrossAttention, hidden: int) -> float:
    """Q, K, V, O of Llama-3.2-Vision's cross-attention (K, V read the vision features,
    projected to the text width) and its q/k norms."""
    return (hidden * (mixer.heads + 2 * mixer.kv_heads) * mixer.head_dim
            + mixer.heads * mixer.head_dim * hidden + 2 * mixer.head_dim)


@mixer_params.register
def _(mixer: LinearMixer, hidden: int) -> float:
    return float(hidden * hidden)


@singledispatch
def mlp_params(mlp: MLP, hidden: int) -> tuple[float, float]:
    """(total, active per token) parameters of one layer's MLP."""
    raise TypeError(f"no parameter count for {type(mlp).__name__}")


@mlp_params.register
def _(mlp: DenseMLP, hidden: int) -> tuple[float, float]:
    dense = (3 if mlp.gated else 2) * hidden * mlp.width
    return dense, dense


@mlp_params.register
def _(mlp: MoE, hidden: int) -> tuple[float, float]:
    """Router, routed experts (k of E active), shared experts, the latent down/up
    projections, and a dense MLP beside the experts."""
    per_expert = expert_params(mlp, hidden)
    mats = 3 if mlp.gated else 2
    common = hidden * mlp.experts + mats * hidden * (mlp.shared_width + mlp.dense_width)
    if mlp.latent_size:
        common += 2 * hidden * mlp.latent_size
    return common + mlp.experts * per_expert, common + mlp.top_k * per_expert


@mlp_params.register
def _(mlp: LinearMLP, hidden: int) -> tuple[float, float]:
    return float(hidden * hidden), float(hidden * hidden)


def expert_params(mlp: MoE, hidden: int) -> float:
    """One routed expert: gate, up and down (up and down ungated), in the latent width when
    the experts run in a latent space."""
    return (3 if mlp.gated else 2) * (mlp.latent_size or hidden) * mlp.width


def routed_expert_params(mlp: MLP | None, hidden: int) -> float:
    return mlp.experts * expert_params(mlp, hidden) if isinstance(mlp, MoE) else 0.0


def layer_norms(layer: Layer) -> int:
    """Pre-norms of the block: one per sub-block present."""
    return (layer.mixer is not None) + (layer.mlp is not None)


# ---- the cache --------------------------------------------------------------------------


@singledispatch
def kv_bytes_per_token(mixer: Mixer | None, kv_bytes: float, tp: int = 1) -> float:
    """Bytes one token adds to one layer's cache on one device of a ``tp``-way split."""
    return 0.0


@kv_bytes_per_token.register
def _(mixer: Attention, kv_bytes: float, tp: int = 1) -> float:
    """2·n_kv·d_h·bytes (K and V), KV heads split tp ways and replicated when fewer."""
    kv_heads = max(1.0, mixer.kv_heads / tp)
    return kv_heads * (mixer.head_dim + mixer.v_dim) * kv_bytes


@kv_bytes_per_token.register
def _(mixer: LatentAttention, kv_bytes: float, tp: int = 1) -> float:
    """(kv_lora_rank + qk_rope_head_dim)·bytes, replicated on every rank; V3.2 adds its
    indexer key in fp8 with a scale per 128 values."""
    latent = (mixer.kv_lora_rank + mixer.qk_rope_head_dim) * kv_bytes
    if not mixer.index_topk:
        return latent
    blocks = -(-mixer.index_head_dim // INDEXER_QUANT_BLOCK)
    return latent + (mixer.index_head_dim * INDEXER_KEY_BYTES_PER_VALUE
                     + blocks * INDEXER_SCALE_BYTES_PER_BLOCK)


@kv_bytes_per_token.register
def _(mixer: CompressedAttention, kv_bytes: float, tp: int = 1) -> float:
    """The growing part of a DeepSeek-V4 layer's cache: one compressed entry of d values per
    r tokens, d·bytes/r a token (Attention.kv_cache holds window + max_seq_len // r
    entries of head_dim), and at r = 4 the indexer's compressed key, d_i·bytes/r (Indexer.
    kv_cache, max_seq_len // r × index_head_dim). The window is bounded: it is state
    (``state_bytes_per_sequence``). One KV head, replicated on every tensor-parallel rank
    (wkv is a plain Linear)."""
    if not mixer.compress_ratio:
        return 0.0
    per_token = mixer.head_dim * kv_bytes / mixer.compress_ratio
    if mixer.sparse:
        per_token += mixer.index_head_dim * kv_bytes / mixer.compress_ratio
    return per_token


@kv_bytes_per_token.register
def _(mixer: ParallelMixers, kv_bytes: float, tp: int = 1) -> float:
    return sum(kv_bytes_per_token(part, kv_bytes, tp) for part in mixer.parts)


@singledispatch
def state_bytes_per_sequence(mixer: Mixer | None, state_bytes: float, tp: int = 1) -> float:
    """Fixed recurrent state one sequence holds in one layer, on one device: it does not grow
    with context. Zero for mixers with a KV cache."""
    return 0.0


@state_bytes_per_sequence.register
def _(mixer: LinearAttention, state_bytes: float, tp: int = 1) -> float:
    """The delta-rule state, value_heads × d_k × d_v, and the conv's last kernel−1 inputs
    over q, k and v; heads split tp ways."""
    nv = mixer.value_heads / tp
    if mixer.variant == "lightning":  # the kv state per head, d × d; no convolution
        return nv * mixer.key_head_dim * mixer.value_head_dim * state_bytes
    conv_channels = (2 * mixer.key_heads * mixer.key_head_dim
                     + mixer.value_heads * mixer.value_head_dim) / tp
    return (nv * mixer.key_head_dim * mixer.value_head_dim
            + (mixer.conv_kernel - 1) * conv_channels) * state_bytes


@state_bytes_per_sequence.register
def _(mixer: Mamba2, state_bytes: float, tp: int = 1) -> float:
    """The SSM state, heads × head_dim × state_size, and the conv's last kernel−1 inputs over
    (x, B, C) (Mamba-2 §7: the state is constant in sequence length)."""
    conv_channels = mixer.inner + 2 * mixer.groups * mixer.state_size
    return (mixer.inner * mixer.state_size + (mixer.conv_kernel - 1) * conv_channels) \
        * state_bytes / tp


@state_bytes_per_sequence.register
def _(mixer: CompressedAttention, state_bytes: float, tp: int = 1) -> float:
    """The bounded part of a DeepSeek-V4 layer's cache: the raw window of ``window`` entries
    of d values (Attention.kv_cache[:, :window], a ring), and each compressor's fp32 pooling
    state, kv_state and score_state of c·r × c·d each (Compressor.__init__; c = 2 at
    r = 4), the indexer's own (d_i wide) too. Replicated on every tensor-parallel rank."""
    window = mixer.window * mixer.head_dim * state_bytes
    if not mixer.compress_ratio:
        return window
    pooling = _pooling_state_elements(mixer.compress_ratio, mixer.head_dim, mixer.overlap)
    if mixer.sparse:
        pooling += _pooling_state_elements(mixer.compress_ratio, mixer.index_head_dim, True)
    return window + pooling * COMPRESSOR_STATE_BYTES


def _pooling_state_elements(ratio: int, head_dim: int, overlap: bool) -> int:
    """kv_state and score_state: 2 × (c·r) × (c·d) values."""
    c = 2 if overlap else 1
    return 2 * c * ratio * c * head_dim


@state_bytes_per_sequence.register
def _(mixer: Mamba1, state_bytes: float, tp: int = 1) -> float:
    """The SSM state, inner × state_size, and the conv's last kernel−1 inputs over inner
    channels (Mamba §3.3: the recurrent mode's state is constant in sequence length)."""
    return (mixer.inner * mixer.state_size + (mixer.conv_kernel - 1) * mixer.inner) \
        * state_bytes / tp


@state_bytes_per_sequence.register
def _(mixer: ParallelMixers, state_bytes: float, tp: int = 1) -> float:
    return sum(state_bytes_per_sequence(part, state_bytes, tp) for part in mixer.parts)


@state_bytes_per_sequence.register
def _(mixer: ShortConv, state_bytes: float, tp: int = 1) -> float:
    """The conv's last kernel−1 inputs, width channels (vLLM's ShortConv state)."""
    return (mixer.kernel - 1) * mixer.width * state_bytes / tp


def held_tokens(mixer: Mixer | None, context_tokens: int) -> int:
    """Cached tokens a layer keeps for a sequence of ``context_tokens``: a sliding window
    keeps at most its window, chunked attention its current chunk, the rest everything."""
    if isinstance(mixer, ParallelMixers):  # the parts with a KV cache (Falcon-H1: one)
        return max((held_tokens(part, context_tokens) for part in mixer.parts
                    if isinstance(part, Attention)), default=context_tokens)
    if isinstance(mixer, Attention):
        if mixer.window:
            return min(context_tokens, mixer.window)
        if mixer.chunk:
            return min(context_tokens, mixer.chunk)
    return context_tokens
