"""What the planner searches over, and what it must meet.

The traffic (request classes, and how the simulator draws requests), the load, the SLO
targets, and the search space: devices, parallelism, formats, batch limits, pool layouts
and speculation. Everything here is a frozen description; ``pool_shapes`` enumerates the
replica shapes (device × parallelism × formats × engine) the screen prices.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from phasewise.errors import InputError
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision

# Batch limits and chunk sizes searched by default: vLLM's max_num_seqs default is 256 and
# its max_num_batched_tokens with chunked prefill 8192; Sarathi-Serve (Agrawal et al.,
# OSDI 2024) runs 512 or 2048 for tighter TPOT, so 2048 is searched beside 8192.
DEFAULT_MAX_SEQS = (32, 64, 128, 256)
DEFAULT_CHUNK_TOKENS = (2048, 8192)
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_KV_DTYPES = ("bf16", "fp8")
# Replicas above the smallest count that meets the SLOs on the analytic model, so the
# simulator can see how much headroom the tail needs.
DEFAULT_EXTRA_REPLICAS = 2
LAYOUTS = ("aggregated", "disaggregated")


@dataclass(frozen=True, slots=True)
class RequestClass:
    """Requests of one prompt and answer length, ``share`` of the traffic."""

    isl: int
    osl: int
    share: float


@dataclass(frozen=True, slots=True)
class Traffic:
    """The workload. ``classes`` feed the analytic screen (the mean lengths of a
    distribution or a trace, or each class of a mix); the simulator draws requests from
    ``isl``/``osl`` (distribution texts as ``phasewise simulate`` takes them), from
    ``mix`` (classes drawn by share) or replays ``trace``. ``longest_tokens`` is the
    longest prompt plus answer any request can have."""

    classes: tuple[RequestClass, ...]
    longest_tokens: int
    isl: str | None = None
    osl: str | None = None
    mix: tuple[RequestClass, ...] | None = None
    trace: str | None = None
    label: str = ""

    @property
    def mean_isl(self) -> float:
        return sum(c.share * c.isl for c in self.classes)

    @property
    def mean_osl(self) -> float:
        return sum(c.share * c.osl for c in self.classes)

    @property
    def decode_context(self) -> int:
        """Mean cached tokens of a sequence in the decode batch, each class weighted by the
        decode steps it spends there: Σ sᵢ(oᵢ−1)(iᵢ + oᵢ/2) / Σ sᵢ(oᵢ−1)."""
        steps = sum(c.share * max(c.osl - 1, 1) for c in self.classes)
        held = sum(c.share * max(c.osl - 1, 1) * (c.isl + c.osl / 2) for c in self.classes)
        return max(1, round(held / steps))


@dataclass(frozen=True, slots=True)
class Load:
    """The target load: ``rate`` requests/s (open loop, Poisson), ``users`` concurrent
    clients (closed loop, no think time) or ``tokens`` output tokens/s (a rate of
    tokens ÷ mean OSL requests/s)."""

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in ("rate", "users", "tokens"):
            raise InputError(f"load kind '{self.kind}': give --rate, --users or --token-rate.")
        if not (self.value > 0 and math.isfinite(self.value)):
            raise InputError(f"--{'token-rate' if self.kind == 'tokens' else self.kind} "
                             f"{self.value}: give a positive number.")

    def request_rate(self, traffic: Traffic) -> float | None:
        """Requests per second for an open loop; None for a closed loop."""
        if self.kind == "rate":
            return self.value
        if self.kind == "tokens":
            return self.value / traffic.mean_osl
        return None

    @property
    def users(self) -> int | None:
        return int(self.value) if self.kind == "users" else None


@dataclass(frozen=True, slots=True)
class Target:
    """``metric`` (ttft, tpot, itl, e2e) at the ``percentile`` must be at most ``limit_s``."""

    metric: str
    limit_s: float
    percentile: float = 90.0

    def __post_init__(self) -> None:
        if not (self.limit_s > 0 and math.isfinite(self.limit_s)):
            raise InputError(f"--{self.metric} {self.limit_s}: give a positive duration.")
        if not 0 < self.percentile <= 100:
            raise InputError(f"--{self.metric} percentile {self.percentile}: give a share in "
                             "(0, 100], e.g. 90 or p99.")

    @property
    def label(self) -> str:
        return f"{self.metric.upper()} p{self.percentile:g} ≤ {self.limit_s * 1e3:,.4g} ms"


@dataclass(frozen=True, slots=True)
class Speculation:
    """Speculative decoding as searched: γ draft ``tokens`` a round accepted each with
    probability ``accept``, drafted by a head costing ``head_fraction`` of the target's
    layers (the model's MTP module, or an EAGLE-style one-layer head) or by ``draft``."""

    tokens: int
    accept: float
    head_fraction: float | None = None
    draft: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Every knob the planner turns. ``weight_dtypes`` None: the checkpoint's format and
    fp8 where the device multiplies in fp8. A device is searched with the KV formats of
    ``kv_dtypes`` it can run."""

    hardware: tuple[HardwareSpec, ...]
    tp: tuple[int, ...] = DEFAULT_TP
    pp: tuple[int, ...] = (1, 2)
    ep: tuple[int, ...] | None = None  # None: 1, and for MoE models every degree up to 8
    weight_dtypes: tuple[str, ...] | None = None
    kv_dtypes: tuple[str, ...] = DEFAULT_KV_DTYPES
    max_seqs: tuple[int, ...] = DEFAULT_MAX_SEQS
    chunk_tokens: tuple[int, ...] = DEFAULT_CHUNK_TOKENS
    layouts: tuple[str, ...] = LAYOUTS
    mixed_pools: bool = True  # disaggregated pools may use different devices
    speculation: tuple[bool, ...] = (False, True)
    extra_replicas: int = DEFAULT_EXTRA_REPLICAS
    max_devices: int | None = None
    max_usd_per_hour: float | None = None
    engines: tuple[str | None, ...] = (None,)
    cost: str = "calibrated"
    link: str = "infiniband-ndr-400"
    spec_tokens: int | None = None  # None: the default of the draft kind
    spec_accept: float | None = None  # None: the documented default of the draft kind
    draft: str | None = None  # a draft model; None: the model's MTP head or a one-layer head
    task: str = "chat"  # the task kind whose published acceptance is the default (--task)

    def __post_init__(self) -> None:
        if not self.hardware:
            raise InputError("no candidate devices: give --hardware, or --price for devices "
                             "that have no catalog price.")
        for layout in self.layouts:
            if layout not in LAYOUTS:
                raise InputError(f"--layouts {layout}: choose from {', '.join(LAYOUTS)}.")
        for name in ("tp", "pp", "max_seqs", "chunk_tokens"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise InputError(f"--{name.replace('_', '-')}: give whole numbers of at least 1.")


@dataclass(frozen=True, slots=True)
class PoolShape:
    """One replica's shape: the device, the split of the model over its devices, the
    number formats and the engine whose constants price its steps."""

    device: HardwareSpec
    parallelism: Parallelism
    precision: Precision
    engine: str | None = None

    @property
    def devices(self) -> int:
        return self.parallelism.devices

    @property
    def usd_per_hour(self) -> float:
        return (self.device.price_usd_per_hour or 0.0) * self.devices

    @property
    def label(self) -> str:
        p = self.parallelism
        parts = [f"TP{p.tp}"] + ([f"PP{p.pp}"] if p.pp > 1 else []) + \
            ([f"EP{p.ep}"] if p.ep > 1 else []) + \
            ([f"DP{p.attention_dp}"] if p.attention_dp > 1 else [])
        fmt = self.precision
        engine = f" {self.engine}" if self.engine else ""
        return f"{self.device.name} {'·'.join(parts)} w{fmt.weights}/kv{fmt.kv_cache}{engine}"


def weight_formats(device: HardwareSpec, checkpoint: str | Precision,
                   asked: tuple[str, ...] | None) -> list[Precision]:
    """Weight × activation formats to search on ``device``: the asked ones it can run, or
    the checkpoint's formats (a format per module class, as its quantization_config gives
    them; 16-bit math in the device's own 16-bit format) and fp8 where the device multiplies
    in fp8 (weights and activations both fp8: W8A8)."""
    sixteen = "bf16" if device.supports("bf16") else "fp16"
    own = checkpoint if isinstance(checkpoint, Precision) else None
    names = list(asked) if asked else [own.weights if own else checkpoint, "fp8"]
    out: list[Precision] = []
    for name in dict.fromkeys(names):
        if own is not None and name == own.weights and own.module_weights:
            out.append(dataclasses.replace(own, activations=sixteen))
        elif name in ("fp8", "int8", "fp4", "nvfp4"):
            math_name = "fp4" if name in ("fp4", "nvfp4") else name
            if math_name in device.peak_flops_per_s:
                out.append(Precision(name, name if name != "nvfp4" else "fp4"))
        elif name in ("bf16", "fp16"):
            out.append(Precision(sixteen, sixteen))
        else:  # weight-only formats (int4, GGUF types) dequantize into 16-bit math
            out.append(Precision(name, sixteen))
    return out


def kv_formats(device: HardwareSpec, asked: tuple[str, ...], activations: str) -> list[str]:
    """KV formats for ``device``: fp8 only where the device has fp8 math (the attention
    kernels read fp8 KV natively there); 16-bit KV in the activations' format."""
    out = []
    for name in dict.fromkeys(asked):
        if name == "fp8" and "fp8" not in device.peak_flops_per_s:
            continue
        out.append(activations if name in ("bf16", "fp16") and activations in ("bf16", "fp16")
                   else ("bf16" if name in ("bf16", "fp16") else name))
    return out


def parallelisms(model: ModelSpec, device: HardwareSpec, space: SearchSpace) -> list[Parallelism]:
    """TP × EP × PP splits of one replica that the model's heads allow and the device's
    scale-up link joins (TP and EP stay inside it; PP may cross machines)."""
    domain = device.interconnect.max_devices if device.interconnect else 1
    eps = space.ep if space.ep is not None else (
        (1, 2, 4, 8) if model.is_moe else (1,))
    out = []
    for pp in space.pp:
        if pp > model.num_layers:
            continue
        for tp in space.tp:
            if model.num_heads % tp or not (model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0):
                continue
            for ep in eps:
                if ep > 1 and (not model.is_moe or model.num_experts % ep):
                    continue
                if max(tp, ep) % min(tp, ep) or max(tp, ep) > domain:
                    continue
                out.append(Parallelism(tp, pp, ep))
    return out
