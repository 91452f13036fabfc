"""The operator list of one step, written once for every kind of step (DESIGN.md, the ledger).

Quantities are per device: tensor parallelism shards heads, MLP width and vocabulary;
expert parallelism shards experts; the collectives they need appear as their own ops.
Pipeline stages run one after another for a step, so the ledger lists every layer and
adds the activations sent between stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from phasewise.errors import InputError
from phasewise.ledger.attention import cached_keys_read, causal_pairs
from phasewise.ledger.moe import expected_distinct_experts
from phasewise.ledger.ops import Ledger, Op
from phasewise.ledger.step import Step
from phasewise.specs import LayerGroup, ModelSpec, Parallelism, Precision

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


@dataclass(frozen=True, slots=True)
class _Shard:
    """Per-device widths under tensor/expert parallelism, and the bytes of each class."""

    heads: float
    kv_heads: float
    tokens: float  # new tokens a device's attention/dense layers process
    logit_tokens: float
    moe_tokens: int  # tokens entering each MoE layer across the expert-parallel group
    experts: float
    expert_width: float
    wb: float
    expert_wb: float  # routed-expert weights (a file type may store them apart: MXFP4_MOE)
    expert_format: str  # their block format when stored apart ('MXFP4'), else ''
    ab: float
    kvb: float
    kv_keep: float  # fraction of cached tokens the cache keeps (Precision.kv_keep)
    kv_convert: bool  # KV stored narrower than activations: dequantize on read


def build_ledger(model: ModelSpec, step: Step, precision: Precision = Precision(),
                 parallelism: Parallelism = Parallelism()) -> Ledger:
    """Every operator of ``step`` on one device, with FLOPs and bytes by class."""
    return _build(model, step, precision, parallelism)


@lru_cache(maxsize=4096)
def _build(model: ModelSpec, step: Step, precision: Precision, par: Parallelism) -> Ledger:
    shard = _shard(model, step, precision, par)
    ops: list[Op] = [_embedding(model, shard)]
    for group in model.layer_groups:
        ops += _attention_block(model, group, step, shard, par)
        ops += _mlp_block(model, group, shard, par)
    ops += _head(model, shard, par)
    if par.pp > 1:
        message = shard.tokens * model.hidden_size * shard.ab
        ops.append(Op("pp.send", "communication", f"{par.pp - 1} stage boundaries", par.pp - 1,
                      0.0, network=message * (par.pp - 1), hops=par.pp - 1))
    return Ledger(step, tuple(ops), precision.math_format, par.devices)


def _shard(model: ModelSpec, step: Step, precision: Precision, par: Parallelism) -> _Shard:
    tp = par.tp
    if model.num_heads % tp:
        raise InputError(f"--tp {tp} does not divide {model.name}'s {model.num_heads} attention "
                         f"heads; choose a divisor of {model.num_heads}.")
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise InputError(f"--tp {tp} and {model.num_kv_heads} KV heads: one must divide the other.")
    if par.ep > 1 and not model.is_moe:
        raise InputError(f"--ep {par.ep} needs a mixture-of-experts model; {model.name} is dense.")
    if model.is_moe and model.num_experts % par.ep:
        raise InputError(f"--ep {par.ep} does not divide {model.name}'s {model.num_experts} "
                         "experts.")
    dp = par.attention_dp
    expert_split = tp / par.ep if tp > par.ep else 1  # remaining split of each expert's width
    return _Shard(
        heads=model.num_heads / tp,
        kv_heads=max(1.0, model.num_kv_heads / tp),
        tokens=step.new_tokens / dp,
        logit_tokens=step.logit_tokens / dp,
        moe_tokens=step.new_tokens,
        experts=model.num_experts / par.ep,
        expert_width=model.moe_intermediate_size / expert_split,
        wb=precision.weight_bytes,
        expert_wb=precision.expert_weight_bytes,
        expert_format=precision.expert_block_format,
        ab=precision.activation_bytes,
        kvb=precision.kv_bytes,
        kv_keep=precision.kv_keep,
        kv_convert=precision.kv_bytes < precision.activation_bytes,
    )


def _gemm(name: str, layers: str, calls: int, m: float, n: float, k: float, shard: _Shard,
          *, weight_rows: float | None = None) -> Op:
    """(m×k)·(k×n) per call: 2·m·n·k FLOPs, the k×n weight read once, input and output
    activations read and written once. ``weight_rows`` overrides k·n for gathered weights."""
    weight_elems = k * n if weight_rows is None else weight_rows
    return Op(name, "gemm", layers, calls, 2.0 * m * n * k * calls,
              weights=weight_elems * shard.wb * calls,
              activations=(m * k + m * n) * shard.ab * calls, m=m, n=n, k=k)


def _norm(name: str, layers: str, calls: int, model: ModelSpec, shard: _Shard) -> Op:
    elements = shard.tokens * model.hidden_size
    return Op(name, "elementwise", layers, calls, NORM_FLOPS_PER_ELEMENT * elements * calls,
              weights=model.hidden_size * shard.wb * calls,
              activations=2 * elements * shard.ab * calls)


def _allreduce(layers: str, calls: int, model: ModelSpec, shard: _Shard, tp: int) -> Op:
    """All-reduce of the hidden states at its lower bounds: the ring's bandwidth term, 2(p−1)/p
    of the message leaving each device, and a tree's 2·⌈log2 p⌉ latency-bound rounds (NCCL
    switches to tree/one-shot algorithms for the small messages of decode)."""
    message = shard.tokens * model.hidden_size * shard.ab
    rounds = 2 * math.ceil(math.log2(tp))
    return Op("tp.allreduce", "communication", layers, calls, 0.0,
              network=2 * (tp - 1) / tp * message * calls, hops=rounds * calls)


def _embedding(model: ModelSpec, shard: _Shard) -> Op:
    """Embedding lookups read one row per token, not the table."""
    rows = shard.tokens * model.hidden_size
    return Op("embed", "elementwise", "input", 1, 0.0, weights=rows * shard.wb,
              activations=rows * shard.ab)


def kv_bytes_per_token_layer(model: ModelSpec, kv_bytes: float, kv_heads: float | None = None) -> float:
    """KV-cache bytes one token adds to one layer: 2·n_kv·d_h·bytes for MHA/GQA/MQA, the
    compressed latent plus the shared rope key, (kv_lora_rank + qk_rope_head_dim)·bytes, for
    MLA (DESIGN.md, counting conventions; DeepSeek-V2 paper, section 2.1)."""
    if model.is_mla:
        return (model.kv_lora_rank + model.qk_rope_head_dim) * kv_bytes
    heads = model.num_kv_heads if kv_heads is None else kv_heads
    return 2 * heads * model.head_dim * kv_bytes


def _attention_block(model: ModelSpec, group: LayerGroup, step: Step, shard: _Shard,
                     par: Parallelism) -> list[Op]:
    layers, calls, h = f"{group.label} ×{group.count}", group.count, model.hidden_size
    window = model.sliding_window if group.attention == "sliding" else None
    ops = [_norm("attn.norm", layers, calls, model, shard)]
    if model.is_mla:
        ops += _mla_projections(model, step, shard, layers, calls)
    else:
        qkv_width = (shard.heads + 2 * shard.kv_heads) * model.head_dim
        ops.append(_gemm("attn.qkv", layers, calls, shard.tokens, qkv_width, h, shard))
    ops.append(_attention_core(model, step, shard, layers, calls, window, par.attention_dp))
    if shard.kv_convert:
        ops.append(_kv_convert(ops[-1], shard, layers, calls))
    ops.append(_gemm("attn.out", layers, calls, shard.tokens, h,
                     shard.heads * model.value_head_dim, shard))
    if par.tp > 1:
        ops.append(_allreduce(layers, calls, model, shard, par.tp))
    return ops


def _attention_core(model: ModelSpec, step: Step, shard: _Shard, layers: str, calls: int,
                    window: int | None, dp: int) -> Op:
    """Scores and values, 2·2·h·d·pairs FLOPs (DESIGN.md); cached K/V read, new K/V written.
    MLA's absorbed form scores in the latent space: (2·kv_lora + rope) per head and pair.
    With ``kv_keep`` < 1 a sequence's cache holds round(kv_keep·c) of its c cached tokens;
    new tokens attend to those and, causally, to each other."""
    pairs = cached_read = cells = 0.0
    flops_per_pair = 2 * shard.heads * (model.qk_head_dim + model.value_head_dim)
    flops = 0.0
    for g in step.groups:
        kept = round(g.cached_tokens * shard.kv_keep)
        group_pairs = g.count * causal_pairs(g.new_tokens, kept, window) / dp
        per_pair = flops_per_pair
        if model.is_mla and g.new_tokens <= MLA_ABSORBED_MAX_QUERY_TOKENS:
            per_pair = 2 * shard.heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        flops += per_pair * group_pairs
        pairs += group_pairs
        cached_read += g.count * cached_keys_read(kept, window) / dp
        cells += g.count * (cached_keys_read(kept, window) + g.new_tokens) / dp
    kv_token = kv_bytes_per_token_layer(model, shard.kvb, shard.kv_heads)
    qo = shard.tokens * shard.heads * (model.qk_head_dim + model.value_head_dim) * shard.ab
    return Op("attn.score", "attention", layers, calls, flops * calls,
              kv_read=cached_read * kv_token * calls,
              kv_write=shard.tokens * kv_token * calls,
              activations=qo * calls, m=shard.tokens, n=pairs / max(shard.tokens, 1.0),
              k=model.qk_head_dim, keys=cells)


def _kv_convert(core: Op, shard: _Shard, layers: str, calls: int) -> Op:
    """Dequantize every cached K/V element read and quantize every new one written:
    KV_CONVERT_FLOPS_PER_ELEMENT each, on the vector units. Its bytes are already in
    ``attn.score``; pricing it as its own op is an upper bound (kernels fuse it)."""
    elements = (core.kv_read + core.kv_write) / shard.kvb
    return Op("attn.kv_dequant", "elementwise", layers, calls,
              KV_CONVERT_FLOPS_PER_ELEMENT * elements)


def _mla_projections(model: ModelSpec, step: Step, shard: _Shard, layers: str,
                     calls: int) -> list[Op]:
    """DeepSeek-V2/V3 MLA: the replicated down-projections (q_a, kv_a), the per-head query
    up-projection (q_b), and kv_b, which either decompresses every attended latent (prefill)
    or is absorbed into the query and output of decode tokens."""
    h, t = model.hidden_size, shard.tokens
    rope, nope, lora = model.qk_rope_head_dim, model.qk_nope_head_dim, model.kv_lora_rank
    down_width = model.q_lora_rank + lora + rope
    ops = [_gemm("attn.qkv_a", layers, calls, t, down_width, h, shard)]
    q_in = model.q_lora_rank or h
    ops.append(_gemm("attn.q_b", layers, calls, t, shard.heads * model.qk_head_dim, q_in, shard))
    kv_b_width = shard.heads * (nope + model.v_head_dim)
    absorbed = sum(g.count * g.new_tokens for g in step.groups
                   if g.new_tokens <= MLA_ABSORBED_MAX_QUERY_TOKENS)
    decompressed = sum(g.count * (round(g.cached_tokens * shard.kv_keep) + g.new_tokens)
                       for g in step.groups
                       if g.new_tokens > MLA_ABSORBED_MAX_QUERY_TOKENS)
    m = (absorbed + decompressed) * t / max(step.new_tokens, 1)
    return ops + [_gemm("attn.kv_b", layers, calls, m, kv_b_width, lora, shard)]


def _mlp_block(model: ModelSpec, group: LayerGroup, shard: _Shard, par: Parallelism) -> list[Op]:
    layers, calls = f"{group.label} ×{group.count}", group.count
    ops = [_norm("mlp.norm", layers, calls, model, shard)]
    if group.mlp == "moe":
        ops += _moe(model, shard, par, layers, calls)
        if model.shared_expert_intermediate_size:
            ops += _dense_mlp("moe.shared", model.shared_expert_intermediate_size / par.tp,
                              model, shard, layers, calls)
    else:
        ops += _dense_mlp("mlp", model.intermediate_size / par.tp, model, shard, layers, calls)
    if par.tp > 1:
        ops.append(_allreduce(layers, calls, model, shard, par.tp))
    return ops


def _dense_mlp(prefix: str, width: float, model: ModelSpec, shard: _Shard, layers: str,
               calls: int) -> list[Op]:
    h, t = model.hidden_size, shard.tokens
    up_width = 2 * width if model.gated_mlp else width
    act_elements = t * width
    return [
        _gemm(f"{prefix}.up", layers, calls, t, up_width, h, shard),
        Op(f"{prefix}.act", "elementwise", layers, calls,
           GATED_ACT_FLOPS_PER_ELEMENT * act_elements * calls,
           activations=(up_width / width + 1) * act_elements * shard.ab * calls),
        _gemm(f"{prefix}.down", layers, calls, t, h, width, shard),
    ]


def _moe(model: ModelSpec, shard: _Shard, par: Parallelism, layers: str, calls: int) -> list[Op]:
    """Router, routed experts and, with data-parallel attention, the all-to-all.

    FLOPs follow the routed tokens (T·k spread over ep devices); weight bytes follow the
    distinct experts a device's share of them touches (DESIGN.md, counting conventions)."""
    h, k, e = model.hidden_size, model.experts_per_token, model.num_experts
    ops = [_gemm("moe.router", layers, calls, shard.tokens, e, h, shard)]
    mats = 3 if model.gated_mlp else 2
    routed_pairs = shard.moe_tokens * k / par.ep
    distinct = expected_distinct_experts(e, k, shard.moe_tokens) / par.ep
    expert_params = mats * h * shard.expert_width
    ops.append(Op("moe.experts", "gemm", layers, calls,
                  2.0 * routed_pairs * expert_params * calls,
                  weights=distinct * expert_params * shard.expert_wb * calls,
                  activations=2 * routed_pairs * h * shard.ab * calls,
                  m=routed_pairs / max(distinct, 1e-9), n=mats * shard.expert_width, k=h,
                  tokens=shard.moe_tokens, expert_load=shard.moe_tokens * k / e,
                  block_format=shard.expert_format))
    if par.ep > par.tp:
        dispatched = shard.tokens * k * h * shard.ab * (par.ep - 1) / par.ep
        ops.append(Op("ep.alltoall", "communication", layers, calls, 0.0,
                      network=2 * dispatched * calls, hops=2 * calls))
    return ops


def _head(model: ModelSpec, shard: _Shard, par: Parallelism) -> list[Op]:
    """Final norm, then the LM head on the tokens that need logits only."""
    vocab = model.vocab_size / par.tp
    ops = [_norm("final.norm", "output", 1, model, shard)]
    if shard.logit_tokens:
        ops.append(_gemm("lm_head", "output", 1, shard.logit_tokens, vocab, model.hidden_size,
                         shard))
        if par.tp > 1:
            gathered = (par.tp - 1) / par.tp * shard.logit_tokens * model.vocab_size * shard.ab
            ops.append(Op("tp.allgather", "communication", "output", 1, 0.0, network=gathered,
                          hops=par.tp - 1))
    return ops
