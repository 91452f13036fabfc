"""A reference decoder in PyTorch, built layer by layer from a ``ModelSpec``.

Small and direct, in the style of gpt-fast and nanoGPT: each layer of the spec becomes a
block of its own mixer and MLP (``Layer``), so a hybrid or NAS model is built as it is
described. Mixers: GQA/MQA attention through ``scaled_dot_product_attention`` (full,
sliding window, chunked, gated), multi-head latent attention (DeepSeek-V2) and its sparse
top-k form (DeepSeek-V3.2), cross-attention, Mamba-2, Gated DeltaNet, Kimi Delta Attention,
LFM2's short conv, a linear map, or none (``measure.attention``, ``measure.recurrent``).
MLPs: dense (gated or plain), top-k routed experts with shared experts, a latent projection
and a dense MLP beside, a linear map, or none. The phases are plain functions, ``prefill``
and ``decode_one_token``, so a timer wraps them from outside. The operators follow the
ledger's list (one fused QKV GEMM, one fused gate/up GEMM, the LM head on the last prompt
token only), so a measured step can be set beside its ledger, and each module holds the
parameters ``ledger.layers`` counts for its kind.

Parameter names follow the Hugging Face Llama layout where one exists; ``weights.py``
fuses the checkpoint's separate projections into the fused ones here.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from phasewise.errors import InputError
from phasewise.measure.attention import (  # noqa: F401  (re-exported: the reference's parts)
    Attention,
    CrossAttention,
    LatentAttention,
    LinearMap,
    RMSNorm,
    apply_rope,
    attention_mask,
    rope_tables,
)
from phasewise.measure.recurrent import DeltaNetMixer, Mamba2Mixer, ShortConvMixer
from phasewise.specs import ModelSpec
from phasewise.specs import model as layers
from phasewise.specs.model import MLP as MLPSpec

# Models whose Hugging Face implementation adds a bias to the Q, K and V projections.
QKV_BIAS_MODEL_TYPES = ("qwen2", "qwen2_moe")

# The clamped SwiGLU of gpt-oss and MiniMax-M3 ("swigluoai"; transformers' GptOssExperts),
# with the swiglu_alpha and swiglu_limit their configs set.
SWIGLU_OAI_ALPHA = 1.702
SWIGLU_OAI_LIMIT = 7.0


def swiglu_oai_gate(x: torch.Tensor) -> torch.Tensor:
    """The gate half of gpt-oss's SwiGLU: x·sigmoid(α·x) on x clamped above at the limit."""
    x = x.clamp(max=SWIGLU_OAI_LIMIT)
    return x * torch.sigmoid(SWIGLU_OAI_ALPHA * x)


ACTIVATIONS = {
    "swigluoai": swiglu_oai_gate,
    "silu": F.silu, "swish": F.silu, "relu": F.relu, "gelu": F.gelu,
    "relu2": lambda x: F.relu(x).square(),  # squared ReLU (So et al. 2021, Primer; Nemotron-H)
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),  # transformers' FastGELUActivation
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


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
        if act is swiglu_oai_gate:  # its up half is clamped and offset by one
            return act(gate) * (up.clamp(-SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT) + 1)
        return act(gate) * up
    return act(up)


class MoE(nn.Module):
    """Top-k routed experts (softmax over the router, the k kept renormalised, as Mixtral
    and Qwen3-MoE do) plus optional shared experts and a dense MLP beside them (Gemma-4).
    With a latent size the experts run in a narrower space: the tokens are projected down
    before the experts and back up after them (Nemotron-3's latent MoE, fc1/fc2_latent_proj);
    the router, the shared experts and the dense MLP read the hidden state. Only the experts
    some token picked run, so weight reads follow the distinct experts, as in the ledger.

    The experts' weights are stacked, (experts, out, in), so that on a GPU one grouped GEMM
    per projection runs every expert's tokens without the host learning how many each got
    (``torch._grouped_mm``; its empty groups read no weights), and the step can be replayed
    as a CUDA graph. Elsewhere, or where that kernel does not run, the experts run one by
    one after the host reads the counts back."""

    def __init__(self, hidden: int, mlp: layers.MoE, act: str) -> None:
        super().__init__()
        self.top_k, self.width = mlp.top_k, mlp.width
        self.gated, self.act = mlp.gated, ACTIVATIONS[act]
        inner = mlp.latent_size or hidden
        self.router = nn.Linear(hidden, mlp.experts, bias=False)
        up_rows = 2 * self.width if self.gated else self.width
        self.w_up = nn.Parameter(torch.empty(mlp.experts, up_rows, inner))
        self.w_down = nn.Parameter(torch.empty(mlp.experts, inner, self.width))
        self.shared = (MLP(hidden, mlp.shared_width, gated=mlp.gated, act=act)
                       if mlp.shared_width else None)
        self.dense = (MLP(hidden, mlp.dense_width, gated=mlp.gated, act=act)
                      if mlp.dense_width else None)
        self.latent_down = nn.Linear(hidden, inner, bias=False) if mlp.latent_size else None
        self.latent_up = nn.Linear(inner, hidden, bias=False) if mlp.latent_size else None
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
        inner = self.latent_down(flat) if self.latent_down is not None else flat
        routed = (self._grouped(inner[tokens], counts) if self.grouped else
                  self._one_by_one(inner[tokens], counts.tolist()))
        out = torch.zeros_like(inner).index_add_(0, tokens,
                                                 routed * weights.flatten()[order, None])
        if self.latent_up is not None:
            out = self.latent_up(out)
        for beside in (self.shared, self.dense):
            if beside is not None:
                out = out + beside(flat)
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


def build_mixer(spec: ModelSpec, mixer: layers.Mixer) -> nn.Module:
    """The reference module of one token mixer kind."""
    h, eps = spec.hidden_size, spec.norm_eps
    if isinstance(mixer, layers.Attention):
        return Attention(h, mixer, bias=spec.model_type in QKV_BIAS_MODEL_TYPES)
    if isinstance(mixer, layers.LatentAttention):
        return LatentAttention(h, mixer, eps)
    if isinstance(mixer, layers.Mamba2):
        return Mamba2Mixer(h, mixer, eps)
    if isinstance(mixer, layers.LinearAttention):
        return DeltaNetMixer(h, mixer, eps)
    if isinstance(mixer, layers.ShortConv):
        return ShortConvMixer(h, mixer)
    if isinstance(mixer, layers.CrossAttention):
        return CrossAttention(h, mixer, eps)
    if isinstance(mixer, layers.LinearMixer):
        return LinearMap(h)
    raise InputError(f"model '{spec.name}': the reference transformer has no module for a "
                     f"{type(mixer).__name__} mixer.")


def build_mlp(spec: ModelSpec, mlp: MLPSpec) -> nn.Module:
    """The reference module of one MLP kind."""
    h, act = spec.hidden_size, spec.hidden_act
    if isinstance(mlp, layers.DenseMLP):
        return MLP(h, mlp.width, gated=mlp.gated, act=act)
    if isinstance(mlp, layers.MoE):
        return MoE(h, mlp, act)
    if isinstance(mlp, layers.LinearMLP):
        return LinearMap(h)
    raise InputError(f"model '{spec.name}': the reference transformer has no module for a "
                     f"{type(mlp).__name__} MLP.")


class Block(nn.Module):
    """One decoder layer: pre-norm mixer and pre-norm MLP, each with its residual; a part
    the layer lacks (a skipped block, a Mamba-only layer) is absent, norm and all."""

    def __init__(self, spec: ModelSpec, layer: layers.Layer) -> None:
        super().__init__()
        h, eps = spec.hidden_size, spec.norm_eps
        self.attn_norm = RMSNorm(h, eps) if layer.mixer is not None else None
        self.attn = build_mixer(spec, layer.mixer) if layer.mixer is not None else None
        self.mlp_norm = RMSNorm(h, eps) if layer.mlp is not None else None
        self.mlp = build_mlp(spec, layer.mlp) if layer.mlp is not None else None

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        if self.attn is not None:
            x = x + self.attn(self.attn_norm(x), start, rope)
        if self.mlp is not None:
            x = x + self.mlp(self.mlp_norm(x))
        return x


def check_buildable(spec: ModelSpec) -> None:
    """Refuse, in one line naming the layer kind, a spec no reference module can run."""
    if spec.hidden_act not in ACTIVATIONS:
        raise InputError(f"model '{spec.name}': activation '{spec.hidden_act}' is not one "
                         f"of {', '.join(ACTIVATIONS)}.")
    for group in spec.layer_groups:
        reason = _unbuildable(group.layer.mixer)
        if reason:
            raise InputError(f"model '{spec.name}': the reference transformer cannot build its "
                             f"{group.label} layers: {reason}.")


def _unbuildable(mixer: layers.Mixer | None) -> str:
    """Why a mixer's geometry has no reference form, or ''."""
    if isinstance(mixer, layers.CompressedAttention):
        return "DeepSeek-V4's compressed attention (CSA/HCA) has no reference module yet"
    if isinstance(mixer, layers.LinearAttention) and mixer.variant == "lightning":
        return "lightning attention has no reference module"
    if isinstance(mixer, layers.Attention) and mixer.q_rank:
        return "a low-rank query (q_rank) has no reference module"
    sizes = {layers.Mamba2: ("heads", "head_dim", "state_size", "groups", "conv_kernel"),
             layers.LinearAttention: ("key_heads", "value_heads", "key_head_dim",
                                      "value_head_dim", "conv_kernel"),
             layers.ShortConv: ("width", "kernel"),
             layers.CrossAttention: ("heads", "kv_heads", "head_dim")}
    if isinstance(mixer, layers.LatentAttention) and mixer.index_topk:
        sizes[layers.LatentAttention] = ("index_heads", "index_head_dim")
    for kind, fields in sizes.items():
        zero = [f for f in fields if isinstance(mixer, kind) and getattr(mixer, f) < 1]
        if zero:
            return f"{', '.join(zero)} must be at least 1"
    rope = {layers.Attention: "head_dim", layers.LatentAttention: "qk_rope_head_dim"}
    for kind, field in rope.items():
        if isinstance(mixer, kind) and getattr(mixer, field) % 2:
            return f"RoPE rotates pairs of dimensions, and {field} {getattr(mixer, field)} is odd"
    if isinstance(mixer, layers.LatentAttention) and mixer.index_topk and \
            mixer.index_head_dim < mixer.qk_rope_head_dim:
        return (f"the indexer's head size {mixer.index_head_dim} is narrower than its rope "
                f"part {mixer.qk_rope_head_dim}")
    if isinstance(mixer, layers.Mamba2) and (mixer.heads % mixer.groups
                                             or mixer.inner % mixer.groups):
        return f"{mixer.heads} heads do not split into {mixer.groups} B/C groups"
    if isinstance(mixer, layers.LinearAttention):
        if mixer.variant == "kda" and mixer.key_heads != mixer.value_heads:
            return (f"Kimi Delta Attention has one head count for q, k and v, not "
                    f"{mixer.key_heads} key and {mixer.value_heads} value heads")
        if mixer.value_heads % mixer.key_heads:
            return (f"{mixer.value_heads} value heads are not a multiple of "
                    f"{mixer.key_heads} key heads")
    return ""


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        check_buildable(spec)
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec, layer) for layer in spec.layers)
        self.norm = RMSNorm(spec.hidden_size, spec.norm_eps)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self.rope: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.max_tokens = 0

    def mixers(self) -> list[nn.Module]:
        return [layer.attn for layer in self.layers if layer.attn is not None]

    def setup_caches(self, batch: int, max_tokens: int) -> None:
        """Allocate every layer's cache for ``batch`` sequences of ``max_tokens`` each (a
        window's worth for sliding and chunked layers, a fixed state for recurrent ones),
        and the RoPE tables of every rotary width the layers use."""
        param = self.embed.weight
        for mixer in self.mixers():
            mixer.make_cache(batch, max_tokens, param.dtype, param.device)
        dims = {m.rope_dim for m in self.mixers() if hasattr(m, "rope_dim")}
        self.rope = {}
        for dim in sorted(dims):
            cos, sin = rope_tables(dim, max_tokens, self.spec.rope_theta)
            self.rope[dim] = (cos.to(param), sin.to(param))
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
        end = start + new_tokens
        rope = {dim: (cos[start:end], sin[start:end]) for dim, (cos, sin) in self.rope.items()}
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start, rope)
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
