"""Reference softmax-attention mixers and their caches: GQA/MQA attention (full, sliding
window, chunked, with an output gate, with values narrower or wider than keys), multi-head
latent attention (DeepSeek-V2) and its sparse top-k form with the lightning indexer
(DeepSeek-V3.2), and cross-attention to image tokens (Llama-3.2-Vision).

Each module holds the parameters ``ledger.layers.mixer_params`` counts for its kind and runs
the projections the ledger lists (one fused QKV GEMM, the output GEMM). Sliding-window and
chunked layers keep a ring of at most their window (chunk) of tokens per sequence, the
tokens ``ledger.layers.held_tokens`` says they hold; full layers keep every position.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from phasewise.ledger.build import MLA_ABSORBED_MAX_QUERY_TOKENS
from phasewise.specs.model import Attention as AttentionSpec
from phasewise.specs.model import CrossAttention as CrossAttentionSpec
from phasewise.specs.model import LatentAttention as LatentAttentionSpec


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(head_dim: int, max_tokens: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position · theta^(−2i/d), (tokens, head_dim), halves repeated as the
    rotate-half form of RoPE pairs dimension i with i + d/2 (Su et al. 2021; HF Llama)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_tokens, dtype=torch.float64), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x · cos + rotate_half(x) · sin; x is (batch, heads, tokens, dim), cos/sin (tokens, dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def attention_mask(start: int, new_tokens: int, key_start: int, key_end: int,
                   window: int | None, device: torch.device,
                   chunk: int | None = None) -> torch.Tensor | None:
    """Boolean (new_tokens, keys) mask: query at position p sees keys k with k ≤ p and, in a
    sliding-window layer, p − k < window; in a chunked layer (Llama-4), only keys of its own
    chunk, k // chunk = p // chunk. None where every query sees every key."""
    if new_tokens == 1 and chunk is None and (window is None or key_end - key_start <= window):
        return None
    query = torch.arange(start, start + new_tokens, device=device)[:, None]
    key = torch.arange(key_start, key_end, device=device)[None, :]
    allowed = key <= query
    if window is not None:
        allowed &= query - key < window
    if chunk is not None:
        allowed &= key // chunk == query // chunk
    return allowed


def first_visible(start: int, window: int | None, chunk: int | None) -> int:
    """First cached position any of the step's queries can see: the window of the first
    query, or the start of its chunk."""
    if window is not None:
        return max(0, start + 1 - window)
    return start // chunk * chunk if chunk is not None else 0


def filled(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A cache written once, not left as fresh pages: untouched pages map to one shared zero
    page and would read at cache speed."""
    return torch.full(shape, 0.01, dtype=dtype, device=device)


class KVCache(nn.Module):
    """Preallocated keys and values, (batch, kv_heads, slots, dim) each. With ``ring`` the
    cache holds ``slots`` positions, position p in slot p mod slots: a sliding-window or
    chunked layer keeps at most its window and reuses the slots as the sequence grows."""

    def __init__(self, batch: int, kv_heads: int, slots: int, head_dim: int, value_dim: int,
                 dtype: torch.dtype, device: torch.device | str, *, ring: bool = False) -> None:
        super().__init__()
        self.ring, self.slots = ring, slots
        self.register_buffer("k", filled((batch, kv_heads, slots, head_dim), dtype, device),
                             persistent=False)
        self.register_buffer("v", filled((batch, kv_heads, slots, value_dim), dtype, device),
                             persistent=False)

    def update(self, start: int, k: torch.Tensor, v: torch.Tensor,
               key_start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the step's keys and values at positions start…; return the keys and values
        of positions key_start … start + new − 1, in position order."""
        batch, end = k.shape[0], start + k.shape[2]
        if not self.ring:
            self.k[:batch, :, start:end] = k
            self.v[:batch, :, start:end] = v
            return self.k[:batch, :, key_start:end], self.v[:batch, :, key_start:end]
        cached = torch.arange(key_start, start, device=k.device) % self.slots
        keys = torch.cat((self.k[:batch].index_select(2, cached), k), dim=2)
        values = torch.cat((self.v[:batch].index_select(2, cached), v), dim=2)
        kept = min(k.shape[2], self.slots)  # the newest positions, at most one per slot
        slots = torch.arange(end - kept, end, device=k.device) % self.slots
        self.k[:batch].index_copy_(2, slots, k[:, :, -kept:])
        self.v[:batch].index_copy_(2, slots, v[:, :, -kept:])
        return keys, values


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, key_start: int,
         window: int | None, scale: float | None = None, chunk: int | None = None,
         mask: torch.Tensor | None = None) -> torch.Tensor:
    """Causal (windowed, chunked) attention of q over k, v through torch's SDPA."""
    tokens, key_end = q.shape[2], key_start + k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if mask is None and start == key_start == 0 and window is None and chunk is None \
            and tokens > 1:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                              enable_gqa=gqa)
    if mask is None:
        mask = attention_mask(start, tokens, key_start, key_end, window, q.device, chunk)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


class Attention(nn.Module):
    """Multi-head attention with n_kv ≤ n_heads key/value heads (MHA, GQA, MQA); a sliding
    window or chunked local attention (Llama-4); values of their own width; with ``gated``,
    Qwen3-Next's output gate: q_proj yields a query and a gate per head, and the attention
    output is multiplied by sigmoid(gate) before o_proj."""

    def __init__(self, hidden: int, mixer: AttentionSpec, *, bias: bool = False) -> None:
        super().__init__()
        self.heads, self.kv_heads = mixer.heads, mixer.kv_heads
        self.head_dim, self.v_dim = mixer.head_dim, mixer.v_dim
        self.window, self.chunk, self.gated = mixer.window, mixer.chunk, mixer.gated
        q_width = self.heads * self.head_dim * (2 if self.gated else 1)
        self.widths = (q_width, self.kv_heads * self.head_dim, self.kv_heads * self.v_dim)
        self.wqkv = nn.Linear(hidden, sum(self.widths), bias=bias)
        self.wo = nn.Linear(self.heads * self.v_dim, hidden, bias=False)
        self.cache: KVCache | None = None

    @property
    def rope_dim(self) -> int:
        return self.head_dim

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        span = self.window or self.chunk
        slots = min(max_tokens, span) if span else max_tokens
        self.cache = KVCache(batch, self.kv_heads, slots, self.head_dim, self.v_dim, dtype,
                             device, ring=bool(span))

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        batch, tokens, _ = x.shape
        cos, sin = rope[self.head_dim]
        q, k, v = self.wqkv(x).split(self.widths, dim=-1)
        gate = None
        if self.gated:
            q, gate = q.view(batch, tokens, self.heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = apply_rope(q.reshape(batch, tokens, self.heads, self.head_dim).transpose(1, 2),
                       cos, sin)  # (batch, heads, tokens, head_dim)
        k = apply_rope(k.view(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2),
                       cos, sin)
        v = v.view(batch, tokens, self.kv_heads, self.v_dim).transpose(1, 2)
        key_start = first_visible(start, self.window, self.chunk)
        assert self.cache is not None, "call setup_caches() before running the model"
        keys, values = self.cache.update(start, k, v, key_start)
        y = sdpa(q, keys, values, start, key_start, self.window, chunk=self.chunk)
        y = y.transpose(1, 2).reshape(batch, tokens, self.heads * self.v_dim)
        if gate is not None:
            y = y * torch.sigmoid(gate.reshape(batch, tokens, self.heads * self.head_dim))
        return self.wo(y)


class Indexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp report §2.1; its inference code,
    ``Indexer``): index queries from the query latent (wq_b), one index key per token (wk,
    then a LayerNorm) and a weight per index head (weights_proj, run fused with wk as the
    ledger's ``attn.indexer_kw``); score(t, s) = Σ_h w_h · relu(q_h · k_s), and each query
    keeps its top ``index_topk`` causal keys. Keys are kept in the model's dtype (the
    checkpoint's engine stores them in fp8 with a Hadamard rotation; neither changes which
    operators run)."""

    def __init__(self, hidden: int, q_in: int, mixer: LatentAttentionSpec) -> None:
        super().__init__()
        self.heads, self.head_dim = mixer.index_heads, mixer.index_head_dim
        self.rope, self.topk = mixer.qk_rope_head_dim, mixer.index_topk
        self.wq_b = nn.Linear(q_in, self.heads * self.head_dim, bias=False)
        self.wk_weights = nn.Linear(hidden, self.head_dim + self.heads, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim)
        self.register_buffer("keys", None, persistent=False)

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        self.keys = filled((batch, max_tokens, self.head_dim), dtype, device)

    def forward(self, x: torch.Tensor, q_latent: torch.Tensor, start: int,
                rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Indices (batch, tokens, k) of the cached positions each query attends to, k =
        min(index_topk, visible keys); a causally invisible pick (a short context) is
        marked −1."""
        batch, tokens, _ = x.shape
        cos, sin = rope
        q = self.wq_b(q_latent).view(batch, tokens, self.heads, self.head_dim).transpose(1, 2)
        key, weights = self.wk_weights(x).split((self.head_dim, self.heads), dim=-1)
        key = self.k_norm(key)
        q = torch.cat((apply_rope(q[..., :self.rope], cos, sin), q[..., self.rope:]), dim=-1)
        key = torch.cat((apply_rope(key[:, None, :, :self.rope], cos, sin)[:, 0],
                         key[..., self.rope:]), dim=-1)
        assert self.keys is not None, "call setup_caches() before running the model"
        end = start + tokens
        self.keys[:batch, start:end] = key
        scores = torch.einsum("bhtd,bsd->bhts", q, self.keys[:batch, :end]).relu()
        weights = weights * (self.heads * self.head_dim) ** -0.5  # (batch, tokens, heads)
        scores = torch.einsum("bhts,bth->bts", scores, weights)
        visible = attention_mask(start, tokens, 0, end, None, x.device)
        if visible is not None:
            scores = scores.masked_fill(~visible, float("-inf"))
        picked = scores.topk(min(self.topk, end), dim=-1)
        return picked.indices.masked_fill(picked.values == float("-inf"), -1)


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, section 2.1): keys and values are cached as
    one compressed latent per token plus a shared rope key. Short query runs (decode) score
    in the latent space with kv_b absorbed into the query and output; longer ones decompress
    every attended latent, the split the ledger prices (``MLA_ABSORBED_MAX_QUERY_TOKENS``).

    With ``index_topk`` (DeepSeek-V3.2 sparse attention) the indexer picks each query's
    keys: the absorbed form gathers the picked latents and attends to those alone; the
    decompressed form (prefill) scores every causal key and masks all but the picked ones,
    as DeepSeek's own inference code does, so a prefill longer than top-k computes more score
    FLOPs than the ledger counts."""

    def __init__(self, hidden: int, mixer: LatentAttentionSpec, eps: float) -> None:
        super().__init__()
        self.heads = mixer.heads
        self.nope, self.rope = mixer.qk_nope_head_dim, mixer.qk_rope_head_dim
        self.v_dim = mixer.v_head_dim
        self.lora, self.q_lora = mixer.kv_lora_rank, mixer.q_lora_rank
        self.wqkv_a = nn.Linear(hidden, self.q_lora + self.lora + self.rope, bias=False)
        self.q_a_norm = RMSNorm(self.q_lora, eps) if self.q_lora else None
        self.wq_b = nn.Linear(self.q_lora or hidden, self.heads * (self.nope + self.rope),
                              bias=False)
        self.kv_a_norm = RMSNorm(self.lora, eps)
        self.wkv_b = nn.Linear(self.lora, self.heads * (self.nope + self.v_dim), bias=False)
        self.wo = nn.Linear(self.heads * self.v_dim, hidden, bias=False)
        self.indexer = Indexer(hidden, self.q_lora or hidden, mixer) if mixer.index_topk else None
        self.scale = 1.0 / math.sqrt(self.nope + self.rope)
        self.cache: KVCache | None = None

    @property
    def rope_dim(self) -> int:
        return self.rope

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        # One "head" holding the latent as keys and the rope key as values.
        self.cache = KVCache(batch, 1, max_tokens, self.lora, self.rope, dtype, device)
        if self.indexer is not None:
            self.indexer.make_cache(batch, max_tokens, dtype, device)

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        batch, tokens, _ = x.shape
        cos, sin = rope[self.rope]
        q_lat, latent, k_pe = self.wqkv_a(x).split((self.q_lora, self.lora, self.rope), dim=-1)
        q_in = self.q_a_norm(q_lat) if self.q_a_norm is not None else x
        q = self.wq_b(q_in).view(batch, tokens, self.heads, self.nope + self.rope).transpose(1, 2)
        q_nope, q_pe = q.split((self.nope, self.rope), dim=-1)  # (b, h, t, ·)
        q_pe = apply_rope(q_pe, cos, sin)
        k_pe = apply_rope(k_pe.unsqueeze(1), cos, sin)  # (b, 1, t, rope)
        latent = self.kv_a_norm(latent).unsqueeze(1)  # (b, 1, t, lora)
        assert self.cache is not None, "call setup_caches() before running the model"
        latents, rope_keys = self.cache.update(start, latent, k_pe, 0)
        picks = self.indexer(x, q_in, start, (cos, sin)) if self.indexer is not None else None
        if tokens <= MLA_ABSORBED_MAX_QUERY_TOKENS:
            y = self._absorbed(q_nope, q_pe, latents.squeeze(1), rope_keys.squeeze(1), start,
                               picks)
        else:
            y = self._decompressed(q_nope, q_pe, latents, rope_keys, start, picks)
        return self.wo(y.transpose(1, 2).reshape(batch, tokens, self.heads * self.v_dim))

    def _kv_b(self) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.wkv_b.weight.view(self.heads, self.nope + self.v_dim, self.lora)
        return w[:, : self.nope], w[:, self.nope:]  # (h, nope, lora), (h, v, lora)

    def _absorbed(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latents: torch.Tensor,
                  rope_keys: torch.Tensor, start: int, picks: torch.Tensor | None) -> torch.Tensor:
        """latents (b, keys, lora), rope_keys (b, keys, rope)."""
        w_k, w_v = self._kv_b()
        q_latent = torch.einsum("bhtn,hnl->bhtl", q_nope, w_k)
        if picks is not None:
            return self._sparse(q_latent, q_pe, latents, rope_keys, picks, w_v)
        batch, heads, tokens, _ = q_nope.shape
        # Every head reads the same latents: fold heads into the query rows of one batched
        # matmul per sequence, rather than broadcast the latents over the heads (which
        # copies them once per head).
        rows = (batch, heads * tokens, -1)
        scores = (q_latent.reshape(rows) @ latents.transpose(1, 2)
                  + q_pe.reshape(rows) @ rope_keys.transpose(1, 2))
        scores = scores.view(batch, heads, tokens, -1).float() * self.scale  # (b, h, t, keys)
        mask = attention_mask(start, tokens, 0, latents.shape[1], None, scores.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = scores.softmax(dim=-1).to(latents.dtype).reshape(rows)
        out_latent = (probs @ latents).view(batch, heads, tokens, -1)  # (b, h, t, lora)
        return torch.einsum("bhtl,hvl->bhtv", out_latent, w_v)

    def _sparse(self, q_latent: torch.Tensor, q_pe: torch.Tensor, latents: torch.Tensor,
                rope_keys: torch.Tensor, picks: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
        """Attention over each query's picked latents only: gather (b, t, k, ·), score."""
        rows = torch.arange(latents.shape[0], device=latents.device)[:, None, None]
        index = picks.clamp(min=0)
        chosen, chosen_pe = latents[rows, index], rope_keys[rows, index]  # (b, t, k, ·)
        scores = (torch.einsum("bhtl,btkl->bhtk", q_latent, chosen)
                  + torch.einsum("bhtr,btkr->bhtk", q_pe, chosen_pe)).float() * self.scale
        scores = scores.masked_fill((picks < 0)[:, None], float("-inf"))
        probs = scores.softmax(dim=-1).to(latents.dtype)
        out_latent = torch.einsum("bhtk,btkl->bhtl", probs, chosen)
        return torch.einsum("bhtl,hvl->bhtv", out_latent, w_v)

    def _decompressed(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latents: torch.Tensor,
                      rope_keys: torch.Tensor, start: int,
                      picks: torch.Tensor | None) -> torch.Tensor:
        batch, keys = latents.shape[0], latents.shape[2]
        kv = self.wkv_b(latents.squeeze(1)).view(batch, keys, self.heads, self.nope + self.v_dim)
        k_nope, v = kv.transpose(1, 2).split((self.nope, self.v_dim), dim=-1)  # (b, h, keys, ·)
        k = torch.cat((k_nope, rope_keys.expand(-1, self.heads, -1, -1)), dim=-1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        mask = None
        if picks is not None:  # (b, 1, t, keys): the picked keys of each query
            mask = torch.zeros(batch, q.shape[2], keys + 1, dtype=torch.bool, device=q.device)
            mask.scatter_(2, torch.where(picks < 0, keys, picks), True)
            mask = mask[:, None, :, :keys]
        return sdpa(q, k, v, start, 0, None, scale=self.scale, mask=mask)


class CrossAttention(nn.Module):
    """Llama-3.2-Vision's cross-attention layer (transformers' MllamaTextCrossAttention):
    q, k, v, o projections and q/k RMSNorms. Its keys and values come from the image
    tokens' features, computed once per image; a text-only step has none, and the layer's
    output for text rows without an image is masked to zero (``full_text_row_masked_out_mask``)
    after the query and output projections have run, which is what the ledger counts."""

    def __init__(self, hidden: int, mixer: CrossAttentionSpec, eps: float) -> None:
        super().__init__()
        self.heads, self.head_dim = mixer.heads, mixer.head_dim
        self.wq = nn.Linear(hidden, mixer.heads * mixer.head_dim, bias=False)
        self.wkv = nn.Linear(hidden, 2 * mixer.kv_heads * mixer.head_dim, bias=False)
        self.wo = nn.Linear(mixer.heads * mixer.head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(mixer.head_dim, eps)
        self.k_norm = RMSNorm(mixer.head_dim, eps)

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        """No image tokens: nothing to cache."""

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q = self.q_norm(self.wq(x).view(batch, tokens, self.heads, self.head_dim))
        masked = q * 0.0  # full_text_row_masked_out_mask: a text row without an image
        return self.wo(masked.reshape(batch, tokens, -1))


class LinearMap(nn.Module):
    """A block a NAS search replaced by one hidden×hidden linear map (Nemotron NAS
    ``replace_with_linear``), as a mixer or as an MLP."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden, bias=False)

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        """A linear map keeps nothing between steps."""

    def forward(self, x: torch.Tensor, start: int = 0, rope: dict | None = None) -> torch.Tensor:
        return self.linear(x)
