"""Building the planner's inputs from what a user gives: lengths, a mix or a trace; SLO
texts such as ``200ms@p99``."""

from __future__ import annotations

import re

import numpy as np

from phasewise.errors import InputError
from phasewise.plan.space import Load, RequestClass, Target, Traffic
from phasewise.serving import load_trace, parse_lengths
from phasewise.serving.requests import Lengths

_SLO = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(us|µs|ms|s)?\s*(?:@\s*p?([0-9.]+))?\s*$",
                  re.IGNORECASE)
_UNIT_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, None: 1e-3}


def target(metric: str, text: str, default_percentile: float) -> Target:
    """'200ms', '1.5s', '50' (milliseconds), each optionally '@p99' (or '@99')."""
    match = _SLO.match(str(text))
    if not match:
        raise InputError(f"--{metric} {text}: give a duration such as 200ms, 1.5s or 50 "
                         "(milliseconds), optionally at a percentile: 200ms@p99.")
    unit = match.group(2).lower() if match.group(2) else None
    percentile = float(match.group(3)) if match.group(3) else default_percentile
    return Target(metric, float(match.group(1)) * _UNIT_S[unit], percentile)


def traffic(*, isl: str, osl: str, mix: list[tuple[int, int, float]] | None, trace: str | None,
            load: Load, requests: int, seed: int) -> Traffic:
    """The traffic of a plan; the longest request is the longest the verification run will
    draw (the same seed), so the screen and the simulator agree on what must fit."""
    if trace is not None:
        stream = load_trace(trace)
        total = stream.input_tokens + stream.output_tokens
        return Traffic((RequestClass(max(1, round(float(stream.input_tokens.mean()))),
                                     max(1, round(float(stream.output_tokens.mean()))), 1.0),),
                       int(total.max()), trace=trace, label=trace)
    if mix is not None:
        classes = _mix(mix)
        return Traffic(classes, max(c.isl + c.osl for c in classes), mix=classes,
                       label=",".join(f"{c.isl}:{c.osl}:{c.share:g}" for c in classes))
    lengths_in, lengths_out = parse_lengths(isl, "--isl"), parse_lengths(osl, "--osl")
    longest = _longest(lengths_in, lengths_out, requests, seed)
    return Traffic((RequestClass(max(1, round(lengths_in.mean)), max(1, round(lengths_out.mean)),
                                 1.0),), longest, isl=str(isl), osl=str(osl),
                   label=f"ISL {isl}, OSL {osl}")


def _mix(mix: list[tuple[int, int, float]]) -> tuple[RequestClass, ...]:
    if any(i < 1 or o < 1 for i, o, _ in mix):
        raise InputError("--mix: every ISL and OSL must be at least 1 token, e.g. "
                         "8192:256:0.5,1024:1024:0.5.")
    if any(not share > 0 for _, _, share in mix):
        raise InputError("--mix: every share must be positive, e.g. 8192:256:0.5,1024:1024:0.5.")
    total = sum(share for _, _, share in mix)
    return tuple(RequestClass(i, o, s / total) for i, o, s in mix)


def _longest(lengths_in: Lengths, lengths_out: Lengths, requests: int, seed: int) -> int:
    """The longest prompt plus answer of the stream ``phasewise simulate`` draws with this
    seed (lengths are drawn before arrival times, so the load does not change them)."""
    rng = np.random.default_rng(seed)
    isl = lengths_in.sample(requests, rng)
    osl = lengths_out.sample(requests, rng)
    return int((isl + osl).max())
