"""Mixture-of-experts routing arithmetic."""

from __future__ import annotations


def expected_distinct_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected number of distinct experts that ``tokens`` tokens touch with top-k routing.

    Each token picks k of E experts; with uniform routing an expert is missed by one token
    with probability 1 − k/E, so E·(1 − (1 − k/E)^T) are touched on average
    (DESIGN.md, counting conventions).
    """
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def expert_slots_per_rank(num_experts: int, ep: int) -> int:
    """Expert slots one of ``ep`` expert-parallel ranks holds: ⌈E / ep⌉.

    Where ep does not divide E the engines add redundant expert replicas until it does,
    E + R physical experts with R the smallest count making (E + R) divisible by ep, each
    rank holding (E + R) / ep of them = ⌈E / ep⌉: SGLang's ``--ep-num-redundant-experts``
    (num_physical_experts = num_logical_experts + ep_num_redundant_experts,
    num_local_physical_experts = num_physical_experts // ep_size; eplb/expert_location.py),
    vLLM's EPLB ``num_redundant_experts`` (global_num_experts = logical + redundant,
    local_num_experts = global_num_experts // ep_size; fused_moe/layer.py), TensorRT-LLM's
    MoE load balancer ``num_slots`` (slots per rank = num_slots / ep_size; examples/
    wide_ep/README.md, e.g. 288 slots for DeepSeek-R1's 256 experts). DeepSeek-V3 at EP 72:
    ⌈256 / 72⌉ = 4 slots a rank (288 in all, 32 redundant).
    """
    return -(-num_experts // ep)
