"""How fast the serving simulator runs, and how much state it holds.

The target case: 10,000 requests (Poisson, ISL 1024, OSL 256, continuous batching,
Llama-3.1-8B on one H100) simulated in under 15 s. Simulated engine steps per second are
reported beside it, for each cost model and for a few loads (the load sets how many steps
the same requests take).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_simulate.py
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from phasewise.cost.registry import COST_MODELS, DEFAULT_COST_MODEL
from phasewise.serving import Server, parse_lengths, request_metrics, simulate, summarize
from phasewise.serving.requests import open_loop

REQUESTS = 10_000
RATES = (8.0, 20.0, 40.0)  # requests per second: light, busy, near saturation


def requests(rate: float, n: int = REQUESTS, osl: str = "256"):  # noqa: ANN201
    return open_loop(n, parse_lengths("1024", "--isl"), parse_lengths(osl, "--osl"),
                     np.random.default_rng(0), rate_per_s=rate)


def timed(cost: str, rate: float, bucket_tokens: int = 16) -> dict:
    stream = requests(rate)
    start = time.perf_counter()
    sim = simulate(Server(cost=cost), stream, bucket_tokens=bucket_tokens)
    simulated = time.perf_counter() - start
    summarize(sim, metrics=request_metrics(sim))
    total = time.perf_counter() - start
    return {"cost": cost, "rate": rate, "bucket": bucket_tokens, "steps": sim.steps,
            "shapes": sim.priced_shapes, "simulate_s": simulated, "total_s": total,
            "steps_per_s": sim.steps / simulated}


def held_bytes(n: int, rate: float) -> tuple[float, int, int]:
    """Peak traced bytes of a run and its summary, with its requests and output tokens."""
    stream = requests(rate, n)
    tracemalloc.start()
    sim = simulate(Server(cost="sol"), stream)
    summarize(sim, metrics=request_metrics(sim))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, n, int(stream.output_tokens.sum())


def main() -> None:
    simulate(Server(), requests(8.0, 20))  # load catalogs once
    print(f"{REQUESTS:,} requests, Poisson, ISL 1024, OSL 256, continuous, Llama-3.1-8B, 1× H100")
    print(f"{'cost':>11} {'rate':>6} {'bucket':>6} {'steps':>9} {'shapes':>7} "
          f"{'simulate':>9} {'+metrics':>9} {'steps/s':>9}")
    cases = [(cost, rate, 16) for cost in COST_MODELS for rate in RATES]
    cases += [(DEFAULT_COST_MODEL, 20.0, 1)]
    for cost, rate, bucket in cases:
        row = timed(cost, rate, bucket)
        print(f"{row['cost']:>11} {row['rate']:>6g} {row['bucket']:>6} {row['steps']:>9,} "
              f"{row['shapes']:>7,} {row['simulate_s']:>8.2f}s {row['total_s']:>8.2f}s "
              f"{row['steps_per_s']:>9,.0f}")
    # State held: a light load runs about one step per output token (the worst case).
    light = held_bytes(2_000, 1.0)
    busy = held_bytes(REQUESTS, 20.0)
    for label, (peak, n, tokens) in (("one request at a time", light), ("busy", busy)):
        print(f"held ({label}): {peak / 2**20:,.0f} MiB peak for {n:,} requests, "
              f"{tokens:,} output tokens = {peak / n:,.0f} B/request or "
              f"{peak / tokens:,.1f} B/output token")


if __name__ == "__main__":
    main()
