"""Bytes a device holds: weights, KV cache, transient activations."""

from __future__ import annotations

from phasewise.ledger.build import kv_bytes_per_token_layer
from phasewise.ledger.params import expert_params, param_counts
from phasewise.specs import ModelSpec, Parallelism, Precision

# Logits are materialised in fp32 by vLLM, SGLang and llama.cpp before sampling.
LOGIT_BYTES = 4


def weight_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism) -> float:
    """Routed experts split max(tp, ep) ways, everything else tp ways; pp splits layers."""
    counts = param_counts(model)
    moe_layers = sum(g.count for g in model.layer_groups if g.mlp == "moe")
    experts = moe_layers * model.num_experts * expert_params(model) if model.is_moe else 0.0
    return ((counts.total - experts) / par.tp * precision.weight_bytes
            + experts / max(par.tp, par.ep) * precision.expert_weight_bytes) / par.pp


def kv_cache_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism, *,
                              sequences: int, context_tokens: int) -> float:
    """KV bytes for ``sequences`` each holding ``context_tokens``; sliding layers keep only
    their window; KV heads split tp ways (replicated when fewer than tp), MLA's latent is
    replicated on every tensor-parallel rank; ``precision.kv_keep`` < 1 keeps that fraction."""
    kv_heads = max(1.0, model.num_kv_heads / par.tp)
    total = 0.0
    for group in model.layer_groups:
        window = model.sliding_window if group.attention == "sliding" else None
        held = precision.kept_tokens(context_tokens)
        kept = held if window is None else min(held, window)
        total += group.count * kept * kv_bytes_per_token_layer(model, precision.kv_bytes, kv_heads)
    return sequences * total / par.pp / par.attention_dp


def activation_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism, *,
                                tokens: int, logit_tokens: int) -> float:
    """Peak transient working set of one forward pass over ``tokens``: the residual stream,
    the widest intermediate (QKV or gated MLP) and the fp32 logits."""
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.qk_head_dim
    mlp = 2 * max(model.intermediate_size, model.moe_intermediate_size * model.experts_per_token)
    widest = max(qkv, mlp) / par.tp
    stream = tokens * (2 * model.hidden_size + widest) * precision.activation_bytes
    return stream / par.attention_dp + logit_tokens * model.vocab_size / par.tp * LOGIT_BYTES
