"""What a cost model returns, and the protocol every cost model follows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

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


# The share of a link's line rate that the engines' collectives reach, measured, by link
# kind. NVLink: its protocol overhead is about 20%, so NCCL's ring moves 370 GB/s of bus
# bandwidth over H100's 450 GB/s line rate (NCCL's maintainer in NVIDIA/nccl-tests#212,
# 2024-05-06; all-reduce over NVLink SHARP peaks near 480 GB/s busBw on 8 GPUs, and 8 H200s
# measured 475 GB/s in NVIDIA/nccl-tests#272). The calibration's link_efficiency (0.25) is
# a fit to static-batch latencies of older stacks and stays theirs; a served step with an
# engine preset prices the collectives NCCL carries at this figure (serving.simulator).
MEASURED_LINK_EFFICIENCY = {"nvlink": 370.0 / 450.0}
# The engines' own all-reduce serves messages up to this size and hands larger ones to
# NCCL: vLLM's CustomAllreduce(max_size=8192 * 1024) (distributed/device_communicators/
# custom_all_reduce.py; SGLang's copy of it keeps the bound). Below it the one-shot and
# two-shot kernels run at a small share of the link (SGLang PR #2904's H100 table: 1 MiB
# across 8 GPUs in 34-45 us), about what the calibration's link_efficiency prices, so
# only NCCL's messages take the measured share.
NCCL_MESSAGE_BYTES = 8 * 2**20


def measured_link_efficiency(hardware: HardwareSpec) -> float | None:
    """The measured share of the collectives' link bandwidth (MEASURED_LINK_EFFICIENCY)
    for ``hardware``'s scale-up link, or None where no measurement covers its kind."""
    if hardware.interconnect is None and hardware.host_link is None:
        return None
    return MEASURED_LINK_EFFICIENCY.get(link_for(hardware).kind)


def collective_width(op: Op, ledger: Ledger) -> int:
    """Devices a collective's group spans: a pipeline send crosses the whole layout
    (pp · max(tp, ep) devices); a tensor- or expert-parallel collective stays in one stage,
    ledger.devices ÷ pp (the ledger's pp.send op runs pp − 1 times)."""
    if op.name.startswith("pp."):
        return ledger.devices
    sends = next((o.calls for o in ledger.ops if o.name == "pp.send"), 0)
    return max(1, ledger.devices // (sends + 1))


def hardware_for_collective(hardware: HardwareSpec, op: Op, ledger: Ledger) -> HardwareSpec:
    """Collectives price by the domain the layout fits in: a group wider than the scale-up
    interconnect joins (its max_devices: 8 on an HGX board, 72 in an NVL72 rack) leaves it,
    so the op runs over the device's scale-out NIC (its sheet's [scale_out]) instead. The
    device is returned as it is otherwise, and where its sheet names no scale-out link."""
    link = hardware.interconnect
    if (op.kind != "communication" or link is None or hardware.scale_out is None
            or collective_width(op, ledger) <= link.max_devices):
        return hardware
    return dataclasses.replace(hardware, interconnect=hardware.scale_out)


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


# Bounds of the cost models' memos: resolved models per (device, profile, engine), devices
# per model, and priced operators per device (a sweep prices the same weight GEMMs at every
# context). At a few hundred bytes an entry, 16 × 4,096 operators stay within tens of MB
# in a long-running process (the web app, a plan search).
RESOLVED_MEMO_SIZE = 16
PRICED_OPS_MEMO_SIZE = 4096


class IdentityMemo:
    """Values keyed by the identity of inputs that are slow to hash or unhashable (a
    HardwareSpec, a calibration Profile). Each entry holds its inputs, so while it lives no
    other object can take their ids: a key found is the same objects. Cleared whole when it
    reaches ``size`` entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}

    def get(self, objects: tuple, make: Callable[[], Any]) -> Any:
        key = tuple(map(id, objects))
        hit = self.entries.get(key)
        if hit is not None:
            return hit[1]
        if len(self.entries) >= self.size:
            self.entries.clear()
        value = make()
        self.entries[key] = (objects, value)
        return value
