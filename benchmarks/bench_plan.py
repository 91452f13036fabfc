"""Speed of `phasewise plan`: screening every candidate and simulating the best 50.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_plan.py

Two searches over every catalog device with an on-demand price (the plan's default
devices), at the default search space
(TP 1-8, PP where needed, EP for MoE, checkpoint and fp8 weights, bf16 and fp8 KV, four
batch limits, two chunk sizes, colocated and disaggregated with mixed pools, speculation
on and off): Llama-3.1-70B and DeepSeek-V3 (671B MoE), chat traffic (ISL 1024, OSL 256)
at 20 requests/s under TTFT p90 ≤ 2 s and TPOT p90 ≤ 50 ms, 600 requests a verification
run, on the local process pool.
"""

from __future__ import annotations

import os
import time

from phasewise.catalog import hardware_names, load_hardware
from phasewise.plan import (
    Load,
    LocalPool,
    Problem,
    RequestClass,
    SearchSpace,
    Study,
    Target,
    Traffic,
    plan,
)

MODELS = ("llama-3.1-70b", "deepseek-v3")


def main() -> None:
    devices = tuple(d for d in (load_hardware(n) for n in hardware_names())
                    if d.price_usd_per_hour is not None and _on_demand(d))
    traffic = Traffic((RequestClass(1024, 256, 1.0),), 1280, isl="1024", osl="256")
    problem = Problem(traffic, Load("rate", 20.0), (Target("ttft", 2.0), Target("tpot", 0.05)),
                      SearchSpace(devices))
    for model in MODELS:
        pool = LocalPool()
        marks: dict[str, list[float]] = {}

        def progress(stage: str, total: int, marks=marks):  # noqa: ANN001, ANN202 - records when tasks end
            marks[stage] = [time.perf_counter()]
            return lambda: marks[stage].append(time.perf_counter())

        cpu_before = _cpu_s()
        start = time.perf_counter()
        report = plan(Study(model, problem, verify=50, requests=600), executor=pool,
                      progress=progress)[0]
        elapsed = time.perf_counter() - start
        pool.close()  # reaps the workers, so their CPU time is counted
        cpu = _cpu_s() - cpu_before
        pricing = marks["pricing shapes"]
        simulating = marks["simulating"]
        print(f"{model}: {report.candidates_screened:,} candidates screened on "
              f"{report.shapes_priced} shapes, {report.candidates_verified} simulated in "
              f"{elapsed:.1f} s with {pool.workers} workers (pricing {pricing[-1] - start:.1f} s, "
              f"screening {simulating[0] - pricing[-1]:.1f} s, simulating "
              f"{simulating[-1] - simulating[0]:.1f} s, report {time.perf_counter() - simulating[-1]:.1f} s)"
              f"; CPU time of this process and its workers {cpu:.1f} s; {report.verdict}")


def _on_demand(device) -> bool:  # noqa: ANN001
    """Priced as cloud rent (the plan's default basis; a sheet without a basis is)."""
    return getattr(getattr(device, "price", None), "basis", "on-demand") == "on-demand"


def _cpu_s() -> float:
    """User and system CPU seconds of this process and its reaped children: on a shared
    machine the wall time also counts the time other jobs held the CPUs."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    main()
