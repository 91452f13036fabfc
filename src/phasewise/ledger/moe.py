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
