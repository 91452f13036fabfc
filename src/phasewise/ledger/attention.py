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


def _chunked_prefix(positions: int, chunk: int) -> int:
    """Σ over 1-based positions j ≤ n of the keys j sees in chunked attention, ((j−1) mod C)+1:
    C(C+1)/2 per full chunk and r(r+1)/2 for the r positions of the last, partial one."""
    full, rest = divmod(positions, chunk)
    return full * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2


def chunked_pairs(new_tokens: int, cached_tokens: int, chunk: int) -> int:
    """(query, key) pairs of chunked local attention (Llama-4's ``attention_chunk_size``): a
    query attends causally to the keys of its own chunk of ``chunk`` positions."""
    return (_chunked_prefix(cached_tokens + new_tokens, chunk)
            - _chunked_prefix(cached_tokens, chunk))


def chunked_keys_read(cached_tokens: int, chunk: int) -> int:
    """Cached tokens a chunked layer reads: those of the current, unfinished chunk."""
    return cached_tokens % chunk
