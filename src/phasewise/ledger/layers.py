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

# vLLM's DeepSeek-V3.2 indexer cache stores each token's index key in fp8 with one fp32
# scale per 128 values (DeepseekV32IndexerCache: head_size = d + d // 128 * 4 bytes).
INDEXER_KEY_BYTES_PER_VALUE = 1
INDEXER_SCALE_BYTES_PER_BLOCK = 4
INDEXER_QUANT_BLOCK = 128


# ---- parameters ---------------------------------------------------------------------------


@singledispatch
def mixer_params(mixer: Mixer, hidden: int) -> float:
    raise TypeError(f"no parameter count for {type(mixer).__name__}")


@mixer_params.register
def _(mixer: Attention, hidden: int) -> float:
    """Q (doubled by an output gate), K, V and O projections; a low-rank query as its down
    projection, norm and up projection (Step-3's Step3vAttention: q_proj, inter_norm, wq)."""
    q = mixer.heads * mixer.head_dim * (2 if mixer.gated else 1)
    kv = mixer.kv_heads * (mixer.head_dim + mixer.v_dim)
    out = mixer.heads * mixer.v_dim * hidden
    if mixer.q_rank:
        return hidden * (mixer.q_rank + kv) + mixer.q_rank + mixer.q_rank * q + out
    return hidden * (q + kv) + out


@mixer_params.register
def _(mixer: LatentAttention, hidden: int) -> float:
    """MLA (DeepSeek-V2 §2.1): q_a, q_b (or one q projection without a query rank), kv_a with
    the shared rope key, kv_b, their norms and O; plus V3.2's indexer (wq_b from the query
    latent, wk, its LayerNorm and the per-head weights projection)."""
    heads, lora, rope = mixer.heads, mixer.kv_lora_rank, mixer.qk_rope_head_dim
    if mixer.q_lora_rank:
        q = hidden * mixer.q_lora_rank + mixer.q_lora_rank \
            + mixer.q_lora_rank * heads * mixer.qk_head_dim
    else:
        q = hidden * heads * mixer.qk_head_dim
    kv = hidden * (lora + rope) + lora + lora * heads * (mixer.qk_nope_head_dim + mixer.v_head_dim)
    indexer = 0.0
    if mixer.index_topk:
        ih, id_ = mixer.index_heads, mixer.index_head_dim
        indexer = (mixer.q_lora_rank or hidden) * ih * id_ + hidden * id_ + 2 * id_ + hidden * ih
    return q + kv + heads * mixer.v_head_dim * hidden + indexer


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
