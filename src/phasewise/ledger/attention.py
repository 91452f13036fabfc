"""How many (query, key) pairs causal attention scores in a step, full or sliding-window."""

from __future__ import annotations


def causal_pairs(new_tokens: int, cached_tokens: int, window: int | None = None) -> int:
    """(query, key) pairs for ``new_tokens`` queries after ``cached_tokens`` cached keys.

    Query j (1-based absolute position c + i) sees min(c + i, W) keys, so the total is
    S·c + S(S+1)/2 with no window (DESIGN.md, counting conventions), and sums min(j, W)
    over j = c+1 … c+S with one.
    """
    s, c = new_tokens, cached_tokens
    if window is None or c + s <= window:
        return s * c + s * (s + 1) // 2
    if c + 1 >= window:
        return s * window
    below = window * (window + 1) // 2 - c * (c + 1) // 2  # j = c+1 … W
    return below + (c + s - window) * window


def cached_keys_read(cached_tokens: int, window: int | None = None) -> int:
    """Cached tokens whose K/V a step reads from memory: the whole cache, or the window."""
    return cached_tokens if window is None else min(cached_tokens, window)
