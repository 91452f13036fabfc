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


def compressed_entries(tokens: int, ratio: int) -> int:
    """Compressed entries a sequence of ``tokens`` holds at one per ``ratio`` tokens: an entry
    is written once its r tokens are complete (DeepSeek-V4 Compressor.forward compresses at
    (position + 1) % r == 0)."""
    return tokens // ratio


def _compressed_prefix(positions: int, ratio: int, cap: int | None) -> int:
    """Σ over 1-based positions j ≤ n of the compressed entries query j attends to,
    min(cap, ⌊j/r⌋). Without a cap, with n = q·r + s: r·q(q−1)/2 + q·(s+1); with one,
    ⌊j/r⌋ < cap below j = cap·r, so those positions sum uncapped and the rest add cap each."""
    if cap is not None and positions >= cap * ratio:
        return _compressed_prefix(cap * ratio - 1, ratio, None) + cap * (positions - cap * ratio + 1)
    q, s = divmod(positions, ratio)
    return ratio * q * (q - 1) // 2 + q * (s + 1)


def compressed_pairs(new_tokens: int, cached_tokens: int, ratio: int,
                     topk: int | None = None) -> int:
    """(query, compressed entry) pairs of a step: query j sees the ⌊j/r⌋ entries completed
    before it (DeepSeek-V4 get_compress_topk_idxs: entry i is visible when i < (j)//r), all
    of them in HCA, at most ``topk`` chosen by the indexer in CSA."""
    return (_compressed_prefix(cached_tokens + new_tokens, ratio, topk)
            - _compressed_prefix(cached_tokens, ratio, topk))
