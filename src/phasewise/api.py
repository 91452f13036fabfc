"""The verbs as Python functions: the same layers the CLI calls, typed results, and
errors (``phasewise.errors.InputError``) that name the function's parameters.

    import phasewise
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", phasewise.Workload(isl=4096))
    ranked = phasewise.compare("llama-3.1-8b", hardware=["h100-sxm", "h200-sxm"])
    served = phasewise.simulate("llama-3.1-8b", "h100-sxm", num_requests=200, rate_per_s=4)

Estimating, explaining and comparing live in ``estimate/``; ``simulate`` and ``validate``
here put together the pieces their CLI verbs put together, with the same checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.errors import InputError
from phasewise.estimate.compare import compare
from phasewise.estimate.core import estimate
from phasewise.estimate.disagg import disaggregate
from phasewise.estimate.explain import explain
from phasewise.estimate.parallel import tp_scaling
from phasewise.estimate.speculative import speculative
from phasewise.estimate.sweep import batch_sweep
from phasewise.estimate.whatif import what_if
from phasewise.specs import Parallelism, Precision

__all__ = ["batch_sweep", "compare", "disaggregate", "estimate", "explain", "simulate",
           "speculative", "tp_scaling", "validate", "what_if"]


def _positive(name: str, value: float, *, whole: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
        kind = "a positive whole number" if whole else "a positive finite number"
        raise InputError(f"{name} must be {kind}, got {value!r}.")


def simulate(model: str = "llama-3.1-8b", hardware: str = "h100-sxm", *,
             num_requests: int = 1000, rate_per_s: float = 4.0, isl: str | int = 1024,
             osl: str | int = 256, scheduler: str = "continuous",
             parallelism: Parallelism = Parallelism(), replicas: int = 1,
             precision: Precision = Precision(), arrival: str = "poisson", seed: int = 0,
             cost: str = DEFAULT_COST_MODEL, engine: str | None = None):  # noqa: ANN201
    """Serve ``num_requests`` arriving at ``rate_per_s`` (open loop) with prompt and answer
    lengths ``isl``/``osl`` (a number or a distribution such as "uniform:512:1536"), and
    summarize latency and throughput (a ``serving.types.SimSummary``)."""
    import numpy as np

    from phasewise.serving import Pool, Server, parse_lengths, request_metrics, summarize
    from phasewise.serving import simulate as run
    from phasewise.serving.requests import open_loop

    _positive("num_requests", num_requests, whole=True)
    _positive("rate_per_s", rate_per_s)
    _positive("replicas", replicas, whole=True)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a whole number of at least 0, got {seed!r}.")
    server = Server(model=model, pool=Pool(hardware, parallelism, replicas), scheduler=scheduler,
                    precision=precision, cost=cost, engine=engine)
    requests = open_loop(num_requests, parse_lengths(str(isl), "isl"),
                         parse_lengths(str(osl), "osl"), np.random.default_rng(seed),
                         kind=arrival, rate_per_s=rate_per_s)
    sim = run(server, requests)
    workload = {"num_requests": num_requests, "isl": str(isl), "osl": str(osl), "seed": seed,
                "arrival": arrival, "rate_rps": rate_per_s}
    return summarize(sim, workload=workload, metrics=request_metrics(sim))


def validate(measurements: Sequence[str | Path] | None = None, *,
             holdout_source: str | None = None, leave_one_source_out: bool = False,
             refit: bool = False, calibration: str | None = None):  # noqa: ANN201
    """Score the estimates against measurement CSVs (the bundled ones by default): a
    ``validate.outcome.ValidationOutcome`` with every prediction, the scores per source and
    phase, and the rows skipped or excluded with their reasons."""
    from phasewise.validate.measurements import load_bundled, load_measurements
    from phasewise.validate.outcome import run_validation

    if sum(map(bool, (holdout_source, leave_one_source_out, refit, calibration))) > 1:
        raise InputError("choose one of holdout_source, leave_one_source_out, refit and "
                         "calibration.")
    files = [load_measurements(p) for p in measurements] if measurements else load_bundled()
    return run_validation(files, holdout_source=holdout_source,
                          leave_one_source_out=leave_one_source_out, refit=refit,
                          calibration=calibration)
