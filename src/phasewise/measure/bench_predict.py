"""The load a bench run sent, served again by the simulator, and each metric measured
against predicted.

The simulated requests are the completed ones with their own lengths (the server's counts)
and, open loop, their own send times as arrivals; a closed loop runs the same number of
clients. ``error = predicted / measured − 1``, as `phasewise validate` writes it (positive:
phasewise expects it slower, or for a throughput, higher).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from phasewise.errors import InputError
from phasewise.measure.bench_metrics import BenchRun, Stats

# Sequences a server keeps in flight when --max-num-seqs is not given: llama.cpp's servers
# as usually started (llama-cpp-python's server runs one completion at a time behind a
# lock; llama-server with --parallel 1), else vLLM's default max_num_seqs.
SINGLE_SEQUENCE_ENGINES = ("llama.cpp",)
DEFAULT_MAX_SEQS = 256


@dataclass(frozen=True, slots=True)
class Target:
    """What the prediction prices: the server as the simulator describes it."""

    model: str
    hardware: str
    engine: str | None = None
    weight_dtype: str = "bf16"
    act_dtype: str | None = None  # None: what the weight format implies (validate's rule)
    kv_dtype: str | None = None
    scheduler: str = "continuous"
    max_num_seqs: int | None = None
    calibration: str | None = None
    cost: str = "calibrated"

    def seqs(self) -> int:
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        engine = (self.engine or "").split("+")[0].lower()
        return 1 if engine in SINGLE_SEQUENCE_ENGINES else DEFAULT_MAX_SEQS


@dataclass(frozen=True, slots=True)
class Comparison:
    metric: str  # "ttft", "tpot", "itl", "e2el", "request_throughput", "output_throughput"
    statistic: str  # "mean", "median", "p90", ... or "" for throughputs
    unit: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0 if self.measured > 0 else float("nan")

    def row(self) -> dict[str, Any]:
        return {"metric": self.metric, "statistic": self.statistic, "unit": self.unit,
                "measured": self.measured, "predicted": self.predicted,
                "error": self.error if self.measured > 0 else None}


def precision_of(target: Target) -> Any:
    """The weight format as given; a weight-only format (GGUF types, int4) computes and
    caches in fp16 (llama.cpp's defaults), any other computes in its own format over a
    16-bit KV cache, unless --act-dtype or --kv-dtype say otherwise."""
    from phasewise.specs import Precision
    from phasewise.specs.precision import number_format

    fmt = number_format(target.weight_dtype)
    if fmt.math_format is None:
        act, kv = "fp16", "fp16"
    else:
        act, kv = fmt.name, fmt.name if fmt.name in ("bf16", "fp16") else "fp16"
    return Precision(fmt.name, target.act_dtype or act, target.kv_dtype or kv)


def simulated_requests(run: BenchRun) -> Any:
    """The completed requests with their lengths and send times (in the order they were
    sent, as the simulator takes arrivals); for a summary read from
    another tool's file, as many requests of the mean lengths under the load it names."""
    from phasewise.serving import Requests

    closed = run.summary.load.get("kind") == "closed"
    done = sorted((r for r in run.records if r.ok), key=lambda r: (r.sent_s, r.index))
    if not done:
        return _from_summary(run.summary, closed)
    arrival = None if closed else np.array([r.sent_s for r in done], dtype=float)
    return Requests(np.array([r.input_tokens for r in done], dtype=np.int64),
                    np.array([max(1, r.output_tokens) for r in done], dtype=np.int64),
                    arrival)


def _from_summary(summary: Any, closed: bool) -> Any:
    """Mean lengths under the summary's load: Poisson arrivals at its rate (seed 0), all at
    once for an infinite rate, or its clients."""
    from phasewise.serving import Requests
    from phasewise.serving.requests import poisson_arrivals

    n = summary.completed
    if not n:
        raise InputError("no request completed, so there is nothing to predict.")
    isl = max(1, round(summary.total_input_tokens / n))
    osl = max(1, round(summary.total_output_tokens / n))
    rate = summary.load.get("rate_rps")
    if closed:
        arrival = None
    elif isinstance(rate, (int, float)) and rate > 0:
        arrival = poisson_arrivals(float(rate), n, np.random.default_rng(0))
    else:
        arrival = np.zeros(n)
    return Requests(np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64), arrival)


def predict(run: BenchRun, target: Target) -> Any:
    """The simulator's summary of the run's load on ``target``."""
    from phasewise.serving import ClosedLoop, Pool, Server, simulate, summarize

    requests = simulated_requests(run)
    clients = run.summary.load.get("clients")
    server = Server(model=target.model, pool=Pool(target.hardware),
                    precision=precision_of(target), scheduler=target.scheduler,
                    max_seqs=target.seqs(), cost=target.cost, engine=target.engine,
                    calibration=target.calibration)
    closed = ClosedLoop(int(clients)) if clients else None
    sim = simulate(server, requests, closed_loop=closed, bucket_tokens=1)
    return summarize(sim, workload={"requests": len(requests), **{
        k: v for k, v in run.summary.load.items() if isinstance(v, (int, float, str))}})


def compare(measured: Any, predicted: Any) -> list[Comparison]:
    """Measured against predicted, per latency metric (mean, median and the percentiles both
    report) and for the throughputs."""
    rows = []
    for metric in ("ttft", "tpot", "itl", "e2el"):
        mine: Stats = getattr(measured, metric)
        theirs = getattr(predicted, metric)
        if not mine.count:
            continue
        pairs = [("mean", mine.mean_s, theirs.mean_s), ("median", mine.median_s, theirs.p50_s)]
        for key in ("p90", "p99"):
            if key in mine.percentiles_s:
                pairs.append((key, mine.percentiles_s[key], getattr(theirs, f"{key}_s")))
        rows += [Comparison(metric, stat, "s", m, p) for stat, m, p in pairs]
    rows.append(Comparison("request_throughput", "", "req/s", measured.request_throughput_rps,
                           predicted.requests_per_s))
    rows.append(Comparison("output_throughput", "", "tok/s", measured.output_throughput_tps,
                           predicted.output_tokens_per_s))
    return rows
