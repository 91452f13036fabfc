"""What a cost model returns, and the protocol every cost model follows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from phasewise.errors import InputError
from phasewise.ledger import Ledger, Op
from phasewise.specs import HardwareSpec, Link


@dataclass(frozen=True, slots=True)
class Timing:
    """Time of one op or one step on one device, with the parts that bound it."""

    time_s: float
    compute_s: float
    memory_s: float
    network_s: float
    overhead_s: float
    bound: str  # "compute" | "memory" | "network" | "overhead"
    flops: float
    memory_bytes: float
    network_bytes: float

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s else 0.0

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.memory_bytes / self.time_s if self.time_s else 0.0


@dataclass(frozen=True, slots=True)
class StepTiming:
    """A ledger priced op by op; ``total`` sums them (ops of a step run one after another)."""

    total: Timing
    ops: tuple[tuple[Op, Timing], ...]


class CostModel(Protocol):
    @property
    def name(self) -> str: ...  # as --cost names it

    def op_time(self, op: Op, hardware: HardwareSpec, math_format: str) -> Timing: ...

    def step_time(self, ledger: Ledger, hardware: HardwareSpec) -> StepTiming: ...


def math_format_for(op: Op, ledger_format: str) -> str:
    """GEMMs run in the ledger's math format; attention in 16-bit unless that is 8/4-bit
    integer math; elementwise work on the vector units in fp32."""
    if op.kind == "gemm":
        return ledger_format
    if op.kind == "attention":
        return ledger_format if ledger_format in ("bf16", "fp16", "fp32", "fp8") else "bf16"
    return "fp32"


def link_for(hardware: HardwareSpec) -> Link:
    """The link collectives run over: the scale-up interconnect, else the host link."""
    link = hardware.interconnect or hardware.host_link
    if link is None:
        raise InputError(f"{hardware.display_name} has no interconnect in its sheet; add an "
                         "[interconnect] table to price tensor/pipeline/expert parallelism.")
    return link


def sum_timings(timings: list[Timing]) -> Timing:
    """Ops run back to back: times add; the step's bound is the class holding most time."""
    parts = {"compute": 0.0, "memory": 0.0, "network": 0.0, "overhead": 0.0}
    total = flops = mem = net = 0.0
    comp_s = mem_s = net_s = over_s = 0.0
    for t in timings:
        total += t.time_s
        parts[t.bound] += t.time_s
        flops += t.flops
        mem += t.memory_bytes
        net += t.network_bytes
        comp_s += t.compute_s
        mem_s += t.memory_s
        net_s += t.network_s
        over_s += t.overhead_s
    bound = max(parts, key=parts.__getitem__)
    return Timing(total, comp_s, mem_s, net_s, over_s, bound, flops, mem, net)
