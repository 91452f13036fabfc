"""How fast a concurrency sweep of a large MoE runs: the issue's speed case.

DeepSeek-V3 (671B MoE, FP8) on one replica of eight H200 SXM (TP 8), vLLM's preset,
a closed loop at 1, 2, 4, 8, 16, 32, 64 and 128 clients, 1,000 requests each of ISL 1024
and OSL 1024, simulated and summarised (percentiles, the idle-server estimate) as
`phasewise simulate --clients 1,2,...,128` does. Target: under 10 s in all on this machine.
Wall time and process CPU time are both printed: the machine is shared, and the CPU time
is the figure a quiet machine would show.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_serving.py
"""

from __future__ import annotations

import time

import numpy as np

from phasewise.catalog import load_hardware
from phasewise.serving import (
    ClosedLoop,
    Pool,
    Requests,
    Server,
    request_metrics,
    simulate,
    summarize,
)
from phasewise.serving.presets import engine_settings
from phasewise.specs import Parallelism, Precision

CLIENTS = (1, 2, 4, 8, 16, 32, 64, 128)
REQUESTS = 1_000


def server(fast_forward: bool = True, prices: dict | None = None) -> Server:
    device = load_hardware("h200-sxm")
    preset = engine_settings("vllm", device, tp=8, ranks=8)
    return Server(model="deepseek-v3", pool=Pool(device, Parallelism(8)),
                  precision=Precision("fp8", "fp8"), scheduler=preset.scheduler,
                  max_seqs=preset.max_num_seqs, max_batched_tokens=preset.max_num_batched_tokens,
                  preset=preset, fast_forward=fast_forward, price_cache=prices)


def sweep(fast_forward: bool = True) -> list[tuple[int, int, float, float]]:
    requests = Requests(np.full(REQUESTS, 1024), np.full(REQUESTS, 1024))
    out, prices = [], {}  # the sweep's runs share step prices, as `phasewise simulate` does
    for clients in CLIENTS:
        wall, cpu = time.perf_counter(), time.process_time()
        sim = simulate(server(fast_forward, prices), requests, closed_loop=ClosedLoop(clients))
        summarize(sim, metrics=request_metrics(sim), workload={"clients": clients})
        out.append((clients, sim.steps, time.perf_counter() - wall, time.process_time() - cpu))
    return out


def main() -> None:
    print(f"DeepSeek-V3 FP8, 8x H200 TP8, vLLM preset, {REQUESTS:,} requests of 1024/1024 a point")
    print(f"{'clients':>8} {'steps':>10} {'wall s':>8} {'cpu s':>8}")
    for label, ff in (("fast-forward", True), ("step by step", False)):
        rows = sweep(ff)
        for clients, steps, wall, cpu in rows:
            print(f"{clients:>8} {steps:>10,} {wall:>8.2f} {cpu:>8.2f}")
        print(f"{label}: sweep of {len(rows)} points in {sum(r[2] for r in rows):.1f} s wall, "
              f"{sum(r[3] for r in rows):.1f} s CPU")


if __name__ == "__main__":
    main()
