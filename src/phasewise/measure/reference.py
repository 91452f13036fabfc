"""A reference decoder-only transformer in PyTorch, built from a ``ModelSpec``.

Small and direct, in the style of gpt-fast and nanoGPT: RMSNorm, RoPE, GQA/MQA attention
through ``scaled_dot_product_attention``, multi-head latent attention (DeepSeek-V2), dense
and gated MLPs, top-k routed experts, sliding-window layers, and a preallocated KV cache.
The phases are plain functions, ``prefill`` and ``decode_one_token``, so a timer wraps them
from outside. The operators follow the ledger's list (one fused QKV GEMM, one fused
gate/up GEMM, the LM head on the last prompt token only), so a measured step can be set
beside its ledger.

Parameter names follow the Hugging Face Llama layout where one exists; ``weights.py``
fuses the checkpoint's separate projections into the fused ones here.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from phasewise.ledger.build import MLA_ABSORBED_MAX_QUERY_TOKENS
from phasewise.specs import ModelSpec
from phasewise.specs.model import uniform_layers

# Models whose Hugging Face implementation adds a bias to the Q, K and V projections.
QKV_BIAS_MODEL_TYPES = ("qwen2", "qwen2_moe")

ACTIVATIONS = {
    "silu": F.silu, "swish": F.silu, "relu": F.relu, "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


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
                   window: int | None, device: torch.device) -> torch.Tensor | None:
    """Boolean (new_tokens, keys) mask: query at position p sees keys k with k ≤ p and, in a
    sliding-window layer, p − k < window. None where every query sees every key."""
    if new_tokens == 1 and (window is None or key_end - key_start <= window):
        return None
    query = torch.arange(start, start + new_tokens, device=device)[:, None]
    key = torch.arange(key_start, key_end, device=device)[None, :]
    allowed = key <= query
    if window is not None:
        allowed &= query - key < window
    return allowed


class KVCache(nn.Module):
    """Preallocated keys and values, (batch, kv_heads, max_tokens, head_dim) each."""

    def __init__(self, batch: int, kv_heads: int, max_tokens: int, head_dim: int,
                 value_dim: int, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        shape = (batch, kv_heads, max_tokens, head_dim)
        # Written, not left as fresh pages: untouched pages map to one shared zero page and
        # would read at cache speed.
        self.register_buffer("k", torch.full(shape, 0.01, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("v", torch.full(shape[:-1] + (value_dim,), 0.01, dtype=dtype,
                                             device=device), persistent=False)

    def update(self, start: int, k: torch.Tensor, v: torch.Tensor,
               key_start: int) -> tuple[torch.Tensor, torch.Tensor]:
        batch, end = k.shape[0], start + k.shape[2]
        self.k[:batch, :, start:end] = k
        self.v[:batch, :, start:end] = v
        return self.k[:batch, :, key_start:end], self.v[:batch, :, key_start:end]


class Attention(nn.Module):
    """Multi-head attention with n_kv ≤ n_heads key/value heads (MHA, GQA, MQA)."""

    def __init__(self, spec: ModelSpec, window: int | None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.window = window
        qkv_width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.wqkv = nn.Linear(spec.hidden_size, qkv_width,
                              bias=spec.model_type in QKV_BIAS_MODEL_TYPES)
        self.wo = nn.Linear(self.heads * self.head_dim, spec.hidden_size, bias=False)
        self.cache: KVCache | None = None

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        self.cache = KVCache(batch, self.kv_heads, max_tokens, self.head_dim, self.head_dim,
                             dtype, device)

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        rotated = self.heads + self.kv_heads  # query and key heads take RoPE in one call
        qkv = self.wqkv(x).view(batch, tokens, rotated + self.kv_heads, self.head_dim)
        qkv = qkv.transpose(1, 2)  # (batch, heads, tokens, head_dim)
        q, k = apply_rope(qkv[:, :rotated], cos, sin).split((self.heads, self.kv_heads), dim=1)
        v = qkv[:, rotated:]
        key_start = _window_start(start, self.window)
        assert self.cache is not None, "call setup_caches() before running the model"
        keys, values = self.cache.update(start, k, v, key_start)
        y = _sdpa(q, keys, values, start, key_start, self.window)
        return self.wo(y.transpose(1, 2).reshape(batch, tokens, self.heads * self.head_dim))


def _window_start(start: int, window: int | None) -> int:
    """First cached position any of the step's queries can see: the window of the first."""
    return 0 if window is None else max(0, start + 1 - window)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, key_start: int,
          window: int | None, scale: float | None = None) -> torch.Tensor:
    tokens, key_end = q.shape[2], key_start + k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if start == 0 and key_start == 0 and window is None and tokens > 1:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                              enable_gqa=gqa)
    mask = attention_mask(start, tokens, key_start, key_end, window, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, section 2.1): keys and values are cached as
    one compressed latent per token plus a shared rope key. Short query runs (decode) score
    in the latent space with kv_b absorbed into the query and output; longer ones decompress
    every attended latent, the split the ledger prices (``MLA_ABSORBED_MAX_QUERY_TOKENS``)."""

    def __init__(self, spec: ModelSpec, window: int | None) -> None:
        super().__init__()
        self.heads, self.window = spec.num_heads, window
        self.nope, self.rope = spec.qk_nope_head_dim, spec.qk_rope_head_dim
        self.v_dim = spec.v_head_dim
        self.lora, self.q_lora = spec.kv_lora_rank, spec.q_lora_rank
        h = spec.hidden_size
        self.wqkv_a = nn.Linear(h, self.q_lora + self.lora + self.rope, bias=False)
        self.q_a_norm = RMSNorm(self.q_lora, spec.norm_eps) if self.q_lora else None
        self.wq_b = nn.Linear(self.q_lora or h, self.heads * (self.nope + self.rope), bias=False)
        self.kv_a_norm = RMSNorm(self.lora, spec.norm_eps)
        self.wkv_b = nn.Linear(self.lora, self.heads * (self.nope + self.v_dim), bias=False)
        self.wo = nn.Linear(self.heads * self.v_dim, h, bias=False)
        self.scale = 1.0 / math.sqrt(self.nope + self.rope)
        self.cache: KVCache | None = None

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        # One "head" holding the latent as keys and the rope key as values.
        self.cache = KVCache(batch, 1, max_tokens, self.lora, self.rope, dtype, device)

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q_lat, latent, k_pe = self.wqkv_a(x).split((self.q_lora, self.lora, self.rope), dim=-1)
        q = self.wq_b(self.q_a_norm(q_lat) if self.q_a_norm is not None else x)
        q = q.view(batch, tokens, self.heads, self.nope + self.rope).transpose(1, 2)
        q_nope, q_pe = q.split((self.nope, self.rope), dim=-1)  # (b, h, t, ·)
        q_pe = apply_rope(q_pe, cos, sin)
        k_pe = apply_rope(k_pe.unsqueeze(1), cos, sin)  # (b, 1, t, rope)
        latent = self.kv_a_norm(latent).unsqueeze(1)  # (b, 1, t, lora)
        key_start = _window_start(start, self.window)
        assert self.cache is not None, "call setup_caches() before running the model"
        latents, rope_keys = self.cache.update(start, latent, k_pe, key_start)
        if tokens <= MLA_ABSORBED_MAX_QUERY_TOKENS:
            y = self._absorbed(q_nope, q_pe, latents, rope_keys, start, key_start)
        else:
            y = self._decompressed(q_nope, q_pe, latents, rope_keys, start, key_start)
        return self.wo(y.transpose(1, 2).reshape(batch, tokens, self.heads * self.v_dim))

    def _kv_b(self) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.wkv_b.weight.view(self.heads, self.nope + self.v_dim, self.lora)
        return w[:, : self.nope], w[:, self.nope:]  # (h, nope, lora), (h, v, lora)

    def _absorbed(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latents: torch.Tensor,
                  rope_keys: torch.Tensor, start: int, key_start: int) -> torch.Tensor:
        w_k, w_v = self._kv_b()
        batch, heads, tokens, _ = q_nope.shape
        q_latent = torch.einsum("bhtn,hnl->bhtl", q_nope, w_k)
        # Every head reads the same latents: fold heads into the query rows of one batched
        # matmul per sequence, rather than broadcast the latents over the heads (which
        # copies them once per head).
        latents, rope_keys = latents.squeeze(1), rope_keys.squeeze(1)  # (b, keys, ·)
        rows = (batch, heads * tokens, -1)
        scores = (q_latent.reshape(rows) @ latents.transpose(1, 2)
                  + q_pe.reshape(rows) @ rope_keys.transpose(1, 2))
        scores = scores.view(batch, heads, tokens, -1).float() * self.scale  # (b, h, t, keys)
        mask = attention_mask(start, tokens, key_start, key_start + latents.shape[1],
                              self.window, scores.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = scores.softmax(dim=-1).to(latents.dtype).reshape(rows)
        out_latent = (probs @ latents).view(batch, heads, tokens, -1)  # (b, h, t, lora)
        return torch.einsum("bhtl,hvl->bhtv", out_latent, w_v)

    def _decompressed(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latents: torch.Tensor,
                      rope_keys: torch.Tensor, start: int, key_start: int) -> torch.Tensor:
        batch, keys = latents.shape[0], latents.shape[2]
        kv = self.wkv_b(latents.squeeze(1)).view(batch, keys, self.heads, self.nope + self.v_dim)
        k_nope, v = kv.transpose(1, 2).split((self.nope, self.v_dim), dim=-1)  # (b, h, keys, ·)
        k = torch.cat((k_nope, rope_keys.expand(-1, self.heads, -1, -1)), dim=-1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        return _sdpa(q, k, v, start, key_start, self.window, scale=self.scale)


class MLP(nn.Module):
    """down(act(gate(x)) · up(x)) with gate and up as one GEMM, or down(act(up(x)))."""

    def __init__(self, hidden: int, width: int, *, gated: bool, act: str) -> None:
        super().__init__()
        self.gated, self.width, self.act = gated, width, ACTIVATIONS[act]
        self.w_up = nn.Linear(hidden, 2 * width if gated else width, bias=False)
        self.w_down = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(gated_activation(self.w_up(x), self.width, self.gated, self.act))


def gated_activation(up: torch.Tensor, width: int, gated: bool, act: Any) -> torch.Tensor:
    """act(gate) · up for a fused gate/up output, act(up) for an ungated one."""
    if gated:
        gate, up = up.split((width, width), dim=-1)
        return act(gate) * up
    return act(up)


class MoE(nn.Module):
    """Top-k routed experts (softmax over the router, the k kept renormalised, as Mixtral
    and Qwen3-MoE do) plus optional shared experts. Only the experts some token picked
    run, so weight reads follow the distinct experts, as in the ledger.

    The experts' weights are stacked, (experts, out, in), so that on a GPU one grouped GEMM
    per projection runs every expert's tokens without the host learning how many each got
    (``torch._grouped_mm``; its empty groups read no weights), and the step can be replayed
    as a CUDA graph. Elsewhere, or where that kernel does not run, the experts run one by
    one after the host reads the counts back."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.top_k, self.width = spec.experts_per_token, spec.moe_intermediate_size
        self.gated, self.act = spec.gated_mlp, ACTIVATIONS[spec.hidden_act]
        experts, hidden = spec.num_experts, spec.hidden_size
        self.router = nn.Linear(hidden, experts, bias=False)
        up_rows = 2 * self.width if self.gated else self.width
        self.w_up = nn.Parameter(torch.empty(experts, up_rows, hidden))
        self.w_down = nn.Parameter(torch.empty(experts, hidden, self.width))
        shared = spec.shared_expert_intermediate_size
        self.shared = (MLP(hidden, shared, gated=spec.gated_mlp, act=spec.hidden_act)
                       if shared else None)
        self.grouped = False  # set by ``use_grouped_gemm`` where the kernel runs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (tokens, hidden)
        probs = self.router(flat).float().softmax(dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (tokens, k)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        picks = chosen.flatten()
        order = picks.argsort()  # (token, slot) pairs grouped by expert
        tokens = order // self.top_k
        # tokens per expert; bincount would read its input's maximum back to the host
        counts = picks.new_zeros(self.w_up.shape[0]).scatter_add_(0, picks, torch.ones_like(picks))
        routed = (self._grouped(flat[tokens], counts) if self.grouped else
                  self._one_by_one(flat[tokens], counts.tolist()))
        out = torch.zeros_like(flat).index_add_(0, tokens, routed * weights.flatten()[order, None])
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view_as(x)

    def _grouped(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        ends = counts.cumsum(0).to(torch.int32)
        up = torch._grouped_mm(rows, self.w_up.transpose(1, 2), offs=ends)
        hidden = gated_activation(up, self.width, self.gated, self.act)
        return torch._grouped_mm(hidden, self.w_down.transpose(1, 2), offs=ends)

    def _one_by_one(self, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
        outs, first = [], 0
        for expert, count in enumerate(counts):
            if count:
                part = rows[first:first + count]
                up = F.linear(part, self.w_up[expert])
                hidden = gated_activation(up, self.width, self.gated, self.act)
                outs.append(F.linear(hidden, self.w_down[expert]))
                first += count
        return torch.cat(outs)  # every token picked k experts: never empty


def grouped_gemm_runs(device: str | torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` multiplies ``dtype`` on ``device``, checked against
    per-group products on a small problem with an empty group. Only on CUDA: on a CPU the
    experts run one by one, which torch's FLOP counter sees."""
    if torch.device(device).type != "cuda" or not hasattr(torch, "_grouped_mm"):
        return False
    try:
        rows = torch.randn(24, 64, device=device, dtype=dtype)
        weights = torch.randn(4, 32, 64, device=device, dtype=dtype)
        ends = torch.tensor([8, 8, 16, 24], device=device, dtype=torch.int32)
        got = torch._grouped_mm(rows, weights.transpose(1, 2), offs=ends)
        want = torch.cat([rows[0:8] @ weights[0].T, rows[8:16] @ weights[2].T,
                          rows[16:24] @ weights[3].T])
        return bool(torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-1))
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def syncs_with_host(model: nn.Module) -> bool:
    """Whether a forward pass reads a value back to the host (an MoE layer running its
    experts one by one), which a CUDA graph cannot hold."""
    return any(isinstance(m, MoE) and not m.grouped for m in model.modules())


def use_grouped_gemm(model: nn.Module) -> bool:
    """Run every MoE layer's experts as grouped GEMMs where the kernel runs for the model's
    device and dtype; returns whether they do."""
    param = next(model.parameters())
    grouped = grouped_gemm_runs(param.device, param.dtype)
    for module in model.modules():
        if isinstance(module, MoE):
            module.grouped = grouped
    return grouped


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, index: int) -> None:
        super().__init__()
        window = spec.sliding_window if spec.layer_attention(index) == "sliding" else None
        self.attn_norm = RMSNorm(spec.hidden_size, spec.norm_eps)
        self.attn = LatentAttention(spec, window) if spec.is_mla else Attention(spec, window)
        self.mlp_norm = RMSNorm(spec.hidden_size, spec.norm_eps)
        self.mlp = (MoE(spec) if spec.layer_is_moe(index) else
                    MLP(spec.hidden_size, spec.intermediate_size, gated=spec.gated_mlp,
                        act=spec.hidden_act))

    def forward(self, x: torch.Tensor, start: int, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), start, cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.hidden_act not in ACTIVATIONS:
            from phasewise.errors import InputError

            raise InputError(f"model '{spec.name}': activation '{spec.hidden_act}' is not one "
                             f"of {', '.join(ACTIVATIONS)}.")
        if spec.layers != uniform_layers(spec):
            from phasewise.errors import InputError

            raise InputError(f"model '{spec.name}': the reference transformer builds decoders "
                             "whose layers share one geometry; this model's layers differ "
                             f"({', '.join(sorted({g.label for g in spec.layer_groups}))}), so "
                             "profile it with --model set to a uniform model.")
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.norm_eps)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self.rope_cos = self.rope_sin = torch.empty(0)
        self.max_tokens = 0

    def setup_caches(self, batch: int, max_tokens: int) -> None:
        """Allocate every layer's KV cache for ``batch`` sequences of ``max_tokens`` each."""
        param = self.embed.weight
        for layer in self.layers:
            layer.attn.make_cache(batch, max_tokens, param.dtype, param.device)
        rope_dim = self.spec.qk_rope_head_dim if self.spec.is_mla else self.spec.head_dim
        cos, sin = rope_tables(rope_dim, max_tokens, self.spec.rope_theta)
        self.rope_cos, self.rope_sin = cos.to(param), sin.to(param)
        self.max_tokens = max_tokens

    def forward(self, tokens: torch.Tensor, start: int, *,
                all_logits: bool = False) -> torch.Tensor:
        """Logits of the last new token of each sequence, (batch, vocab), or of every new
        token, (batch, tokens, vocab); ``tokens`` is (batch, new_tokens) at positions
        ``start`` onwards."""
        new_tokens = tokens.shape[1]
        if start + new_tokens > self.max_tokens:
            raise ValueError(f"positions up to {start + new_tokens} exceed the cache of "
                             f"{self.max_tokens}; call setup_caches() with more tokens")
        cos = self.rope_cos[start:start + new_tokens]
        sin = self.rope_sin[start:start + new_tokens]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start, cos, sin)
        x = x if all_logits else x[:, -1]
        return self.lm_head(self.norm(x))


@torch.inference_mode()
def prefill(model: Transformer, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Phase 1: the whole prompt (batch, tokens) in one step; returns the last logits."""
    return model(tokens, start)


@torch.inference_mode()
def decode_one_token(model: Transformer, tokens: torch.Tensor, position: int) -> torch.Tensor:
    """Phase 2: one new token per sequence, (batch, 1), at ``position``; returns its logits."""
    return model(tokens, position)


@torch.inference_mode()
def generate(model: Transformer, prompt: list[int], max_new_tokens: int, *,
             stop_tokens: tuple[int, ...] = ()) -> list[int]:
    """Greedy generation: prefill the prompt, then decode the argmax one token at a time."""
    device = model.embed.weight.device
    tokens = torch.tensor([prompt], device=device)
    model.setup_caches(1, len(prompt) + max_new_tokens)
    next_token = prefill(model, tokens).argmax(dim=-1)
    out = [int(next_token)]
    for position in range(len(prompt), len(prompt) + max_new_tokens - 1):
        if out[-1] in stop_tokens:
            break
        next_token = decode_one_token(model, next_token.view(1, 1), position).argmax(dim=-1)
        out.append(int(next_token))
    return out


def build_model(spec: ModelSpec, *, dtype: torch.dtype = torch.float32,
                device: str = "cpu", seed: int = 0) -> Transformer:
    """The reference transformer with random weights: matrices uniform with standard
    deviation 0.02 (GPT-2's initialiser scale; uniform draws faster than normal), unit
    norms, zero biases. Speed does not depend on the values."""
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.device("meta"):
        model = Transformer(spec).to(dtype)
    model = model.to_empty(device=device)
    if spec.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight
    bound = 0.02 * math.sqrt(3.0)  # uniform(−a, a) has standard deviation a/√3
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                param.uniform_(-bound, bound, generator=generator)
    return model.eval()


def prefer_vector_layouts(model: nn.Module) -> nn.Module:
    """Store each CPU weight so a one-token GEMM (a matrix-vector product) reads it along
    its longer side: column-major when out_features > in_features, row-major otherwise.

    The logical (out, in) shapes stay; only the strides change. BLAS matrix-vector kernels
    stream memory poorly along short rows: on a Zen 4 core with MKL, a (3072 × 576) fp32
    weight reads at 12 GB/s row-major and 22 GB/s column-major, a (576 × 1536) one at
    16.5 GB/s row-major and 13 GB/s column-major, while many-token GEMMs run at the same
    rate either way (benchmarks/README.md, "Reference transformer"). An MoE layer's
    stacked experts, (experts, out, in), get the same order within each expert."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear) and module.out_features > module.in_features:
                weight = module.weight
                weight.data = weight.data.t().contiguous().t()
            elif isinstance(module, MoE):
                for weight in (module.w_up, module.w_down):
                    if weight.shape[1] > weight.shape[2]:
                        weight.data = weight.data.transpose(1, 2).contiguous().transpose(1, 2)
    if isinstance(model, Transformer) and model.spec.tie_word_embeddings:
        model.embed.weight = model.lm_head.weight
    return model
