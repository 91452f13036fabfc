"""Parameter counts, KV size and recurrent state of a model, from the same per-layer shapes the
ledger prices (``ledger.layers``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from phasewise.ledger.layers import (
    hyper_connection_head_params,
    hyper_connection_params,
    kv_bytes_per_token,
    layer_norms,
    mixer_params,
    mlp_params,
    routed_expert_params,
    state_bytes_per_sequence,
)
from phasewise.specs import ModelSpec
from phasewise.specs.model import Layer

# A DeepSeek-V3 MTP module beside its decoder layer: the norms of the embedding and of the
# hidden state (enorm, hnorm), the 2h→h projection (eh_proj) and a final norm
# (DeepSeek-V3 report §2.2; transformers/vLLM DeepSeekMultiTokenPredictorLayer).
MTP_EXTRA_NORMS = 3


@dataclass(frozen=True, slots=True)
class ParamCounts:
    total: float  # the decoder, embeddings and head; MTP layers and vision tower apart
    active: float  # per token: routed experts counted k of E
    embedding: float
    kv_bytes_per_token: float  # every layer with a KV cache, at the given bytes per element
    state_bytes_per_sequence: float = 0.0  # fixed recurrent state of SSM / linear layers
    mtp: float = 0.0  # multi-token-prediction layers
    vision: float = 0.0  # vision tower and projector
    routed_experts: float = 0.0  # the routed experts' share of ``total``


def layer_params(layer: Layer, hidden: int, streams: int = 0) -> tuple[float, float]:
    """(total, active) parameters of one block: mixer, MLP, its pre-norms and, with
    ``streams`` > 1 hyper-connections, each sub-block's mixing weights."""
    mixer = mixer_params(layer.mixer, hidden) if layer.mixer is not None else 0.0
    mlp_total, mlp_active = mlp_params(layer.mlp, hidden) if layer.mlp is not None else (0.0, 0.0)
    per_sub_block = layer_norms(layer) * (hidden + hyper_connection_params(streams, hidden))
    return mixer + mlp_total + per_sub_block, mixer + mlp_active + per_sub_block


@lru_cache(maxsize=1024)
def param_counts(model: ModelSpec, *, kv_bytes: float = 2.0,
                 state_bytes: float | None = None) -> ParamCounts:
    """Total and active parameters (weights and norms; biases left out), KV-cache bytes per
    token over all layers at ``kv_bytes`` per element, and recurrent state bytes per sequence
    at ``state_bytes`` (the KV format's unless given)."""
    h = model.hidden_size
    embedding = model.vocab_size * h
    head = 0 if model.tie_word_embeddings else embedding
    streams = model.hyper_connections
    total = active = float(embedding + head + h + hyper_connection_head_params(streams, h))
    kv = state = experts = 0.0
    per_state = kv_bytes if state_bytes is None else state_bytes
    for group in model.layer_groups:
        layer_total, layer_active = layer_params(group.layer, h, streams)
        total += group.count * layer_total
        active += group.count * layer_active
        kv += group.count * kv_bytes_per_token(group.layer.mixer, kv_bytes)
        state += group.count * state_bytes_per_sequence(group.layer.mixer, per_state)
        experts += group.count * routed_expert_params(group.layer.mlp, h)
    mtp = sum(layer_params(layer, h, streams)[0] + 2 * h * h + MTP_EXTRA_NORMS * h
              + hyper_connection_head_params(streams, h) for layer in model.mtp_layers)
    return ParamCounts(total, active, embedding, kv, state, mtp, model.vision_params, experts)
