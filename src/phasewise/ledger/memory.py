"""Bytes a device holds: weights, KV cache and recurrent state, transient activations."""

from __future__ import annotations

from phasewise.ledger.layers import (
    HYPER_CONNECTION_WEIGHT_BYTES,
    held_tokens,
    hyper_connection_head_params,
    hyper_connection_params,
    kv_bytes_per_token,
    mixer_params,
    mixer_weight_bytes,
    routed_expert_params,
    state_bytes_per_sequence,
)
from phasewise.ledger.moe import expert_slots_per_rank
from phasewise.ledger.params import param_counts
from phasewise.specs import ModelSpec, Parallelism, Precision
from phasewise.specs.model import Attention, CompressedAttention, DenseMLP, LatentAttention, MoE

# Logits are materialised in fp32 by vLLM, SGLang and llama.cpp before sampling.
LOGIT_BYTES = 4


def weight_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism) -> float:
    """Each module class at its own format; everything but the routed experts split tp ways;
    pp splits layers. A device holds ⌈E / ep⌉ expert slots of each MoE layer (redundant
    replicas where ep does not divide E, ``ledger.moe.expert_slots_per_rank``), each
    expert's width split ``par.moe_tp`` ways: with every expert's parameters P_e,
    ⌈E / ep⌉ · P_e / moe_tp per layer (E·P_e / max(tp, ep) when ep divides E)."""
    precision = precision.for_model(model)
    counts = param_counts(model)
    h = model.hidden_size
    attention_bytes = precision.weight_bytes_for("attention")
    mixer_groups = [(g.count * mixer_params(g.layer.mixer, h),
                     mixer_weight_bytes(g.layer.mixer, h, attention_bytes,
                                        precision.projection_bytes))
                    for g in model.layer_groups if g.layer.mixer is not None]
    mixers = sum(params for params, _ in mixer_groups)
    embed = counts.embedding
    head = 0.0 if model.tie_word_embeddings else counts.embedding
    mixing = _hyper_connection_params(model)
    mlp = counts.total - counts.routed_experts - mixers - embed - head - mixing
    tp_split = (sum(params * wb for params, wb in mixer_groups)
                + mlp * precision.weight_bytes_for("mlp")
                + mixing * HYPER_CONNECTION_WEIGHT_BYTES
                + embed * precision.weight_bytes_for("embed")
                + head * precision.weight_bytes_for("lm_head")) / par.tp
    experts = _routed_params_per_device(model, par) * precision.weight_bytes_for("experts")
    return (tp_split + experts) / par.pp


def _routed_params_per_device(model: ModelSpec, par: Parallelism) -> float:
    """Routed-expert parameters one device holds (``weight_bytes_per_device``)."""
    total = 0.0
    for group in model.layer_groups:
        mlp = group.layer.mlp
        if isinstance(mlp, MoE):
            per_expert = routed_expert_params(mlp, model.hidden_size) / mlp.experts
            total += group.count * expert_slots_per_rank(mlp.experts, par.ep) * per_expert
    return total / par.moe_tp


def _hyper_connection_params(model: ModelSpec) -> float:
    """The hyper-connection mixing weights, kept in fp32 whatever the checkpoint's format."""
    streams, h = model.hyper_connections, model.hidden_size
    if streams <= 1:
        return 0.0
    sub_blocks = sum(g.count * ((g.layer.mixer is not None) + (g.layer.mlp is not None))
                     for g in model.layer_groups)
    return float(sub_blocks * hyper_connection_params(streams, h)
                 + hyper_connection_head_params(streams, h))


def kv_bytes_per_token_per_device(model: ModelSpec, precision: Precision,
                                  par: Parallelism) -> float:
    """KV bytes one more token of context adds on one device, every layer with a KV cache
    (sliding and chunked layers priced in full: a paged allocator's upper bound)."""
    precision = precision.for_model(model)
    total = sum(g.count * kv_bytes_per_token(g.layer.mixer, precision.kv_bytes, par.tp)
                for g in model.layer_groups)
    return total / par.pp / par.attention_dp


def state_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism) -> float:
    """Recurrent state one sequence holds on one device, over every SSM / linear layer."""
    precision = precision.for_model(model)
    total = sum(g.count * state_bytes_per_sequence(g.layer.mixer, precision.kv_bytes, par.tp)
                for g in model.layer_groups)
    return total / par.pp / par.attention_dp


def kv_cache_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism, *,
                              sequences: int, context_tokens: int) -> float:
    """Cache bytes for ``sequences`` each holding ``context_tokens``: sliding-window and
    chunked layers keep only their window, SSM and linear-attention layers a fixed state; KV
    heads split tp ways (replicated when fewer than tp), MLA's latent is replicated on every
    tensor-parallel rank; ``precision.kv_keep`` < 1 keeps that fraction."""
    precision = precision.for_model(model)
    held = precision.kept_tokens(context_tokens)
    total = 0.0
    for group in model.layer_groups:
        mixer = group.layer.mixer
        per_token = kv_bytes_per_token(mixer, precision.kv_bytes, par.tp)
        total += group.count * held_tokens(mixer, held) * per_token
    total = total / par.pp / par.attention_dp
    return sequences * (total + state_bytes_per_device(model, precision, par))


def activation_bytes_per_device(model: ModelSpec, precision: Precision, par: Parallelism, *,
                                tokens: int, logit_tokens: int) -> float:
    """Peak transient working set of one forward pass over ``tokens``: the residual stream,
    the widest intermediate (QKV or gated MLP) and the fp32 logits."""
    precision = precision.for_model(model)
    widest = 0.0
    h = model.hidden_size
    for group in model.layer_groups:
        widest = max(widest, _widest(group.layer, h))
    stream = tokens * (2 * h + widest / par.tp) * precision.activation_bytes
    return stream / par.attention_dp + logit_tokens * model.vocab_size / par.tp * LOGIT_BYTES


def _widest(layer, hidden: int) -> float:  # noqa: ANN001
    mixer, mlp = layer.mixer, layer.mlp
    width = 0.0
    if isinstance(mixer, Attention):
        width = (mixer.heads + mixer.kv_heads) * mixer.head_dim + mixer.kv_heads * mixer.v_dim
    elif isinstance(mixer, LatentAttention):
        width = (3 * mixer.heads) * mixer.qk_head_dim
    elif isinstance(mixer, CompressedAttention):
        width = 2 * mixer.heads * mixer.head_dim  # queries and attention outputs
    elif mixer is not None:
        width = 2 * hidden
    if isinstance(mlp, DenseMLP):
        width = max(width, 2 * mlp.width)
    elif isinstance(mlp, MoE):
        width = max(width, 2 * mlp.width * mlp.top_k, 2 * mlp.shared_width, 2 * mlp.dense_width)
    return width
