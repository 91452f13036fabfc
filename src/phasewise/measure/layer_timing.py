"""Where a measured step's time goes, layer group by layer group, beside the ledger's
prediction for the same group.

The step itself is timed whole (``profile.measure_step``). Apart from those timed runs, a
few instrumented passes put a clock reading around every decoder block (after a device
synchronisation on CUDA); each layer group's share of an instrumented pass, times the
step's measured median, is that group's measured time, so the groups sum to the step and
the readings' own cost does not inflate any of them. The embedding, final norm and LM head
are the rest of the pass.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any

from phasewise.cost import CostModel, SpeedOfLight
from phasewise.ledger import Ledger
from phasewise.measure.types import LayerTime

# Label of the operators outside the decoder blocks (ledger layers "input" and "output").
OUTSIDE_BLOCKS = "embedding, final norm, LM head"
# Instrumented passes per point: their median share is steady after a few.
MAX_INSTRUMENTED_PASSES = 3


def group_key(layers: str) -> str:
    """The row an operator of the ledger (by its ``layers`` field) is reported in."""
    return OUTSIDE_BLOCKS if layers in ("input", "output") else layers


def block_keys(spec: Any) -> list[str]:
    """Each block's row, as the ledger labels its group: "<layer label> ×<count>"."""
    counts = {g.label: g.count for g in spec.layer_groups}
    return [f"{layer.label} ×{counts[layer.label]}" for layer in spec.layers]


def layer_shares(model: Any, run: Any, spec: Any, *, device: str, passes: int) -> dict[str, float]:
    """Median fraction of one pass of ``run`` spent in each layer group (and outside the
    blocks), over ``passes`` instrumented passes."""
    import torch

    clock = time.thread_time if device == "cpu" and torch.get_num_threads() == 1 \
        else time.perf_counter
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    keys = block_keys(spec)
    spent: dict[str, float] = defaultdict(float)
    opened: list[float] = []

    def before(module: Any, args: Any) -> None:
        sync()
        opened.append(clock())

    def after_for(key: str) -> Any:
        def after(module: Any, args: Any, output: Any) -> None:
            sync()
            spent[key] += clock() - opened.pop()
        return after

    handles = []
    for block, key in zip(model.layers, keys, strict=True):
        handles += [block.register_forward_pre_hook(before),
                    block.register_forward_hook(after_for(key))]
    shares: dict[str, list[float]] = defaultdict(list)
    try:
        for _ in range(passes):
            spent.clear()
            sync()
            start = clock()
            run()
            sync()
            total = max(clock() - start, 1e-12)
            spent[OUTSIDE_BLOCKS] = max(0.0, total - sum(spent.values()))
            for key, seconds in spent.items():
                shares[key].append(seconds / total)
    finally:
        for handle in handles:
            handle.remove()
    return {key: statistics.median(values) for key, values in shares.items()}


def layer_rows(ledger: Ledger, hardware: Any, shares: dict[str, float], time_s: float,
               cost: CostModel | None) -> list[LayerTime]:
    """One row per layer group: the measured share of the step's time beside the ledger's
    FLOPs, bytes and speed-of-light (and expected) time of that group's operators."""
    floor = SpeedOfLight().step_time(ledger, hardware)
    expected = cost.step_time(ledger, hardware) if cost is not None else None
    rows: dict[str, dict[str, float]] = {}
    for op, timing in floor.ops:
        row = rows.setdefault(group_key(op.layers), defaultdict(float))
        row["flops"] += op.flops
        row["memory_bytes"] += op.memory_bytes
        row["sol"] += timing.time_s
    for op, timing in expected.ops if expected is not None else ():
        rows.setdefault(group_key(op.layers), defaultdict(float))["expected"] += timing.time_s
    return [LayerTime(layers=key, time_s=shares.get(key, 0.0) * time_s, flops=row["flops"],
                      memory_bytes=row["memory_bytes"], sol_time_s=row["sol"],
                      expected_time_s=row["expected"] if expected is not None else None)
            for key, row in rows.items()]
