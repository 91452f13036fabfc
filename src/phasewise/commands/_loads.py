"""What `phasewise simulate` sends: the load (open loop, closed loop or a trace) and the
synthetic request stream, as frozen specs built once from the flags and checked there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phasewise.commands._app import ints, numbers
from phasewise.errors import InputError

# The open-loop rate when neither --rate, --clients nor --trace is given (requests/s).
DEFAULT_RATE_RPS = 4.0
# Past this no request rate describes a server's load (requests/s).
MAX_RATE_RPS = 1e9


@dataclass(frozen=True, slots=True)
class OpenLoad:
    """Requests arrive at ``rate_rps`` whatever the server does (``--rate``)."""

    rate_rps: float

    def __post_init__(self) -> None:
        if not self.rate_rps > 0:
            raise InputError(f"--rate {self.rate_rps}: give positive values.")


@dataclass(frozen=True, slots=True)
class ClosedLoad:
    """``clients`` each send a request, wait for its answer and ``think_s``, and send the
    next; they start evenly over ``ramp_s`` (``--clients``, ``--think-time``,
    ``--ramp-up``)."""

    clients: int
    think_s: float = 0.0
    ramp_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.clients > 0:
            raise InputError(f"--clients {self.clients}: give positive values.")


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """The arrivals and lengths of a recorded trace (``--trace``)."""

    path: str


Load = OpenLoad | ClosedLoad | TraceLoad


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """The synthetic requests of an open or closed loop: how many, their lengths (as
    ``--isl``/``--osl`` take them), arrivals, seed and prefix sharing; the first
    ``warmup`` are served and left out of the figures."""

    num_requests: int
    isl: str
    osl: str
    arrival: str = "poisson"
    cv: float = 1.0
    seed: int = 0
    prefix_hit_rate: float = 0.0
    range_ratio: float = 1.0
    warmup: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.range_ratio <= 1:
            raise InputError(f"--random-range-ratio {self.range_ratio}: give a ratio in "
                             "(0, 1].")
        if self.warmup < 0 or self.warmup >= self.num_requests:
            raise InputError(f"--warmup {self.warmup}: give 0 or more requests, fewer than "
                             f"--num-requests {self.num_requests}.")

    def workload(self) -> dict[str, Any]:
        """The stream as the simulate document records it."""
        return {"num_requests": self.num_requests, "isl": self.isl, "osl": self.osl,
                "seed": self.seed, "prefix_hit_rate": self.prefix_hit_rate,
                "random_range_ratio": self.range_ratio, "warmup": self.warmup}


def loads_from_flags(rate: str | None, clients: str | None, trace: str | None,
                     think_s: float | None, ramp_s: float = 0.0) -> list[Load]:
    """One load per swept value of the one load flag given (an open loop at
    DEFAULT_RATE_RPS when none is)."""
    given = [flag for flag, v in (("--rate", rate), ("--clients", clients),
                                  ("--trace", trace)) if v is not None]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} each set the load; give one of them.")
    if trace is not None:
        return [TraceLoad(trace)]
    if clients is not None:
        return [ClosedLoad(c, think_s or 0.0, ramp_s) for c in ints(clients, "--clients")]
    rates = numbers(rate or f"{DEFAULT_RATE_RPS:g}", "--rate", above=0.0,
                    maximum=MAX_RATE_RPS, example=f"{DEFAULT_RATE_RPS:g}")
    return [OpenLoad(r) for r in rates]
