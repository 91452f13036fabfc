"""How fast phasewise answers: full estimates per second in process, and CLI start-up.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_estimate.py

Each rate is given by the wall clock and by this process's CPU time: on a shared machine
the wall-clock rate falls with the other processes' load, the CPU-time rate much less, so
two versions measured back to back compare best by the latter.
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


class Rate:
    """Calls per second over a block, by the wall clock and by this process's CPU time."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __enter__(self) -> Rate:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = self.calls / (time.perf_counter() - self.wall)
        self.cpu = self.calls / (time.process_time() - self.cpu)


def median_rate(rates: list[Rate]) -> tuple[float, float]:
    return statistics.median(r.wall for r in rates), statistics.median(r.cpu for r in rates)


def estimates_per_second(rounds: int = 5) -> tuple[tuple[float, float], tuple[float, float]]:
    """(cold, warm) as (wall, CPU) rates: cold uses new workloads each call (ledger cache
    misses), the median of ``rounds`` rounds of 36; warm repeats the same 36."""
    phasewise.estimate()  # load catalogs once
    cold = []
    for r in range(rounds):
        with Rate(len(WORKLOADS)) as rate:
            for i, workload in enumerate(WORKLOADS):
                phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(
                    workload.isl + 1 + i + 100 * r, workload.osl, workload.batch_size))
        cold.append(rate)
    warm = []
    for _ in range(rounds):
        with Rate(len(WORKLOADS)) as rate:
            for workload in WORKLOADS:
                phasewise.estimate("llama-3.1-8b", "h100-sxm", workload)
        warm.append(rate)
    return median_rate(cold), median_rate(warm)


def hybrid_model(layers: int = 100):
    """A 100-layer hybrid in the Nemotron-H style: Mamba-2, attention, MLP and MoE blocks in a
    repeating pattern, so every mixer and MLP kind is priced."""
    from phasewise.catalog import model_from_config

    pattern = ("M-M*ME" * layers)[:layers]
    return model_from_config({
        "model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": layers,
        "hybrid_override_pattern": pattern, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 16384, "vocab_size": 131072,
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "conv_kernel": 4, "n_routed_experts": 64, "num_experts_per_tok": 6,
        "moe_intermediate_size": 1856, "tie_word_embeddings": False}, "hybrid-100")


def hybrid_estimates_per_second(rounds: int = 5) -> tuple[float, float]:
    """New-shape estimates per second of the 100-layer hybrid (ledger cache misses), as
    (wall, CPU) rates, the median of ``rounds`` rounds of 36."""
    model = hybrid_model()
    phasewise.estimate(model, "h100-sxm")
    rates = []
    for r in range(rounds):
        with Rate(len(WORKLOADS)) as rate:
            for i, workload in enumerate(WORKLOADS):
                phasewise.estimate(model, "h100-sxm", Workload(
                    workload.isl + 3 + i + 100 * r, workload.osl, workload.batch_size))
        rates.append(rate)
    return median_rate(rates)


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
    hybrid = hybrid_estimates_per_second()
    for label, (wall, cpu) in (("new shapes (ledger cache misses)", cold),
                               ("repeated shapes", warm), ("100-layer hybrid, new shapes", hybrid)):
        print(f"estimates/s, {label + ':':33s} {wall:,.0f} wall, {cpu:,.0f} CPU time")
    print(f"`phasewise --help` start-up:                  {startup_seconds('--help'):.3f} s")
    print(f"`phasewise estimate` (default) wall time:     {startup_seconds('estimate'):.3f} s")


if __name__ == "__main__":
    main()
