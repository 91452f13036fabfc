"""The arithmetic: operators of an engine step with FLOPs and bytes by class."""

from phasewise.ledger.attention import cached_keys_read, causal_pairs
from phasewise.ledger.build import build_ledger, kv_bytes_per_token_layer
from phasewise.ledger.memory import (
                                     activation_bytes_per_device,
                                     kv_cache_bytes_per_device,
                                     weight_bytes_per_device,
)
from phasewise.ledger.moe import expected_distinct_experts
from phasewise.ledger.ops import BYTE_CLASSES, OP_KINDS, Ledger, Op
from phasewise.ledger.params import ParamCounts, param_counts
from phasewise.ledger.step import SeqGroup, Step

__all__ = ["BYTE_CLASSES", "OP_KINDS", "Ledger", "Op", "ParamCounts", "SeqGroup", "Step",
           "activation_bytes_per_device", "build_ledger", "cached_keys_read", "causal_pairs",
           "expected_distinct_experts", "kv_bytes_per_token_layer", "kv_cache_bytes_per_device",
           "param_counts", "weight_bytes_per_device"]
