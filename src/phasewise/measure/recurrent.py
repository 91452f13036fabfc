"""Reference token mixers that hold a fixed state per sequence instead of a KV cache: Mamba-2,
Gated DeltaNet, Kimi Delta Attention and LFM2's short convolution.

Each runs its recurrence token by token (the naive recurrent form, not the chunked scan a
production kernel uses): these are references to time and to count, and a token loop is the
form whose every step is plain to read. Each holds, per sequence, exactly the state
``ledger.layers.state_bytes_per_sequence`` counts (the conv's last kernel−1 inputs and the
recurrent matrix), which does not grow with context; and exactly the parameters
``ledger.layers.mixer_params`` counts. A step that starts at position 0 starts from a zero
state; any later step continues from the state the previous one left.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from phasewise.specs.model import LinearAttention, Mamba2, ShortConv


def filled(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A state buffer written once, not left as fresh pages (which map to one shared zero
    page and would read at cache speed)."""
    return torch.full(shape, 0.01, dtype=dtype, device=device)


class CausalConv(nn.Module):
    """Depthwise causal 1-D convolution over ``channels`` with ``kernel`` taps, carrying the
    last kernel−1 inputs of each sequence between steps (mamba_ssm's causal_conv1d and its
    ``conv_state``; transformers' Mamba2Mixer.torch_forward)."""

    def __init__(self, channels: int, kernel: int, *, bias: bool) -> None:
        super().__init__()
        self.channels, self.kernel = channels, kernel
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel))
        self.bias = nn.Parameter(torch.empty(channels)) if bias else None
        self.register_buffer("state", None, persistent=False)

    def make_state(self, batch: int, dtype: torch.dtype, device: torch.device | str) -> None:
        self.state = filled((batch, self.channels, self.kernel - 1), dtype, device)

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x (batch, tokens, channels) → (batch, tokens, channels)."""
        assert self.state is not None, "call setup_caches() before running the model"
        batch, tokens, _ = x.shape
        past = self.state[:batch]
        if start == 0:
            past = torch.zeros_like(past)
        window = torch.cat((past, x.transpose(1, 2)), dim=-1)  # (batch, channels, k−1+tokens)
        if self.kernel > 1:
            self.state[:batch] = window[..., -(self.kernel - 1):]
        out = F.conv1d(window, self.weight, self.bias, groups=self.channels)
        return out.transpose(1, 2)


class GatedRMSNorm(nn.Module):
    """RMSNorm of x·silu(z) over groups of ``group`` channels (mamba_ssm's RMSNormGated with
    norm_before_gate=False, as Mamba-2 and Nemotron-H use), or, with ``gate_after``, RMSNorm
    of x then times act(z) (Qwen3-Next's Qwen3NextRMSNormGated, silu; fla's FusedRMSNormGated
    in Kimi Delta Attention, sigmoid)."""

    def __init__(self, width: int, group: int, eps: float, *, gate_after: bool = False,
                 act: str = "silu") -> None:
        super().__init__()
        self.group, self.eps, self.gate_after = group, eps, gate_after
        self.act = torch.sigmoid if act == "sigmoid" else F.silu
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        if not self.gate_after:
            x = x * self.act(z)
        grouped = x.reshape(*shape[:-1], -1, self.group)
        normed = F.rms_norm(grouped, (self.group,), eps=self.eps).reshape(shape)
        if self.weight.shape[0] == shape[-1]:
            normed = normed * self.weight
        else:  # one weight per head dimension, shared by every head
            normed = (normed.reshape(*shape[:-1], -1, self.weight.shape[0]) * self.weight
                      ).reshape(shape)
        return normed * self.act(z) if self.gate_after else normed


class Mamba2Mixer(nn.Module):
    """Mamba-2 (Dao & Gu 2024, "Transformers are SSMs": the SSM recurrence of §3 in the
    Mamba-2 block of §7; transformers' Mamba2Mixer.torch_forward and NemotronHMamba2Mixer).
    in_proj gives (z, xBC, dt); a causal conv and SiLU over xBC; per head h and token t,
    with Δ = softplus(dt + dt_bias) and A = −exp(A_log),
    the state S (head_dim × state) becomes exp(Δ·A)·S + Δ·x ⊗ B and the output is S·C + D·x;
    a gated RMSNorm with z per group; out_proj."""

    def __init__(self, hidden: int, mixer: Mamba2, eps: float) -> None:
        super().__init__()
        self.heads, self.head_dim, self.state_size = mixer.heads, mixer.head_dim, mixer.state_size
        self.groups, self.inner = mixer.groups, mixer.inner
        bc = 2 * mixer.groups * mixer.state_size
        self.in_proj = nn.Linear(hidden, 2 * self.inner + bc + self.heads, bias=False)
        self.conv = CausalConv(self.inner + bc, mixer.conv_kernel, bias=True)
        self.dt_bias = nn.Parameter(torch.empty(self.heads))
        self.A_log = nn.Parameter(torch.empty(self.heads))
        self.D = nn.Parameter(torch.empty(self.heads))
        self.norm = GatedRMSNorm(self.inner, self.inner // self.groups, eps)
        self.out_proj = nn.Linear(self.inner, hidden, bias=False)
        self.register_buffer("ssm_state", None, persistent=False)

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        self.conv.make_state(batch, dtype, device)
        self.ssm_state = filled((batch, self.heads, self.head_dim, self.state_size), dtype, device)

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        batch, tokens, _ = x.shape
        gn = self.groups * self.state_size
        z, xbc, dt = self.in_proj(x).split((self.inner, self.inner + 2 * gn, self.heads), dim=-1)
        xbc = F.silu(self.conv(xbc, start))
        xs, b, c = xbc.split((self.inner, gn, gn), dim=-1)
        xs = xs.view(batch, tokens, self.heads, self.head_dim)
        per_group = self.heads // self.groups  # heads sharing one B and C
        b = b.view(batch, tokens, self.groups, self.state_size).repeat_interleave(per_group, 2)
        c = c.view(batch, tokens, self.groups, self.state_size).repeat_interleave(per_group, 2)
        delta = F.softplus(dt + self.dt_bias)  # (batch, tokens, heads)
        decay = torch.exp(delta * -torch.exp(self.A_log))
        y = self._scan(xs, b, c, delta, decay, start)
        y = y + self.D[:, None] * xs
        return self.out_proj(self.norm(y.reshape(batch, tokens, self.inner), z))

    def _scan(self, xs: torch.Tensor, b: torch.Tensor, c: torch.Tensor, delta: torch.Tensor,
              decay: torch.Tensor, start: int) -> torch.Tensor:
        """The recurrence, one token at a time; returns (batch, tokens, heads, head_dim)."""
        assert self.ssm_state is not None, "call setup_caches() before running the model"
        batch, tokens = xs.shape[:2]
        state = self.ssm_state[:batch]
        if start == 0:
            state = torch.zeros_like(state)
        outs = []
        for t in range(tokens):
            update = (delta[:, t, :, None] * xs[:, t])[..., None] * b[:, t, :, None, :]
            state = state * decay[:, t, :, None, None] + update  # (batch, heads, p, n)
            outs.append(torch.einsum("bhpn,bhn->bhp", state, c[:, t]))
        self.ssm_state[:batch] = state
        return torch.stack(outs, dim=1)


def delta_rule_scan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                    log_decay: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """The gated delta rule (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks", eq. 10),
    token by token as transformers' torch_recurrent_gated_delta_rule: S ← exp(g)·S;
    S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq. q, k (batch, tokens, heads, d_k), v (…, d_v), beta
    (batch, tokens, heads), log_decay g per head (batch, tokens, heads) or, for Kimi Delta
    Attention's per-channel decay, (batch, tokens, heads, d_k); state (batch, heads, d_k, d_v).
    Returns the outputs (batch, tokens, heads, d_v) and the final state."""
    outs = []
    for t in range(q.shape[1]):
        g = log_decay[:, t].exp()
        state = state * (g[..., None] if g.dim() == 3 else g[..., None, None])
        remembered = torch.einsum("bhkv,bhk->bhv", state, k[:, t])
        delta = (v[:, t] - remembered) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outs, dim=1), state


class DeltaNetMixer(nn.Module):
    """Gated DeltaNet as Qwen3-Next and Qwen3.5 run it (transformers' Qwen3NextGatedDeltaNet):
    one in_proj to (q, k, v, z, b, a), a causal conv and SiLU over q, k, v, L2-normalised q and
    k (each key head shared by value_heads/key_heads value heads), β = sigmoid(b),
    g = −exp(A_log)·softplus(a + dt_bias), the gated delta rule, an RMSNorm per head gated by
    silu(z), out_proj.

    Kimi Delta Attention (``variant="kda"``; Kimi Linear report, 2025; fla's and SGLang's
    KimiDeltaAttention): q, k, v projections, a per-channel decay from a low-rank projection
    (f_a, f_b) through −exp(A_log)·softplus(· + dt_bias), β per head from b_proj, the same
    delta rule, and an output gate from a second low-rank projection (g_a, g_b) through a
    sigmoid after the RMSNorm."""

    def __init__(self, hidden: int, mixer: LinearAttention, eps: float) -> None:
        super().__init__()
        self.kda = mixer.variant == "kda"
        self.nk, self.nv = mixer.key_heads, mixer.value_heads
        self.dk, self.dv = mixer.key_head_dim, mixer.value_head_dim
        key_width, value_width = self.nk * self.dk, self.nv * self.dv
        conv_channels = 2 * key_width + value_width
        if self.kda:
            self.in_proj = nn.Linear(hidden, conv_channels, bias=False)  # q, k, v
            self.f_a = nn.Linear(hidden, self.dv, bias=False)
            self.f_b = nn.Linear(self.dv, key_width, bias=False)
            self.g_a = nn.Linear(hidden, self.dv, bias=False)
            self.g_b = nn.Linear(self.dv, value_width, bias=False)
            self.b_proj = nn.Linear(hidden, self.nv, bias=False)
            self.dt_bias = nn.Parameter(torch.empty(key_width))
        else:  # q, k, v, z, then b and a per value head
            self.in_proj = nn.Linear(hidden, conv_channels + value_width + 2 * self.nv, bias=False)
            self.dt_bias = nn.Parameter(torch.empty(self.nv))
        self.A_log = nn.Parameter(torch.empty(self.nv))
        self.conv = CausalConv(conv_channels, mixer.conv_kernel, bias=False)
        self.norm = GatedRMSNorm(self.dv, self.dv, eps, gate_after=True,
                                 act="sigmoid" if self.kda else "silu")
        self.out_proj = nn.Linear(value_width, hidden, bias=False)
        self.register_buffer("recurrent_state", None, persistent=False)

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        self.conv.make_state(batch, dtype, device)
        self.recurrent_state = filled((batch, self.nv, self.dk, self.dv), dtype, device)

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        batch, tokens, _ = x.shape
        key_width, value_width = self.nk * self.dk, self.nv * self.dv
        projected = self.in_proj(x)
        qkv, rest = projected.split((2 * key_width + value_width,
                                     projected.shape[-1] - 2 * key_width - value_width), dim=-1)
        q, k, v = F.silu(self.conv(qkv, start)).split((key_width, key_width, value_width), dim=-1)
        q = F.normalize(q.view(batch, tokens, self.nk, self.dk), dim=-1) * self.dk ** -0.5
        k = F.normalize(k.view(batch, tokens, self.nk, self.dk), dim=-1)
        v = v.view(batch, tokens, self.nv, self.dv)
        if self.kda:
            rate = self.f_b(self.f_a(x)).view(batch, tokens, self.nk, self.dk)
            log_decay = -self.A_log.exp()[:, None] * F.softplus(rate + self.dt_bias.view(
                self.nk, self.dk))
            beta = torch.sigmoid(self.b_proj(x))
            gate = self.g_b(self.g_a(x))
        else:
            gate, b, a = rest.split((value_width, self.nv, self.nv), dim=-1)
            beta = torch.sigmoid(b)
            log_decay = -self.A_log.exp() * F.softplus(a + self.dt_bias)
            q, k = (t.repeat_interleave(self.nv // self.nk, dim=2) for t in (q, k))
        assert self.recurrent_state is not None, "call setup_caches() before running the model"
        state = self.recurrent_state[:batch]
        if start == 0:
            state = torch.zeros_like(state)
        out, state = delta_rule_scan(q, k, v, beta, log_decay, state)
        self.recurrent_state[:batch] = state
        out = self.norm(out.reshape(batch, tokens, value_width), gate)
        return self.out_proj(out)


class ShortConvMixer(nn.Module):
    """LFM2's gated short convolution (transformers' Lfm2ShortConv): in_proj to (B, C, x),
    a depthwise causal conv over B·x, times C, out_proj."""

    def __init__(self, hidden: int, mixer: ShortConv) -> None:
        super().__init__()
        self.width = mixer.width
        self.in_proj = nn.Linear(hidden, 3 * mixer.width, bias=False)
        self.conv = CausalConv(mixer.width, mixer.kernel, bias=False)
        self.out_proj = nn.Linear(mixer.width, hidden, bias=False)

    def make_cache(self, batch: int, max_tokens: int, dtype: torch.dtype,
                   device: torch.device | str) -> None:
        self.conv.make_state(batch, dtype, device)

    def forward(self, x: torch.Tensor, start: int, rope: dict) -> torch.Tensor:
        b, c, xs = self.in_proj(x).split((self.width,) * 3, dim=-1)
        return self.out_proj(c * self.conv(b * xs, start))
