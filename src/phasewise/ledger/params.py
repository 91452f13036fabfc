"""Parameter counts and KV size of a model, from the same shapes the ledger prices."""

from __future__ import annotations

from dataclasses import dataclass

from phasewise.ledger.build import kv_bytes_per_token_layer
from phasewise.specs import ModelSpec


@dataclass(frozen=True, slots=True)
class ParamCounts:
    total: float
    active: float  # per token: routed experts counted k of E
    embedding: float
    kv_bytes_per_token: float


def attention_params(model: ModelSpec) -> float:
    """Q, K, V and output projections; MLA's low-rank factors and their norms."""
    h = model.hidden_size
    if not model.is_mla:
        q_and_o = 2 * h * model.num_heads * model.head_dim
        return q_and_o + 2 * h * model.num_kv_heads * model.head_dim
    heads, lora, rope = model.num_heads, model.kv_lora_rank, model.qk_rope_head_dim
    if model.q_lora_rank:
        q = h * model.q_lora_rank + model.q_lora_rank + model.q_lora_rank * heads * model.qk_head_dim
    else:
        q = h * heads * model.qk_head_dim
    kv = h * (lora + rope) + lora + lora * heads * (model.qk_nope_head_dim + model.v_head_dim)
    return q + kv + heads * model.v_head_dim * h


def expert_params(model: ModelSpec) -> float:
    """One routed expert: gate, up and down (up and down for an ungated MLP)."""
    mats = 3 if model.gated_mlp else 2
    return mats * model.hidden_size * model.moe_intermediate_size


def mlp_params(model: ModelSpec, moe_layer: bool) -> tuple[float, float]:
    """(total, active) parameters of one layer's MLP."""
    mats = 3 if model.gated_mlp else 2
    h = model.hidden_size
    if not moe_layer:
        dense = mats * h * model.intermediate_size
        return dense, dense
    shared = mats * h * model.shared_expert_intermediate_size
    common = h * model.num_experts + shared  # router + shared experts
    total = common + model.num_experts * expert_params(model)
    return total, common + model.experts_per_token * expert_params(model)


def param_counts(model: ModelSpec, *, kv_bytes: float = 2.0) -> ParamCounts:
    """Total and active parameters (weights and norms; biases left out), and KV-cache bytes
    per token over all layers at ``kv_bytes`` per element."""
    h = model.hidden_size
    embedding = model.vocab_size * h
    head = 0 if model.tie_word_embeddings else embedding
    total = active = embedding + head + h  # + final norm
    for group in model.layer_groups:
        mlp_total, mlp_active = mlp_params(model, group.mlp == "moe")
        common = attention_params(model) + 2 * h  # + two norms
        total += group.count * (common + mlp_total)
        active += group.count * (common + mlp_active)
    kv = model.num_layers * kv_bytes_per_token_layer(model, kv_bytes)
    return ParamCounts(total, active, embedding, kv)
