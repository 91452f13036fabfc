"""The expected time: each kernel an engine runs priced with fitted efficiencies and overheads.

The engine's lowering (``phasewise.lower``) turns each ledger operator into a ``Kernel``:
the FLOPs it computes (tile padding and masked scores included), the bytes it moves (every
pass over the weights), bytes moved by kernels of their own, launches, collective rounds,
the unit it runs on and its rate factors. This module prices a kernel and knows no engine
by name. For one kernel of ``calls`` calls (DESIGN.md, cost models):

    compute_s = FLOPs / (peak · peak_factor · gemm_fraction · e)
        e = gemm_efficiency · I / (I + gemm_intensity_half · ridge) · (dequant_compute if
            block-quantized), I the GEMM's FLOPs per weight byte and ridge the ridge point
            the device reaches (peak · peak_factor · gemm_fraction ÷ (bandwidth ·
            bandwidth_fraction)), for GEMMs on the matrix units; attention_efficiency for
            fused attention, gemm_efficiency for unfused attention (its matmuls are
            GEMMs), 1 for elementwise work
    compute_s = FLOPs · (matvec_alu_ops · alu_share if block-quantized, else 1)
                / (vector peak · vector_rate)
            for a GEMM on the vector ALUs (matrix-vector kernels); alu_share is the share of
            the per-token work left once a pass's unpacking is shared by its tokens
    memory_s  = (bytes + calls · bytes_half) / (bandwidth · bandwidth_fraction
                 · bandwidth_efficiency · (dequant_bandwidth if block-quantized weights)
                 · (attention_bandwidth for attention))
        i.e. bandwidth ramps as s / (s + bytes_half) with s the bytes per call; attention
        streams the KV cache (decode) at its own share of the weight-streaming rate
    serial_s  = extra bytes / (bandwidth · bandwidth_fraction · bandwidth_efficiency)
    time_s    = max(compute_s, memory_s) + serial_s + launches · kernel_overhead_s
    collectives: bytes / (link bandwidth · link_efficiency)
                 + hops · link latency · link_latency_factor + launches · kernel_overhead_s
    step      = Σ kernels + step_overhead_s
                + parallel_step_overhead_s if the step runs on more than one device (the
                  engine's processes synchronise: the step's inputs go to every worker)

The GEMM's shape term sets its FLOPs per weight byte I (2m / bytes per weight for m tokens
per call; routed tokens per expert for MoE) against the ridge point the device reaches (its
best matmul rate ÷ its best streaming rate): a GEMM turns compute-bound near I = ridge, and
one well below it costs gemm_intensity_half × its weight bytes at the device's streaming
rate over the engine's GEMM efficiency, on any device, whatever its matmul ceiling, in any
weight format. ``gemm_fraction`` and ``bandwidth_fraction`` belong to the device (what its
best kernels reach), the rest to the engine. The formula is written once, in
``priced_parts``, for scalars and numpy arrays alike, so the fit prices kernels exactly as
estimates do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from phasewise.cost.base import (
    NCCL_MESSAGE_BYTES,
    PRICED_OPS_MEMO_SIZE,
    RESOLVED_MEMO_SIZE,
    IdentityMemo,
    StepTiming,
    Timing,
    hardware_for_collective,
    link_for,
    math_format_for,
    sum_timings,
)
from phasewise.cost.calibration import (
    Constants,
    ConstantSource,
    Engine,
    Profile,
    constant_sources,
    load_profile,
    resolve_engine,
    traits_for,
)
from phasewise.ledger import Ledger, Op, Step
from phasewise.lower import Kernel, Traits, lower, split_prefill
from phasewise.specs import HardwareSpec

KIND_GEMM, KIND_ATTENTION, KIND_ELEMENTWISE, KIND_COMMUNICATION = range(4)
_KINDS = {"gemm": KIND_GEMM, "attention": KIND_ATTENTION, "elementwise": KIND_ELEMENTWISE,
          "communication": KIND_COMMUNICATION}
# An intensity for a kernel that reads no weights: far above any ridge point.
NO_WEIGHTS_INTENSITY = 1e30
# One feature: a float for one kernel, a numpy column for the fit's thousands.
Column = float | np.ndarray


@dataclass(frozen=True, slots=True)
class OpFeatures:
    """What the formula needs of one kernel on one device (floats, or numpy columns)."""

    kind: Column
    flops: Column
    memory_bytes: Column
    calls: Column
    kernels: Column  # kernel launches
    weight_intensity: Column  # FLOPs per weight byte (GEMMs)
    dequantized: Column  # 1 where the GEMM dequantizes block-quantized weights as it reads them
    matvec: Column  # 1 where the GEMM runs as matrix-vector kernels on the vector ALUs
    alu_share: Column  # the share of matvec_alu_ops a matrix-vector FLOP costs per pass
    unfused: Column  # 1 for attention run as separate matmuls and soft-max (scores in memory)
    serial_bytes: Column  # bytes moved by kernels of their own before or after the main one
    peak_factor: Column  # the kernel's matmul rate over the sheet's peak (1: the sheet's)
    network_bytes: Column
    hops: Column
    peak_flops_per_s: Column
    vector_flops_per_s: Column  # the rate of the kernel's matrix-vector ALU work
    ridge_flops_per_byte: Column
    bandwidth_bytes_per_s: Column
    link_bytes_per_s: Column
    link_latency_s: Column


def kernel_features(kernel: Kernel, hardware: HardwareSpec, math_format: str) -> OpFeatures:
    """The formula's inputs for one kernel: what the kernel does, at the device's rates."""
    op = kernel.op
    kind = _KINDS[op.kind]
    link_bw, link_latency = 1.0, 0.0
    if kind == KIND_COMMUNICATION:
        link = link_for(hardware)
        link_bw, link_latency = link.bandwidth_bytes_per_s, link.latency_s
    peak = hardware.vector_flops if kind == KIND_ELEMENTWISE else hardware.peak_flops(math_format)
    bandwidth = hardware.memory_bandwidth_bytes_per_s
    ridge = hardware.peak_flops(math_format) / bandwidth if kind == KIND_GEMM else 1.0
    intensity = kernel.flops / kernel.weight_bytes if kernel.weight_bytes else \
        NO_WEIGHTS_INTENSITY
    return OpFeatures(kind, kernel.flops, kernel.memory_bytes, op.calls, kernel.launches,
                      intensity, 1.0 if kernel.dequantized else 0.0,
                      1.0 if kernel.unit == "vector" else 0.0, kernel.alu_share,
                      1.0 if kernel.unit == "attention-unfused" else 0.0,
                      kernel.extra_bytes, kernel.peak_factor, op.network, kernel.hops, peak,
                      hardware.vector_flops * kernel.vector_rate, ridge, bandwidth, link_bw,
                      link_latency)


def op_features(op: Op, hardware: HardwareSpec, math_format: str,
                traits: Traits = Traits()) -> OpFeatures:
    """The formula's inputs for ``op`` as the engine of ``traits`` lowers it."""
    return kernel_features(lower(op, hardware, math_format, traits), hardware, math_format)


class Parts(NamedTuple):
    """An operator's time by cause; it takes max(compute, memory) + serial + network +
    overhead seconds (``time``)."""

    compute_s: Any
    memory_s: Any
    serial_s: Any
    network_s: Any
    overhead_s: Any

    def time(self, maximum: Callable = max) -> Any:
        return maximum(self.compute_s, self.memory_s) + self.serial_s + self.network_s + \
            self.overhead_s


def priced_parts(f: OpFeatures, c: Any, *,
                 equals: Callable = lambda a, b: 1.0 if a == b else 0.0) -> Parts:
    """An operator's parts; ``c`` holds the constants (a ``Constants`` or columns of them).
    Written with arithmetic only, so the same lines price one operator or a numpy column
    of thousands."""
    gemm, attention = equals(f.kind, KIND_GEMM), equals(f.kind, KIND_ATTENTION)
    elementwise, network = equals(f.kind, KIND_ELEMENTWISE), equals(f.kind, KIND_COMMUNICATION)
    # The half point sits at the ridge the device reaches (its best matmul rate, at the
    # engine's accumulate rate, over its best streaming): below it a GEMM costs
    # gemm_intensity_half x its weight bytes at that streaming rate, whatever the matmul rate.
    ridge = f.ridge_flops_per_byte * f.peak_factor * c.gemm_fraction / c.bandwidth_fraction
    shape = f.weight_intensity / (f.weight_intensity + c.gemm_intensity_half * ridge)
    dequant_compute = 1.0 + f.dequantized * (c.dequant_compute - 1.0)
    attention_rate = f.unfused * c.gemm_efficiency + (1.0 - f.unfused) * c.attention_efficiency
    # A matrix-vector kernel runs on the vector ALUs: its FLOPs times the operations each
    # costs (dequantizing included) at the vector rate, on the scale of the matmul peak.
    alu_ops = 1.0 + f.dequantized * (c.matvec_alu_ops * f.alu_share - 1.0)
    vector_rate = f.vector_flops_per_s / (f.peak_flops_per_s * f.peak_factor * alu_ops)
    efficiency = (gemm * (1.0 - f.matvec) * c.gemm_efficiency * shape * dequant_compute
                  * c.gemm_fraction + gemm * f.matvec * vector_rate
                  + attention * attention_rate * c.gemm_fraction + elementwise + network)
    compute_s = f.flops / (f.peak_flops_per_s * f.peak_factor * efficiency)
    streaming = f.bandwidth_bytes_per_s * c.bandwidth_fraction * c.bandwidth_efficiency
    dequant_bandwidth = 1.0 + f.dequantized * (c.dequant_bandwidth - 1.0)
    attention_bandwidth = 1.0 + attention * (c.attention_bandwidth - 1.0)
    memory_s = (1.0 - network) * (f.memory_bytes + f.calls * c.bytes_half) / (
        streaming * dequant_bandwidth * attention_bandwidth)
    serial_s = f.serial_bytes / streaming
    network_s = network * (f.network_bytes / (f.link_bytes_per_s * c.link_efficiency)
                           + f.hops * f.link_latency_s * c.link_latency_factor)
    overhead_s = f.kernels * c.kernel_overhead_s
    return Parts(compute_s, memory_s, serial_s, network_s, overhead_s)


_RESOLVED = IdentityMemo(RESOLVED_MEMO_SIZE)
_REPRICED = IdentityMemo(RESOLVED_MEMO_SIZE)


@dataclass(frozen=True)
class Calibrated:
    """Expected time on one device under one engine, from a calibration profile. Its
    operator times are a pure function of (operator, device, math format), remembered per
    device so that the steps of one estimate, and the estimates of a sweep, price each
    distinct operator once."""

    constants: Constants
    engine: str = "generic"
    profile: str = "default"
    name: str = "calibrated"
    traits: Traits = Traits()
    sources: tuple[ConstantSource, ...] = ()  # where each constant came from (for_device)
    # the link share of collectives NCCL carries (messages of NCCL_MESSAGE_BYTES and up),
    # a served step's measured figure (with_link_efficiency); None: the constants' own
    nccl_link_efficiency: float | None = None
    _priced: IdentityMemo = field(default_factory=lambda: IdentityMemo(RESOLVED_MEMO_SIZE),
                                   init=False, repr=False, compare=False)

    @classmethod
    def for_device(cls, hardware: HardwareSpec, *, engine: str | Engine | None = None,
                   calibration: str | Profile | None = None) -> Calibrated:
        """The bundled profile (or a calibration file, or a fitted Profile) resolved for
        ``hardware`` under ``engine`` (generic when None); the same inputs give the same
        model (the profile is memoised per file version, so an edited file gives a new one)."""
        chosen = engine if isinstance(engine, Engine) else resolve_engine(engine)
        profile = calibration if isinstance(calibration, Profile) else load_profile(calibration)
        return _RESOLVED.get((hardware, profile, chosen) if isinstance(engine, Engine)
                             else (hardware, profile, engine or ""),
                             lambda: cls._resolve(hardware, profile, chosen))

    @classmethod
    def _resolve(cls, hardware: HardwareSpec, profile: Profile, chosen: Engine) -> Calibrated:
        sources = constant_sources(profile, hardware, chosen)
        return cls(Constants(**{c.name: c.value for c in sources}), chosen.name, profile.name,
                   traits=traits_for(chosen, hardware), sources=sources)

    def with_kernel_overhead(self, kernel_overhead_s: float) -> Calibrated:
        """This model with each kernel launch costing ``kernel_overhead_s`` (a served
        step's fitted time per kernel, ``serving.presets.HostTime.kernel_s``), its other
        constants and their sources as they are."""
        if kernel_overhead_s == self.constants.kernel_overhead_s:
            return self
        # memoised, so that a sweep's runs share one model and its priced operators
        return _REPRICED.get((self, kernel_overhead_s), lambda: Calibrated(
            replace(self.constants, kernel_overhead_s=kernel_overhead_s), self.engine,
            self.profile, self.name, self.traits, self.sources, self.nccl_link_efficiency))

    def with_link_efficiency(self, link_efficiency: float) -> Calibrated:
        """This model with collectives whose messages leave the engines' custom all-reduce
        for NCCL (``cost.base.NCCL_MESSAGE_BYTES`` and up) moving their bytes at
        ``link_efficiency`` of the link's bandwidth (a served step's, the link's measured
        bus bandwidth: ``cost.base.measured_link_efficiency``); smaller ones, and every
        other constant, as they are."""
        if link_efficiency == self.nccl_link_efficiency:
            return self
        return _REPRICED.get((self, "link", link_efficiency), lambda: Calibrated(
            self.constants, self.engine, self.profile, self.name, self.traits, self.sources,
            link_efficiency))

    def kernel(self, op: Op, hardware: HardwareSpec, math_format: str) -> Kernel:
        """The kernel this model's engine runs for ``op`` (``lower``)."""
        return lower(op, hardware, math_format, self.traits)

    def op_parts(self, op: Op, hardware: HardwareSpec, math_format: str) -> Parts:
        """The operator's time by cause: its kernel priced (``priced_parts``)."""
        features = kernel_features(self.kernel(op, hardware, math_format), hardware, math_format)
        if self.nccl_link_efficiency is not None and op.message >= NCCL_MESSAGE_BYTES:
            return priced_parts(features, replace(self.constants,
                                                  link_efficiency=self.nccl_link_efficiency))
        return priced_parts(features, self.constants)

    def op_time(self, op: Op, hardware: HardwareSpec, math_format: str) -> Timing:
        return self._op_time(self._priced.get((hardware,), dict), op, hardware, math_format)

    def _op_time(self, priced: dict[tuple[Op, str], Timing], op: Op, hardware: HardwareSpec,
                 math_format: str) -> Timing:
        key = (op, math_format)
        timing = priced.get(key)
        if timing is None:
            if len(priced) >= PRICED_OPS_MEMO_SIZE:
                priced.clear()
            timing = priced[key] = _timing(op, self.op_parts(op, hardware, math_format))
        return timing

    def step_fixed_s(self, ledger: Ledger) -> float:
        """A forward pass's fixed time: the step overhead, and the parallel one on more
        than one device."""
        c = self.constants
        return c.step_overhead_s + (c.parallel_step_overhead_s if ledger.devices > 1 else 0.0)

    def step_time(self, ledger: Ledger, hardware: HardwareSpec) -> StepTiming:
        memo = self._priced.get((hardware,), dict)
        priced = []
        for op in ledger.ops:
            device = hardware_for_collective(hardware, op, ledger)
            table = memo if device is hardware else self._priced.get((device,), dict)
            priced.append((op, self._op_time(table, op, device,
                                             math_format_for(op, ledger.math_format))))
        step_s = self.step_fixed_s(ledger)
        overhead = Timing(step_s, 0.0, 0.0, 0.0, step_s, "overhead", 0.0, 0.0, 0.0)
        return StepTiming(sum_timings([t for _, t in priced] + [overhead]), tuple(priced))

    def engine_steps(self, step: Step) -> tuple[Step, ...]:
        """The forward passes the engine runs for ``step``: a prompt longer than the
        engine's micro-batch (llama.cpp's n_ubatch) is split into consecutive chunks, each
        attending to the chunks before it; other steps run as they are."""
        return split_prefill(step, self.traits.prefill_ubatch_tokens)


def _timing(op: Op, p: Parts) -> Timing:
    """An operator's Timing from its parts: memory includes its serial kernels, and the
    bound is the largest part."""
    memory_s = p.memory_s + p.serial_s
    parts = {"compute": p.compute_s, "memory": memory_s, "network": p.network_s,
             "overhead": p.overhead_s}
    bound = max(parts, key=parts.__getitem__)
    return Timing(p.time(), p.compute_s, memory_s, p.network_s, p.overhead_s, bound,
                  op.flops, op.memory_bytes, op.network)


def engine_steps(cost_model: Any, step: Step) -> tuple[Step, ...]:
    """The forward passes a cost model's engine runs for ``step`` (one, unless it says)."""
    split = getattr(cost_model, "engine_steps", None)
    return split(step) if split else (step,)


def merge_step_timings(parts: list[StepTiming], ops: tuple[Op, ...]) -> StepTiming:
    """Chunks of one step priced apart, summed per operator of the whole step's ledger
    (``ops``), so the per-operator rows line up with the speed-of-light floor."""
    by_key: dict[tuple[str, str], list[Timing]] = {}
    for part in parts:
        for op, timing in part.ops:
            by_key.setdefault((op.name, op.layers), []).append(timing)
    merged = tuple((op, sum_timings(by_key.get((op.name, op.layers), [])) if
                    by_key.get((op.name, op.layers)) else _zero(op)) for op in ops)
    return StepTiming(sum_timings([p.total for p in parts]), merged)


def _zero(op: Op) -> Timing:
    return Timing(0.0, 0.0, 0.0, 0.0, 0.0, "overhead", 0.0, 0.0, 0.0)
