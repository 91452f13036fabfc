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


def hybrid_estimates_per_second() -> float:
    """New-shape estimates per second of the 100-layer hybrid (ledger cache misses)."""
    model = hybrid_model()
    phasewise.estimate(model, "h100-sxm")
    start = time.perf_counter()
    for i, workload in enumerate(WORKLOADS):
        phasewise.estimate(model, "h100-sxm", Workload(workload.isl + 3 + i, workload.osl,
                                                       workload.batch_size))
    return len(WORKLOADS) / (time.perf_counter() - start)


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
    print(f"estimates/s, 100-layer hybrid, new shapes:    {hybrid_estimates_per_second():,.0f}")
    print(f"`phasewise --help` start-up:                  {startup_seconds('--help'):.3f} s")
    print(f"`phasewise estimate` (default) wall time:     {startup_seconds('estimate'):.3f} s")


if __name__ == "__main__":
    main()
