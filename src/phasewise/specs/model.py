"""The architecture of a decoder-only transformer, as the arithmetic needs it.

Built from a Hugging Face ``config.json`` by ``catalog.hf_config``; a what-if is a
``dataclasses.replace`` of this spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from phasewise.errors import InputError


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Layers that share one shape: the ledger prices one and multiplies by ``count``."""

    attention: str  # "full" | "sliding"
    mlp: str  # "dense" | "moe"
    count: int

    @property
    def label(self) -> str:
        return f"{self.attention}/{self.mlp}"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    max_context: int = 4096
    model_type: str = ""
    # Not needed by the arithmetic; the reference transformer in measure/ uses them.
    rope_theta: float = 10000.0
    rope_scaling: str = ""  # rope_type of rope_scaling / rope_parameters ("llama3", "yarn", …)
    norm_eps: float = 1e-5
    hidden_act: str = "silu"
    # Attention pattern: one entry per layer ("full" or "sliding"); empty means all full.
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    # Mixture of experts: routed experts, top-k, per-expert width; shared experts are
    # one dense gated MLP of the summed width; moe_layers marks the sparse layers.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: tuple[bool, ...] = ()
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 turns it on.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        positive = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                    "vocab_size")
        for field in positive:
            if getattr(self, field) <= 0:
                raise InputError(f"model '{self.name}': {field} must be positive, got "
                                 f"{getattr(self, field)}; check the config.json.")
        if self.num_heads % self.num_kv_heads:
            raise InputError(f"model '{self.name}': {self.num_heads} attention heads are not "
                             f"a multiple of {self.num_kv_heads} KV heads.")
        for name, per_layer in (("layer_types", self.layer_types), ("moe_layers", self.moe_layers)):
            if per_layer and len(per_layer) != self.num_layers:
                raise InputError(f"model '{self.name}': {name} lists {len(per_layer)} layers "
                                 f"but the model has {self.num_layers}.")
        if self.is_moe and not (0 < self.experts_per_token <= self.num_experts):
            raise InputError(f"model '{self.name}': experts per token must be in "
                             f"1..{self.num_experts}, got {self.experts_per_token}.")
        if self.is_sliding_any and not self.sliding_window:
            raise InputError(f"model '{self.name}': sliding layers need a sliding_window.")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_sliding_any(self) -> bool:
        return "sliding" in self.layer_types

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head: nope + rope parts for MLA, head_dim otherwise."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    def layer_attention(self, index: int) -> str:
        return self.layer_types[index] if self.layer_types else "full"

    def layer_is_moe(self, index: int) -> bool:
        if not self.is_moe:
            return False
        return self.moe_layers[index] if self.moe_layers else True

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        return _layer_groups(self)


@lru_cache(maxsize=512)
def _layer_groups(model: ModelSpec) -> tuple[LayerGroup, ...]:
    counts: dict[tuple[str, str], int] = {}
    for index in range(model.num_layers):
        key = (model.layer_attention(index), "moe" if model.layer_is_moe(index) else "dense")
        counts[key] = counts.get(key, 0) + 1
    return tuple(LayerGroup(attention, mlp, count) for (attention, mlp), count in counts.items())
