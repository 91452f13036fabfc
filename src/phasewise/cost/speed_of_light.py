"""The floor: every op at the device's datasheet peak, max(FLOPs / peak, bytes / bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass

from phasewise.cost.base import (
    StepTiming,
    Timing,
    hardware_for_collective,
    link_for,
    math_format_for,
    sum_timings,
)
from phasewise.ledger import Ledger, Op
from phasewise.specs import HardwareSpec


@dataclass(frozen=True)
class SpeedOfLight:
    """Roofline time per op: max(FLOPs ÷ peak FLOP/s, bytes ÷ bandwidth); collectives take
    bytes ÷ link bandwidth plus one link latency per round. No overheads, no efficiency."""

    name: str = "sol"

    def op_time(self, op: Op, hardware: HardwareSpec, math_format: str) -> Timing:
        if op.kind == "communication":
            link = link_for(hardware)
            network_s = op.network / link.bandwidth_bytes_per_s + op.hops * link.latency_s
            return Timing(network_s, 0.0, 0.0, network_s, 0.0, "network", 0.0, 0.0, op.network)
        peak = hardware.vector_flops if math_format == "fp32" and op.kind == "elementwise" \
            else hardware.peak_flops(math_format)
        compute_s = op.flops / peak
        memory_s = op.memory_bytes / hardware.memory_bandwidth_bytes_per_s
        bound = "compute" if compute_s >= memory_s else "memory"
        return Timing(max(compute_s, memory_s), compute_s, memory_s, 0.0, 0.0, bound,
                      op.flops, op.memory_bytes, 0.0)

    def step_time(self, ledger: Ledger, hardware: HardwareSpec) -> StepTiming:
        priced = tuple((op, self.op_time(op, hardware_for_collective(hardware, op, ledger),
                            math_format_for(op, ledger.math_format)))
                       for op in ledger.ops)
        return StepTiming(sum_timings([t for _, t in priced]), priced)
