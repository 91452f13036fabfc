"""The operator list of one step, written once for every kind of step (DESIGN.md, the ledger).

Quantities are per device: tensor parallelism shards heads, MLP width and vocabulary;
expert parallelism shards experts; the collectives they need appear as their own ops.
Pipeline stages run one after another for a step, so the ledger lists every layer and
adds the activations sent between stages. Each layer group is priced with its own mixer
and MLP (``ledger.layers`` has the per-kind counts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from phasewise.errors import InputError
from phasewise.ledger.attention import (
    cached_keys_read,
    causal_pairs,
    chunked_keys_read,
    chunked_pairs,
    compressed_entries,
    compressed_pairs,
)
from phasewise.ledger.layers import (
    COMPRESSOR_STATE_BYTES,
    HYPER_CONNECTION_WEIGHT_BYTES,
    kv_bytes_per_token,
    mixer_weight_bytes,
    state_bytes_per_sequence,
)
from phasewise.ledger.moe import expected_distinct_experts, expert_slots_per_rank
from phasewise.ledger.ops import Ledger, Op
from phasewise.ledger.step import Step
from phasewise.specs import ModelSpec, Parallelism, Precision
from phasewise.specs.model import (
    Attention,
    CompressedAttention,
    CrossAttention,
    DenseMLP,
    LatentAttention,
    Layer,
    LayerGroup,
    LinearAttention,
    LinearMixer,
    LinearMLP,
    Mamba1,
    Mamba2,
    MoE,
    ParallelMixers,
    ShortConv,
)

# Operators that depend on a step's new tokens but not on its cached contexts (GEMMs, norms,
# MLPs, collectives) are memoised: the steps of an estimate and of a sweep share them.
OPS_MEMO_SIZE = 8192

# vLLM's and SGLang's MLA backends run the absorbed (latent-space) kernel for decode and
# short speculative verify queries, and decompress K/V for longer prefill chunks.
MLA_ABSORBED_MAX_QUERY_TOKENS = 16

# FLOPs per element of the elementwise kernels: RMSNorm (square, sum, scale, weight) and
# SiLU-gated product (sigmoid ≈ 3, multiply, multiply).
NORM_FLOPS_PER_ELEMENT = 4
GATED_ACT_FLOPS_PER_ELEMENT = 5
# A KV cache stored narrower than the activations is converted element by element: a scale
# multiply and a type conversion per element read (dequantize) or written (quantize), as in
# vLLM's fp8 KV-cache kernels (scaled_convert) and KIVI's int2/int4 kernels.
KV_CONVERT_FLOPS_PER_ELEMENT = 2
# Recurrent updates per token, per state element. Gated DeltaNet (Yang et al. 2024, eq. 10):
# decay S (1), S·k (2), the rank-1 delta update (2), the read-out S·q (2). Mamba-2's SSD
# recurrence (Dao & Gu 2024, §3): decay (1), B·x (2), C·h (2). The conv costs 2 per tap.
DELTA_RULE_FLOPS_PER_STATE_ELEMENT = 7
SSM_FLOPS_PER_STATE_ELEMENT = 5
# Lightning attention's recurrence per state element and token: decay and add kᵀv (3) and
# the readout q·S (2), MiniMax-01 report §2.2.
LIGHTNING_FLOPS_PER_STATE_ELEMENT = 5
CONV_FLOPS_PER_TAP = 2
# DeepSeek-V4's compressor pools r (or 2r) projected tokens into one entry with a softmax
# over their scores, (kv * score.softmax(dim)).sum(dim) (Compressor.forward): exp, sum and
# divide (3) and a multiply-add (2) per projected value.
COMPRESS_POOL_FLOPS_PER_ELEMENT = 5
# Its indexer scores are fp32 (Indexer.forward: einsum, then dist.all_reduce(index_score)).
INDEX_SCORE_BYTES = 4
# Collectives move the hidden states in the model's 16-bit dtype whatever the GEMMs'
# activation format: an fp8 or fp4 linear method quantises its input inside the kernel and
# returns its output in the input's dtype, which RowParallelLinear.forward then hands to
# tensor_model_parallel_all_reduce (vLLM model_executor/layers/linear.py); TensorRT-LLM's
# AllReduce runs on the bf16 hidden state (_torch/distributed/ops.py, the fused
# residual-add + RMSNorm all-reduce), SGLang's on the RowParallelLinear output as vLLM's.
COLLECTIVE_BYTES = 2.0
# Not yet applied: the calibration's link_efficiency (0.25 of the link's bandwidth, far
# below the 0.7-0.8 nccl-tests reach on NVLink at large messages) was fitted with every
# collective's message in the activation format, and pricing them in 16 bits without
# refitting it doubled the fp8 rows' collective time (TensorRT-LLM's v1.0 tables: 41% to
# 91% median error). The two change together in the next refit; until then a collective
# moves the activation format, as the fit assumed, except in a served step, which prices
# both as the engines run them (Precision.collectives, cost.base.NCCL_MESSAGE_BYTES).
COLLECTIVES_IN_16_BITS = False
# The exception the engines document: DeepEP's low-latency dispatch sends tokens to the
# experts in fp8 (``use_fp8`` dispatch, bf16 combine; deepseek-ai/DeepEP README), as SGLang's
# and vLLM's DeepEP back ends run it for fp8 checkpoints.
FP8_DISPATCH_BYTES = 1.0


@dataclass(frozen=True, slots=True)
class _Shard:
    """Per-device token counts under data-parallel attention, and the bytes of each class."""

    tokens: float  # new tokens a device's attention/dense layers process
    logit_tokens: float
    sequences: float  # sequences in the step on this device
    moe_tokens: int  # tokens entering each MoE layer across the expert-parallel group
    wb: float  # mixer (attention) weights
    mlp_wb: float
    expert_wb: float  # routed-expert weights
    embed_wb: float
    head_wb: float
    expert_format: str  # routed experts' block format when a file type stores them apart
    ab: float
    cb: float  # the collectives' bytes per element (see COLLECTIVES_IN_16_BITS)
    kvb: float
    kv_keep: float  # fraction of cached tokens the cache keeps (Precision.kv_keep)
    kv_convert: bool  # KV stored narrower than activations: dequantize on read
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        """Computed once: the operator builders below are memoised on the shard."""
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((
                self.tokens, self.logit_tokens, self.sequences, self.moe_tokens, self.wb,
                self.mlp_wb, self.expert_wb, self.embed_wb, self.head_wb, self.expert_format,
                self.ab, self.cb, self.kvb, self.kv_keep, self.kv_convert)))
        return self._hash  # type: ignore[return-value]


def build_ledger(model: ModelSpec, step: Step, precision: Precision = Precision(),
                 parallelism: Parallelism = Parallelism()) -> Ledger:
    """Every operator of ``step`` on one device, with FLOPs and bytes by class; formats given
    as ``auto`` are the checkpoint's own."""
    return _build(model, step, precision.for_model(model), parallelism)


@lru_cache(maxsize=4096)
def _build(model: ModelSpec, step: Step, precision: Precision, par: Parallelism) -> Ledger:
    check_parallelism(model, par)
    shard = _shard(step, precision, par)
    ops: list[Op] = [_embedding(model, shard)]
    for group in model.layer_groups:
        ops += _layer_ops(model, group, step, _group_shard(model, group, shard, precision), par)
    ops += _head(model, shard, par)
    if par.pp > 1:
        message = shard.tokens * model.hidden_size * shard.cb
        ops.append(Op("pp.send", "communication", f"{par.pp - 1} stage boundaries", par.pp - 1,
                      0.0, network=message * (par.pp - 1), hops=par.pp - 1))
    return Ledger(step, tuple(ops), precision.math_format, par.devices)


def _group_shard(model: ModelSpec, group: LayerGroup, shard: _Shard, precision: Precision) -> _Shard:
    """The shard with the group's mixer weights at their parameter-weighted bytes where the
    checkpoint stores some attention projections in a format of their own."""
    if not precision.projection_weights or group.layer.mixer is None:
        return shard
    wb = mixer_weight_bytes(group.layer.mixer, model.hidden_size, shard.wb,
                            precision.projection_bytes)
    return shard if wb == shard.wb else replace(shard, wb=wb)


def check_parallelism(model: ModelSpec, par: Parallelism) -> None:
    """Tensor parallelism must split every layer's heads. Expert parallelism need not divide
    the experts: the engines hold ⌈E / ep⌉ slots a rank with redundant replicas
    (``ledger.moe.expert_slots_per_rank``)."""
    tp = par.tp
    for mixer in model.mixers:
        heads = getattr(mixer, "heads", None) or getattr(mixer, "value_heads", None)
        if heads and heads % tp:
            raise InputError(f"--tp {tp} does not divide {model.name}'s {heads} heads in its "
                             f"{mixer.label} layers; choose a divisor of {heads}.")
        kv = getattr(mixer, "kv_heads", None)
        if kv and kv % tp and tp % kv:
            raise InputError(f"--tp {tp} and {kv} KV heads: one must divide the other.")
        if isinstance(mixer, CompressedAttention):
            for what, count in (("output groups", mixer.o_groups),
                                ("indexer heads", mixer.index_heads)):
                if count and count % tp:
                    raise InputError(f"--tp {tp} does not divide {model.name}'s {count} "
                                     f"{what}; choose a divisor of {count}.")
    moes = [g.layer.mlp for g in model.layer_groups if isinstance(g.layer.mlp, MoE)]
    if par.ep > 1 and not moes:
        raise InputError(f"--ep {par.ep} needs a mixture-of-experts model; {model.name} is dense.")
    if par.dp > 1 and not moes:
        raise InputError(f"attention DP {par.dp} on dense {model.name} is {par.dp} replicas; "
                         "give --replicas instead.")
    for mlp in moes:
        if par.ep > mlp.experts:
            raise InputError(f"--ep {par.ep} is wider than {model.name}'s {mlp.experts} "
                             f"experts; choose at most {mlp.experts}.")


def _shard(step: Step, precision: Precision, par: Parallelism) -> _Shard:
    dp = par.attention_dp
    return _Shard(
        tokens=step.new_tokens / dp,
        logit_tokens=step.logit_tokens / dp,
        sequences=step.sequences / dp,
        moe_tokens=step.new_tokens,
        wb=precision.weight_bytes_for("attention"),
        mlp_wb=precision.weight_bytes_for("mlp"),
        expert_wb=precision.weight_bytes_for("experts"),
        embed_wb=precision.weight_bytes_for("embed"),
        head_wb=precision.weight_bytes_for("lm_head"),
        expert_format=precision.expert_block_format,
        ab=precision.activation_bytes,
        cb=precision.collective_bytes or (
            max(COLLECTIVE_BYTES, precision.activation_bytes) if COLLECTIVES_IN_16_BITS
            else precision.activation_bytes),
        kvb=precision.kv_bytes,
        kv_keep=precision.kv_keep,
        kv_convert=precision.kv_bytes < precision.activation_bytes,
    )


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _gemm(name: str, layers: str, calls: int, m: float, n: float, k: float, shard: _Shard,
          *, weight_bytes: float | None = None, weight_rows: float | None = None) -> Op:
    """(m×k)·(k×n) per call: 2·m·n·k FLOPs, the k×n weight read once, input and output
    activations read and written once. ``weight_rows`` overrides k·n for gathered weights."""
    weight_elems = k * n if weight_rows is None else weight_rows
    wb = shard.wb if weight_bytes is None else weight_bytes
    return Op(name, "gemm", layers, calls, 2.0 * m * n * k * calls,
              weights=weight_elems * wb * calls,
              activations=(m * k + m * n) * shard.ab * calls, m=m, n=n, k=k)


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _norm(name: str, layers: str, calls: int, width: float, shard: _Shard) -> Op:
    elements = shard.tokens * width
    return Op(name, "elementwise", layers, calls, NORM_FLOPS_PER_ELEMENT * elements * calls,
              weights=width * shard.wb * calls,
              activations=2 * elements * shard.ab * calls)


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _allreduce(layers: str, calls: int, model: ModelSpec, shard: _Shard, tp: int) -> Op:
    """All-reduce of the hidden states at its lower bounds: the ring's bandwidth term, 2(p−1)/p
    of the message leaving each device, and a tree's 2·⌈log2 p⌉ latency-bound rounds (NCCL
    switches to tree/one-shot algorithms for the small messages of decode), in the
    collectives' format (``_Shard.cb``; COLLECTIVES_IN_16_BITS says why it is not yet 16-bit)."""
    message = shard.tokens * model.hidden_size * shard.cb
    rounds = 2 * math.ceil(math.log2(tp))
    return Op("tp.allreduce", "communication", layers, calls, 0.0,
              network=2 * (tp - 1) / tp * message * calls, hops=rounds * calls,
              message=message)


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _embedding(model: ModelSpec, shard: _Shard) -> Op:
    """Embedding lookups read one row per token, not the table."""
    rows = shard.tokens * model.hidden_size
    return Op("embed", "elementwise", "input", 1, 0.0, weights=rows * shard.embed_wb,
              activations=rows * shard.ab)


def kv_bytes_per_token_layer(model: ModelSpec, kv_bytes: float,
                             kv_heads: float | None = None) -> float:
    """KV-cache bytes one token adds to one attention layer of a uniform model: 2·n_kv·d_h
    bytes for MHA/GQA/MQA, (kv_lora_rank + qk_rope_head_dim)·bytes for MLA (DESIGN.md,
    counting conventions; DeepSeek-V2 paper, section 2.1). Per-layer models: see
    ``ledger.layers.kv_bytes_per_token``."""
    if model.kv_lora_rank:
        return (model.kv_lora_rank + model.qk_rope_head_dim) * kv_bytes
    heads = model.num_kv_heads if kv_heads is None else kv_heads
    return 2 * heads * model.head_dim * kv_bytes


def _layer_ops(model: ModelSpec, group: LayerGroup, step: Step, shard: _Shard,
               par: Parallelism) -> list[Op]:
    layer: Layer = group.layer
    layers, calls = f"{group.label} ×{group.count}", group.count
    ops: list[Op] = []
    streams = model.hyper_connections
    if layer.mixer is not None:
        if streams > 1:
            ops += _hyper_connection("attn", streams, model, shard, layers, calls)
        ops.append(_norm("attn.norm", layers, calls, model.hidden_size, shard))
        ops += _mixer_ops(model, layer.mixer, step, shard, par, layers, calls)
        if par.tp > 1:
            ops.append(_allreduce(layers, calls, model, shard, par.tp))
    if layer.mlp is not None:
        if streams > 1:
            ops += _hyper_connection("mlp", streams, model, shard, layers, calls)
        ops.append(_norm("mlp.norm", layers, calls, model.hidden_size, shard))
        ops += _mlp_ops(model, layer.mlp, shard, par, layers, calls)
        if par.tp > 1 and not (par.gathers_moe_tokens and isinstance(layer.mlp, MoE)):
            ops.append(_allreduce(layers, calls, model, shard, par.tp))
    return ops


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _hyper_connection(prefix: str, streams: int, model: ModelSpec, shard: _Shard, layers: str,
                      calls: int) -> tuple[Op, ...]:
    """DeepSeek-V4's manifold-constrained hyper-connections around a sub-block (inference/
    model.py Block.hc_pre / hc_post): the m = ``streams`` copies of the hidden state, flattened
    to m·h, project to (2+m)·m mixing weights (one GEMM against fp32 hc_fn); then the weighted
    sum of the copies into the sub-block's input (2·m·h FLOPs), and after it each copy becomes
    post·output + comb·copies (m·h + 2·m²·h) plus the sum (m·h): (4m + 2m²)·h per token, the
    m·h stream read and written once. The Sinkhorn normalisation of the m×m matrix is left
    out (a few hundred FLOPs a token)."""
    h, t, m = model.hidden_size, shard.tokens, streams
    mix = (2 + m) * m
    return (_gemm(f"{prefix}.hc_mix", layers, calls, t, mix, m * h, shard,
                  weight_bytes=HYPER_CONNECTION_WEIGHT_BYTES),
            Op(f"{prefix}.hc_combine", "elementwise", layers, calls,
               (4 * m + 2 * m * m) * h * t * calls,
               activations=2 * m * h * t * shard.ab * calls))


def _mixer_ops(model: ModelSpec, mixer, step: Step, shard: _Shard, par: Parallelism,  # noqa: ANN001
               layers: str, calls: int) -> Sequence[Op]:
    if isinstance(mixer, Attention):
        return _attention(model, mixer, step, shard, par, layers, calls)
    if isinstance(mixer, LatentAttention):
        return _latent_attention(model, mixer, step, shard, par, layers, calls)
    if isinstance(mixer, CompressedAttention):
        return _compressed_attention(model, mixer, step, shard, par, layers, calls)
    if isinstance(mixer, LinearAttention):
        return _linear_attention(model, mixer, shard, par, layers, calls)
    if isinstance(mixer, Mamba2):
        return _mamba2(model, mixer, shard, par, layers, calls)
    if isinstance(mixer, Mamba1):
        return _mamba1(model, mixer, shard, par, layers, calls)
    if isinstance(mixer, ParallelMixers):  # each part on the same input, outputs summed
        return [op for part in mixer.parts
                for op in _mixer_ops(model, part, step, shard, par, layers, calls)]
    if isinstance(mixer, ShortConv):
        return _short_conv(model, mixer, shard, par, layers, calls)
    if isinstance(mixer, CrossAttention):
        h, heads = model.hidden_size, mixer.heads / par.tp
        return [_gemm("xattn.q", layers, calls, shard.tokens, heads * mixer.head_dim, h, shard),
                _gemm("xattn.out", layers, calls, shard.tokens, h, heads * mixer.head_dim,
                      shard)]
    if isinstance(mixer, LinearMixer):
        h = model.hidden_size
        return [_gemm("attn.linear", layers, calls, shard.tokens, h / par.tp, h, shard)]
    raise TypeError(f"no ledger for mixer {type(mixer).__name__}")


def _attention(model: ModelSpec, mixer: Attention, step: Step, shard: _Shard, par: Parallelism,
               layers: str, calls: int) -> list[Op]:
    """Q (and its output gate), K, V projections; scores and values; O projection."""
    h, tp = model.hidden_size, par.tp
    heads, kv_heads = mixer.heads / tp, max(1.0, mixer.kv_heads / tp)
    q_width = heads * mixer.head_dim * (2 if mixer.gated else 1)
    kv_width = kv_heads * (mixer.head_dim + mixer.v_dim)
    if mixer.q_rank:  # down to the query rank beside K and V (replicated), norm, then up
        ops = [_gemm("attn.qkv", layers, calls, shard.tokens, mixer.q_rank + kv_width, h, shard),
               _norm("attn.q_norm", layers, calls, mixer.q_rank, shard),
               _gemm("attn.q_up", layers, calls, shard.tokens, q_width, mixer.q_rank, shard)]
    else:
        ops = [_gemm("attn.qkv", layers, calls, shard.tokens, q_width + kv_width, h, shard)]
    ops.append(_attention_core(mixer, step, shard, layers, calls, par.attention_dp, tp))
    if shard.kv_convert:
        ops.append(_kv_convert(ops[-1], shard, layers, calls))
    ops.append(_gemm("attn.out", layers, calls, shard.tokens, h, heads * mixer.v_dim, shard))
    return ops


def _attention_core(mixer: Attention, step: Step, shard: _Shard, layers: str, calls: int,
                    dp: int, tp: int) -> Op:
    """Scores and values, 2·2·h·d·pairs FLOPs (DESIGN.md); cached K/V read, new K/V written.
    With ``kv_keep`` < 1 a sequence's cache holds round(kv_keep·c) of its c cached tokens;
    new tokens attend to those and, causally, to each other."""
    heads = mixer.heads / tp
    pairs = cached_read = cells = 0.0
    for g in step.groups:
        kept = round(g.cached_tokens * shard.kv_keep)
        if mixer.chunk:
            group_pairs = chunked_pairs(g.new_tokens, kept, mixer.chunk)
            read = chunked_keys_read(kept, mixer.chunk)
        else:
            group_pairs = causal_pairs(g.new_tokens, kept, mixer.window)
            read = cached_keys_read(kept, mixer.window)
        pairs += g.count * group_pairs / dp
        cached_read += g.count * read / dp
        cells += g.count * (read + g.new_tokens) / dp
    flops = 2 * heads * (mixer.head_dim + mixer.v_dim) * pairs
    kv_token = kv_bytes_per_token(mixer, shard.kvb, tp)
    qo = shard.tokens * heads * (mixer.head_dim + mixer.v_dim) * shard.ab
    return Op("attn.score", "attention", layers, calls, flops * calls,
              kv_read=cached_read * kv_token * calls,
              kv_write=shard.tokens * kv_token * calls,
              activations=qo * calls, m=shard.tokens, n=pairs / max(shard.tokens, 1.0),
              k=mixer.head_dim, keys=cells)


def _kv_convert(core: Op, shard: _Shard, layers: str, calls: int) -> Op:
    """Dequantize every cached K/V element read and quantize every new one written:
    KV_CONVERT_FLOPS_PER_ELEMENT each, on the vector units. Its bytes are already in
    ``attn.score``; pricing it as its own op is an upper bound (kernels fuse it)."""
    elements = (core.kv_read + core.kv_write) / shard.kvb
    return Op("attn.kv_dequant", "elementwise", layers, calls,
              KV_CONVERT_FLOPS_PER_ELEMENT * elements)


def _latent_attention(model: ModelSpec, mixer: LatentAttention, step: Step, shard: _Shard,
                      par: Parallelism, layers: str, calls: int) -> list[Op]:
    ops = _mla_projections(model, mixer, step, shard, par, layers, calls)
    if mixer.index_topk:
        ops += _indexer(model, mixer, step, shard, par, layers, calls)
    ops.append(_mla_core(mixer, step, shard, layers, calls, par))
    if shard.kv_convert:
        ops.append(_kv_convert(ops[-1], shard, layers, calls))
    ops.append(_gemm("attn.out", layers, calls, shard.tokens, model.hidden_size,
                     mixer.heads / par.tp * mixer.v_head_dim, shard))
    return ops


def _mla_core(mixer: LatentAttention, step: Step, shard: _Shard, layers: str, calls: int,
              par: Parallelism) -> Op:
    """Scores and values over the latent cache. The absorbed form (decode) scores in the latent
    space, (2·kv_lora + rope) per head and pair; the decompressed form (prefill) per head
    (qk + v). Sparse attention (V3.2) attends to at most ``index_topk`` keys per query, which
    counts as a window of top-k over the positions the query may see."""
    heads, dp = mixer.heads / par.tp, par.attention_dp
    topk = mixer.index_topk or None
    pairs = cached_read = cells = flops = 0.0
    for g in step.groups:
        kept = round(g.cached_tokens * shard.kv_keep)
        group_pairs = g.count * causal_pairs(g.new_tokens, kept, topk) / dp
        absorbed = g.new_tokens <= MLA_ABSORBED_MAX_QUERY_TOKENS
        per_pair = 2 * heads * ((2 * mixer.kv_lora_rank + mixer.qk_rope_head_dim) if absorbed
                                else (mixer.qk_head_dim + mixer.v_head_dim))
        flops += per_pair * group_pairs
        pairs += group_pairs
        read = cached_keys_read(kept, topk)
        cached_read += g.count * read / dp
        cells += g.count * (read + g.new_tokens) / dp
    latent_token = (mixer.kv_lora_rank + mixer.qk_rope_head_dim) * shard.kvb
    qo = shard.tokens * heads * (mixer.qk_head_dim + mixer.v_head_dim) * shard.ab
    return Op("attn.score", "attention", layers, calls, flops * calls,
              kv_read=cached_read * latent_token * calls,
              kv_write=shard.tokens * latent_token * calls,
              activations=qo * calls, m=shard.tokens, n=pairs / max(shard.tokens, 1.0),
              k=mixer.qk_head_dim, keys=cells)


def _mla_projections(model: ModelSpec, mixer: LatentAttention, step: Step, shard: _Shard,
                     par: Parallelism, layers: str, calls: int) -> list[Op]:
    """DeepSeek-V2/V3 MLA: the replicated down-projections (q_a, kv_a), the per-head query
    up-projection (q_b), and kv_b, which either decompresses every attended latent (prefill)
    or is absorbed into the query and output of decode tokens."""
    h, t, heads = model.hidden_size, shard.tokens, mixer.heads / par.tp
    lora, rope = mixer.kv_lora_rank, mixer.qk_rope_head_dim
    ops = [_gemm("attn.qkv_a", layers, calls, t, mixer.q_lora_rank + lora + rope, h, shard)]
    q_in = mixer.q_lora_rank or h
    ops.append(_gemm("attn.q_b", layers, calls, t, heads * mixer.qk_head_dim, q_in, shard))
    kv_b_width = heads * (mixer.qk_nope_head_dim + mixer.v_head_dim)
    topk = mixer.index_topk or None
    absorbed = sum(g.count * g.new_tokens for g in step.groups
                   if g.new_tokens <= MLA_ABSORBED_MAX_QUERY_TOKENS)
    decompressed = sum(g.count * (cached_keys_read(round(g.cached_tokens * shard.kv_keep), topk)
                                  + g.new_tokens)
                       for g in step.groups if g.new_tokens > MLA_ABSORBED_MAX_QUERY_TOKENS)
    m = (absorbed + decompressed) * t / max(step.new_tokens, 1)
    return ops + [_gemm("attn.kv_b", layers, calls, m, kv_b_width, lora, shard)]


def _indexer(model: ModelSpec, mixer: LatentAttention, step: Step, shard: _Shard,
             par: Parallelism, layers: str, calls: int) -> list[Op]:
    """DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp report, §2.1): per token, index
    queries (wq_b from the query latent), one index key (wk) and per-head weights; then every
    query scores every cached and causal new key, 2·heads·d FLOPs a pair, reading each cached
    index key once. Replicated across tensor-parallel ranks."""
    t, h = shard.tokens, model.hidden_size
    ih, id_ = mixer.index_heads, mixer.index_head_dim
    q_in = mixer.q_lora_rank or h
    ops = [_gemm("attn.indexer_proj", layers, calls, t, ih * id_, q_in, shard),
           _gemm("attn.indexer_kw", layers, calls, t, id_ + ih, h, shard)]
    pairs = cached = 0.0
    for g in step.groups:
        kept = round(g.cached_tokens * shard.kv_keep)
        pairs += g.count * causal_pairs(g.new_tokens, kept) / par.attention_dp
        cached += g.count * kept / par.attention_dp
    key_bytes = kv_bytes_per_token(mixer, shard.kvb) - \
        (mixer.kv_lora_rank + mixer.qk_rope_head_dim) * shard.kvb
    ops.append(Op("attn.indexer", "attention", layers, calls, 2.0 * ih * id_ * pairs * calls,
                  kv_read=cached * key_bytes * calls, kv_write=t * key_bytes * calls,
                  m=t, n=pairs / max(t, 1.0), k=id_, keys=cached + t))
    return ops


def _compressed_attention(model: ModelSpec, mixer: CompressedAttention, step: Step,
                          shard: _Shard, par: Parallelism, layers: str, calls: int) -> list[Op]:
    """DeepSeek-V4 (inference/model.py Attention.forward): the query latent and the shared
    key/value from the hidden state (wq_a, wkv; replicated), the per-head query (wq_b); the
    compressor (r > 0) and the indexer (r = 4); attention over the window and the compressed
    entries; the grouped output projection, wo_a per group of heads and wo_b."""
    h, t, tp = model.hidden_size, shard.tokens, par.tp
    d, heads, groups = mixer.head_dim, mixer.heads / tp, mixer.o_groups / tp
    ops = [_gemm("attn.qkv_a", layers, calls, t, mixer.q_lora_rank + d, h, shard),
           _gemm("attn.q_b", layers, calls, t, heads * d, mixer.q_lora_rank, shard)]
    if mixer.compress_ratio:
        ops += _compressor("attn.compress", d, mixer.overlap, model, shard, layers, calls)
    if mixer.sparse:
        ops += _v4_indexer(model, mixer, step, shard, par, layers, calls)
    ops.append(_compressed_core(mixer, step, shard, layers, calls, par))
    if shard.kv_convert:
        ops.append(_kv_convert(ops[-1], shard, layers, calls))
    group_in = mixer.heads * d / mixer.o_groups
    ops.append(_gemm("attn.out_a", layers, calls, t * groups, mixer.o_lora_rank, group_in, shard,
                     weight_rows=groups * group_in * mixer.o_lora_rank))
    ops.append(_gemm("attn.out", layers, calls, t, h, groups * mixer.o_lora_rank, shard))
    return ops


def _compressor(name: str, width: int, overlap: bool, model: ModelSpec, shard: _Shard,
                layers: str, calls: int) -> list[Op]:
    """DeepSeek-V4's Compressor: wkv and wgate project every new token to c·d values each
    (c = 2 for the overlapping ratio-4 compressor), then a softmax over each group's scores
    pools its values (COMPRESS_POOL_FLOPS_PER_ELEMENT), the fp32 pooling rows written and
    read back once each. Replicated across tensor-parallel ranks."""
    t, projected = shard.tokens, (2 if overlap else 1) * width
    rows = 2 * projected * t * COMPRESSOR_STATE_BYTES * calls  # kv and score rows
    return [_gemm(name, layers, calls, t, 2 * projected, model.hidden_size, shard),
            Op(f"{name}_pool", "elementwise", layers, calls,
               COMPRESS_POOL_FLOPS_PER_ELEMENT * projected * t * calls, activations=2 * rows)]


def _compressed_core(mixer: CompressedAttention, step: Step, shard: _Shard, layers: str,
                     calls: int, par: Parallelism) -> Op:
    """Scores and values of one-KV-head attention over d = head_dim (key and value are the
    same entry): 2·heads·2d FLOPs a (query, entry) pair. Query j attends to the last
    min(j, window) raw tokens and to ⌊j/r⌋ compressed entries, at most index_topk of them in
    CSA (``compressed_pairs``); a step reads the window and the entries it attends to
    (all cached entries in HCA, top-k in CSA), and writes each new token's raw entry and one
    compressed entry per r tokens."""
    heads, dp, d, r = mixer.heads / par.tp, par.attention_dp, mixer.head_dim, mixer.compress_ratio
    topk = mixer.index_topk if mixer.sparse else None
    pairs = cached_read = cells = 0.0
    for g in step.groups:
        kept = round(g.cached_tokens * shard.kv_keep)
        group_pairs = causal_pairs(g.new_tokens, kept, mixer.window)
        read = cached_keys_read(kept, mixer.window)
        if r:
            group_pairs += compressed_pairs(g.new_tokens, kept, r, topk)
            entries = compressed_entries(kept, r)
            read += entries if topk is None else min(entries, topk)
        pairs += g.count * group_pairs / dp
        cached_read += g.count * read / dp
        cells += g.count * (read + g.new_tokens) / dp
    entry_bytes = d * shard.kvb
    written = shard.tokens * (1 + (1 / r if r else 0.0)) * entry_bytes
    return Op("attn.score", "attention", layers, calls, 2 * heads * 2 * d * pairs * calls,
              kv_read=cached_read * entry_bytes * calls, kv_write=written * calls,
              activations=shard.tokens * heads * 2 * d * shard.ab * calls,
              m=shard.tokens, n=pairs / max(shard.tokens, 1.0), k=d, keys=cells)


def _v4_indexer(model: ModelSpec, mixer: CompressedAttention, step: Step, shard: _Shard,
                par: Parallelism, layers: str, calls: int) -> list[Op]:
    """DeepSeek-V4's lightning indexer (inference/model.py Indexer.forward): index queries
    from the query latent (wq_b, heads split tp ways), per-head weights (weights_proj), its
    own compressor of d_i-wide keys; then every query scores every compressed index key it
    may see, ⌊j/r⌋ of them, 2·heads·d_i FLOPs a pair, reading each cached key once; the
    fp32 scores are all-reduced across tensor-parallel ranks before the top-k."""
    t, h, tp, r = shard.tokens, model.hidden_size, par.tp, mixer.compress_ratio
    ih, id_ = mixer.index_heads / tp, mixer.index_head_dim
    ops = [_gemm("attn.indexer_proj", layers, calls, t, ih * id_, mixer.q_lora_rank, shard),
           _gemm("attn.indexer_w", layers, calls, t, ih, h, shard)]
    ops += _compressor("attn.indexer_compress", id_, True, model, shard, layers, calls)
    pairs = cached = 0.0
    for g in step.groups:
        kept = round(g.cached_tokens * shard.kv_keep)
        pairs += g.count * compressed_pairs(g.new_tokens, kept, r) / par.attention_dp
        cached += g.count * compressed_entries(kept, r) / par.attention_dp
    key_bytes = id_ * shard.kvb
    ops.append(Op("attn.indexer", "attention", layers, calls, 2.0 * ih * id_ * pairs * calls,
                  kv_read=cached * key_bytes * calls, kv_write=t / r * key_bytes * calls,
                  m=t, n=pairs / max(t, 1.0), k=id_, keys=cached + t / r))
    if tp > 1:
        scores = pairs * INDEX_SCORE_BYTES
        ops.append(Op("tp.allreduce", "communication", layers, calls, 0.0,
                      network=2 * (tp - 1) / tp * scores * calls,
                      hops=2 * math.ceil(math.log2(tp)) * calls, message=scores))
    return ops


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _linear_attention(model: ModelSpec, mixer: LinearAttention, shard: _Shard,
                      par: Parallelism, layers: str, calls: int) -> tuple[Op, ...]:
    """Gated DeltaNet / KDA: projections, a short conv over q, k, v, the delta-rule update of
    a fixed state (read and written once per sequence per step), a gated norm, out_proj.

    Gated DeltaNet projects q, k, v, z and b, a per value head in one GEMM (Qwen3-Next's
    in_proj_qkvz and in_proj_ba). KDA projects q, k, v, β per head and the two rank-d_v
    down-projections of its decay and output gate (f_a, g_a, replicated across tensor-parallel
    ranks) from the hidden state, then the up-projections (f_b to a decay per key channel,
    g_b to the gate) from rank d_v (SGLang's KimiDeltaAttention)."""
    h, t, tp = model.hidden_size, shard.tokens, par.tp
    nk, nv = mixer.key_heads / tp, mixer.value_heads / tp
    dk, dv = mixer.key_head_dim, mixer.value_head_dim
    conv_channels = 2 * nk * dk + nv * dv
    state = state_bytes_per_sequence(mixer, shard.kvb, tp)
    if mixer.variant == "lightning":
        return tuple(_lightning(model, mixer, shard, par, layers, calls))
    if mixer.variant == "kda":
        projections: tuple[Op, ...] = (
            _gemm("linear_attn.in_proj", layers, calls, t, conv_channels + 2 * dv + nv, h, shard),
            _gemm("linear_attn.lowrank_up", layers, calls, t, nk * dk + nv * dv, dv, shard))
    else:
        projections = (_gemm("linear_attn.in_proj", layers, calls, t,
                              2 * nk * dk + 2 * nv * dv + 2 * nv, h, shard),)
    return projections + (
        Op("linear_attn.conv", "elementwise", layers, calls,
           CONV_FLOPS_PER_TAP * mixer.conv_kernel * conv_channels * t * calls,
           weights=conv_channels * mixer.conv_kernel * shard.wb * calls,
           activations=2 * conv_channels * t * shard.ab * calls),
        Op("linear_attn.recurrence", "elementwise", layers, calls,
           DELTA_RULE_FLOPS_PER_STATE_ELEMENT * nv * dk * dv * t * calls,
           kv_read=shard.sequences * state * calls, kv_write=shard.sequences * state * calls,
           activations=(conv_channels + nv * dv) * t * shard.ab * calls),
        _norm("linear_attn.norm", layers, calls, nv * dv, shard),
        _gemm("linear_attn.out", layers, calls, t, h, nv * dv, shard),
    )


def _lightning(model: ModelSpec, mixer: LinearAttention, shard: _Shard, par: Parallelism,
               layers: str, calls: int) -> list[Op]:
    """MiniMax lightning attention in its recurrent form (MiniMax-01 report §2.2): qkv and
    output-gate projections, per head the decayed state update S ← λS + kᵀv and readout qS
    over a d × d state (read and written once per sequence per step), a norm, out_proj."""
    h, t, tp = model.hidden_size, shard.tokens, par.tp
    nv, dk, dv = mixer.value_heads / tp, mixer.key_head_dim, mixer.value_head_dim
    state = state_bytes_per_sequence(mixer, shard.kvb, tp)
    return [
        _gemm("linear_attn.in_proj", layers, calls, t, 4 * nv * dv, h, shard),
        Op("linear_attn.recurrence", "elementwise", layers, calls,
           LIGHTNING_FLOPS_PER_STATE_ELEMENT * nv * dk * dv * t * calls,
           kv_read=shard.sequences * state * calls, kv_write=shard.sequences * state * calls,
           activations=4 * nv * dv * t * shard.ab * calls),
        _norm("linear_attn.norm", layers, calls, nv * dv, shard),
        _gemm("linear_attn.out", layers, calls, t, h, nv * dv, shard),
    ]


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _mamba2(model: ModelSpec, mixer: Mamba2, shard: _Shard, par: Parallelism, layers: str,
            calls: int) -> tuple[Op, ...]:
    """Mamba-2: in_proj to (z, x, B, C, dt), the conv over (x, B, C), the SSM recurrence over
    a fixed state (read and written once per sequence per step), a gated norm, out_proj."""
    h, t, tp = model.hidden_size, shard.tokens, par.tp
    inner = mixer.inner / tp
    bc = 2 * mixer.groups * mixer.state_size
    conv_channels = inner + bc
    state = state_bytes_per_sequence(mixer, shard.kvb, tp)
    return (
        _gemm("ssm.in_proj", layers, calls, t, 2 * inner + bc + mixer.heads / tp, h, shard),
        Op("ssm.conv", "elementwise", layers, calls,
           CONV_FLOPS_PER_TAP * mixer.conv_kernel * conv_channels * t * calls,
           weights=conv_channels * (mixer.conv_kernel + 1) * shard.wb * calls,
           activations=2 * conv_channels * t * shard.ab * calls),
        Op("ssm.scan", "elementwise", layers, calls,
           SSM_FLOPS_PER_STATE_ELEMENT * inner * mixer.state_size * t * calls,
           kv_read=shard.sequences * state * calls, kv_write=shard.sequences * state * calls,
           activations=(conv_channels + inner) * t * shard.ab * calls),
        _norm("ssm.norm", layers, calls, inner, shard),
        _gemm("ssm.out", layers, calls, t, h, inner, shard),
    )


def _mamba1(model: ModelSpec, mixer: Mamba1, shard: _Shard, par: Parallelism, layers: str,
            calls: int) -> list[Op]:
    """Mamba: in_proj to (x, z), the conv over x, x_proj to (dt, B, C) and dt_proj back to
    inner, the selective scan over a fixed state (read and written once per sequence per
    step), gating by z, out_proj (Gu & Dao 2023, Algorithm 2; transformers' MambaMixer)."""
    h, t, tp = model.hidden_size, shard.tokens, par.tp
    inner, rank, state_size = mixer.inner / tp, mixer.dt_rank, mixer.state_size
    state = state_bytes_per_sequence(mixer, shard.kvb, tp)
    return [
        _gemm("ssm.in_proj", layers, calls, t, 2 * inner, h, shard),
        Op("ssm.conv", "elementwise", layers, calls,
           CONV_FLOPS_PER_TAP * mixer.conv_kernel * inner * t * calls,
           weights=inner * (mixer.conv_kernel + 1) * shard.wb * calls,
           activations=2 * inner * t * shard.ab * calls),
        _gemm("ssm.x_proj", layers, calls, t, rank + 2 * state_size, inner, shard),
        _gemm("ssm.dt_proj", layers, calls, t, inner, rank, shard),
        Op("ssm.scan", "elementwise", layers, calls,
           SSM_FLOPS_PER_STATE_ELEMENT * inner * state_size * t * calls,
           kv_read=shard.sequences * state * calls, kv_write=shard.sequences * state * calls,
           activations=3 * inner * t * shard.ab * calls),
        _gemm("ssm.out", layers, calls, t, h, inner, shard),
    ]


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _short_conv(model: ModelSpec, mixer: ShortConv, shard: _Shard, par: Parallelism,
                layers: str, calls: int) -> tuple[Op, ...]:
    """LFM2's short conv: in_proj, the gated depthwise conv over a state of kernel−1 inputs
    (read and written once per sequence per step), out_proj."""
    h, t, width = model.hidden_size, shard.tokens, mixer.width / par.tp
    state = state_bytes_per_sequence(mixer, shard.kvb, par.tp)
    return (
        _gemm("conv.in_proj", layers, calls, t, 3 * width, h, shard),
        Op("conv.conv", "elementwise", layers, calls,
           (CONV_FLOPS_PER_TAP * mixer.kernel + 2) * width * t * calls,
           weights=width * mixer.kernel * shard.wb * calls,
           kv_read=shard.sequences * state * calls, kv_write=shard.sequences * state * calls,
           activations=4 * width * t * shard.ab * calls),
        _gemm("conv.out", layers, calls, t, h, width, shard),
    )


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _mlp_ops(model: ModelSpec, mlp, shard: _Shard, par: Parallelism, layers: str,  # noqa: ANN001
             calls: int) -> tuple[Op, ...]:
    """An MLP's operators: a function of the step's new tokens (the shard), not of its
    cached contexts, so a sweep over contexts builds them once."""
    if isinstance(mlp, DenseMLP):
        return tuple(_dense_mlp("mlp", mlp.width / par.tp, mlp.gated, model, shard, layers, calls))
    if isinstance(mlp, MoE):
        ops = _moe(model, mlp, shard, par, layers, calls)
        if mlp.shared_width:
            ops += _dense_mlp("moe.shared", mlp.shared_width / par.tp, mlp.gated, model, shard,
                              layers, calls)
        if mlp.dense_width:
            ops += _dense_mlp("moe.dense", mlp.dense_width / par.tp, mlp.gated, model, shard,
                              layers, calls)
        return tuple(ops)
    if isinstance(mlp, LinearMLP):
        h = model.hidden_size
        return (_gemm("mlp.linear", layers, calls, shard.tokens, h / par.tp, h, shard,
                      weight_bytes=shard.mlp_wb),)
    raise TypeError(f"no ledger for MLP {type(mlp).__name__}")


def _dense_mlp(prefix: str, width: float, gated: bool, model: ModelSpec, shard: _Shard,
               layers: str, calls: int) -> list[Op]:
    h, t = model.hidden_size, shard.tokens
    up_width = 2 * width if gated else width
    act_elements = t * width
    return [
        _gemm(f"{prefix}.up", layers, calls, t, up_width, h, shard, weight_bytes=shard.mlp_wb),
        Op(f"{prefix}.act", "elementwise", layers, calls,
           GATED_ACT_FLOPS_PER_ELEMENT * act_elements * calls,
           activations=(up_width / width + 1) * act_elements * shard.ab * calls),
        _gemm(f"{prefix}.down", layers, calls, t, h, width, shard, weight_bytes=shard.mlp_wb),
    ]


def _moe(model: ModelSpec, mlp: MoE, shard: _Shard, par: Parallelism, layers: str,
         calls: int) -> list[Op]:
    """Router, routed experts and the exchange of tokens between ranks; with a latent MoE the
    down and up projections into the experts' latent space.

    FLOPs follow the routed tokens (T·k spread over ep devices, each expert's width split
    ``par.moe_tp`` ways). A rank holds s = ⌈E / ep⌉ expert slots (redundant replicas where ep
    does not divide E, ``expert_slots_per_rank``); with uniform routing each slot's expert is
    touched by the step's T tokens with probability 1 − (1 − k/E)^T, so the weight bytes read
    are s·(1 − (1 − k/E)^T) experts' (DESIGN.md, counting conventions; E/ep·… when ep divides
    E). The exchange: an all-to-all dispatch and combine when experts span the attention
    DP ranks (ep > tp), or, with attention DP given apart (``par.gathers_moe_tokens``), the
    gather of every rank's tokens before the experts and the reduce-scatter after them."""
    h, k, e = model.hidden_size, mlp.top_k, mlp.experts
    tp, ep = par.tp, par.ep
    width = mlp.width / par.moe_tp
    inner = mlp.latent_size or h
    ops = [_gemm("moe.router", layers, calls, shard.tokens, e, h, shard)]
    if mlp.latent_size:
        ops.append(_gemm("moe.latent_down", layers, calls, shard.tokens, inner, h, shard,
                         weight_bytes=shard.mlp_wb))
    mats = 3 if mlp.gated else 2
    routed_pairs = shard.moe_tokens * k / ep
    touched = expected_distinct_experts(e, k, shard.moe_tokens) / e
    distinct = expert_slots_per_rank(e, ep) * touched
    expert_params = mats * inner * width
    ops.append(Op("moe.experts", "gemm", layers, calls,
                  2.0 * routed_pairs * expert_params * calls,
                  weights=distinct * expert_params * shard.expert_wb * calls,
                  activations=2 * routed_pairs * inner * shard.ab * calls,
                  m=routed_pairs / max(distinct, 1e-9), n=mats * width, k=inner,
                  tokens=shard.moe_tokens, expert_load=shard.moe_tokens * k / e,
                  block_format=shard.expert_format))
    if mlp.latent_size:
        ops.append(_gemm("moe.latent_up", layers, calls, shard.tokens, h, inner, shard,
                         weight_bytes=shard.mlp_wb))
    if par.gathers_moe_tokens:
        ops.append(_dp_gather_scatter(layers, calls, shard, inner, par.tp * par.attention_dp))
    elif ep > tp:
        per_element = max(shard.ab, FP8_DISPATCH_BYTES) + shard.cb  # dispatch, then combine
        dispatched = shard.tokens * k * inner * (ep - 1) / ep
        ops.append(Op("ep.alltoall", "communication", layers, calls, 0.0,
                      network=dispatched * per_element * calls, hops=2 * calls))
    return ops


def _dp_gather_scatter(layers: str, calls: int, shard: _Shard, width: int, group: int) -> Op:
    """Attention DP with the MoE over the whole group of g ranks: an all-gather of the
    group's T·width hidden states before the experts and a reduce-scatter of their partial
    sums after, each at the ring's bound of (g−1)/g of the gathered message leaving a device
    (SGLang dp_gather / dp_scatter; vLLM's allgather_reducescatter exchange), in the
    hidden state's 16-bit dtype; ⌈log2 g⌉ latency-bound rounds each."""
    message = shard.moe_tokens * width * shard.cb
    return Op("dp.gather_scatter", "communication", layers, calls, 0.0,
              network=2 * (group - 1) / group * message * calls,
              hops=2 * math.ceil(math.log2(group)) * calls)


@lru_cache(maxsize=OPS_MEMO_SIZE, typed=True)
def _head(model: ModelSpec, shard: _Shard, par: Parallelism) -> tuple[Op, ...]:
    """Final norm, then the LM head on the tokens that need logits only."""
    vocab = model.vocab_size / par.tp
    ops = [_norm("final.norm", "output", 1, model.hidden_size, shard)]
    if shard.logit_tokens:
        ops.append(_gemm("lm_head", "output", 1, shard.logit_tokens, vocab, model.hidden_size,
                         shard, weight_bytes=shard.head_wb))
        if par.tp > 1:
            gathered = (par.tp - 1) / par.tp * shard.logit_tokens * model.vocab_size * shard.cb
            ops.append(Op("tp.allgather", "communication", "output", 1, 0.0, network=gathered,
                          hops=par.tp - 1))
    return tuple(ops)
