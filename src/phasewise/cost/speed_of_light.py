"""The floor: every op at the device's datasheet peak, max(FLOPs / peak, bytes / bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass, field

from phasewise.cost.base import (
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
from phasewise.ledger import Ledger, Op
from phasewise.specs import HardwareSpec


@dataclass(frozen=True)
class SpeedOfLight:
    """Roofline time per op: max(FLOPs ÷ peak FLOP/s, bytes ÷ bandwidth); collectives take
    bytes ÷ link bandwidth plus one link latency per round. No overheads, no efficiency."""

    name: str = "sol"
    # Operator times per device, remembered (a pure function of operator, device, format).
    _priced: IdentityMemo = field(default_factory=lambda: IdentityMemo(RESOLVED_MEMO_SIZE),
                                  init=False, repr=False, compare=False)

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
        memo = self._priced.get((hardware,), dict)
        priced = []
        for op in ledger.ops:
            device = hardware_for_collective(hardware, op, ledger)
            fmt = math_format_for(op, ledger.math_format)
            table = memo if device is hardware else self._priced.get((device,), dict)
            timing = table.get((op, fmt))
            if timing is None:
                if len(table) >= PRICED_OPS_MEMO_SIZE:
                    table.clear()
                timing = table[op, fmt] = self.op_time(op, device, fmt)
            priced.append((op, timing))
        return StepTiming(sum_timings([t for _, t in priced]), tuple(priced))
