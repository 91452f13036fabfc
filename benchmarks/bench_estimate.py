"""How fast phasewise answers: full estimates per second in process, and CLI start-up.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_estimate.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import phasewise
from phasewise.specs import Workload

# Distinct workloads so the ledger cache does not answer every call after the first.
WORKLOADS = [Workload(isl, osl, b) for isl in (128, 512, 2048, 8192) for osl in (64, 256, 1024)
             for b in (1, 8, 64)]


def estimates_per_second(rounds: int = 5) -> tuple[float, float]:
    """(cold, warm): cold uses new workloads each call (ledger cache misses), warm repeats."""
    phasewise.estimate()  # load catalogs once
    start = time.perf_counter()
    for i, workload in enumerate(WORKLOADS):
        phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(workload.isl + 1 + i,
                                                                workload.osl, workload.batch_size))
    cold = len(WORKLOADS) / (time.perf_counter() - start)
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for workload in WORKLOADS:
            phasewise.estimate("llama-3.1-8b", "h100-sxm", workload)
        rates.append(len(WORKLOADS) / (time.perf_counter() - start))
    return cold, statistics.median(rates)


def startup_seconds(*args: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "phasewise", *args], check=True,
                       capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    cold, warm = estimates_per_second()
    print(f"estimates/s, new shapes (ledger cache misses): {cold:,.0f}")
    print(f"estimates/s, repeated shapes:                 {warm:,.0f}")
    print(f"`phasewise --help` start-up:                  {startup_seconds('--help'):.3f} s")
    print(f"`phasewise estimate` (default) wall time:     {startup_seconds('estimate'):.3f} s")


if __name__ == "__main__":
    main()
