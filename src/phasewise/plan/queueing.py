"""The analytic model of one pool at a steady load, from a shape's prices.

Continuous batching keeps a replica stepping while it holds sequences, so at a request
rate λ the decode batch b settles where Little's law holds: b = λ · n · f(b) / (1 − ρₚ),
with n decode steps (speculative rounds) per request, f(b) the step time at batch b and
ρₚ = λ · P the share of the replica's time spent prefilling (P: device seconds per
prompt, prompts packed into a step). With f affine on each piece of the price grid,
f(b) = a + c·b, the fixed point is b = k·a / (1 − k·c) for k = λn / (1 − ρₚ); there is
none when k·c ≥ 1 on the last piece (decode cannot keep up). TPOT is a step stretched by
the prefills between steps, f(b) / (1 − ρₚ), over the tokens a step yields. A prompt
waits for the prefill work ahead of it as in an M/D/1 queue, W = ρₚ·P / (2(1 − ρₚ))
(Kleinrock, Queueing Systems I, the Pollaczek–Khinchine mean wait with a fixed service
time), and half a step for the step boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from phasewise.plan.profile import Profile, segments

# Highest prefill share of a replica the screen accepts: past it the M/D/1 wait grows
# without bound in a finite run's tail.
MAX_PREFILL_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class PoolState:
    """One replica at its share of the load."""

    stable: bool
    reason: str = ""
    rate_per_replica: float = 0.0
    batch: float = 0.0
    prefill_share: float = 0.0
    step_s: float = 0.0  # decode step (or round) at the batch, stretched by the prefills
    tpot_s: float = 0.0
    ttft_s: tuple[float, ...] = ()  # per class, without a KV transfer
    kv_use: float = 0.0  # held tokens over the replica's KV capacity


def decode_batch(profile: Profile, speculating: bool, k: float) -> float | None:
    """The b with b = k · f(b), or None when decode cannot keep up."""
    points = profile.spec if speculating else profile.decode
    for lo, hi, a, c in segments(points):
        if k * c >= 1:
            continue
        b = k * a / (1 - k * c)
        if b <= hi and b >= lo or (b < lo and lo == points[0].batch):
            return b
    return None


def pool_state(profile: Profile, classes, rate_per_replica: float, *, chunk: int,  # noqa: ANN001
               max_seqs: int, speculating: bool, prefill: bool = True,
               decode: bool = True) -> PoolState:
    """A replica serving ``rate_per_replica`` requests/s: colocated (both phases), a
    prefill instance (``decode`` False) or a decode instance (``prefill`` False)."""
    lam = rate_per_replica
    packed = profile.packed_s[chunk] if prefill else ()
    p_s = sum(c.share * s for c, s in zip(classes, packed, strict=False)) if prefill else 0.0
    rho = lam * p_s
    if rho >= MAX_PREFILL_SHARE:
        return PoolState(False, f"prefill alone would take {100 * rho:.0f}% of a replica",
                         lam, prefill_share=rho)
    wait_s = rho * p_s / (2 * (1 - rho)) if prefill else 0.0
    batch = step_s = tpot_s = kv_use = 0.0
    if decode:
        per_round = profile.tokens_per_round if speculating else 1.0
        rounds = sum(c.share * max(c.osl - 1, 0) for c in classes) / per_round
        batch = decode_batch(profile, speculating, lam * rounds / (1 - rho)) if lam else 0.0
        if batch is None:
            return PoolState(False, "decode cannot keep up at any batch", lam, prefill_share=rho)
        if batch > max_seqs:
            return PoolState(False, f"needs {batch:,.0f} sequences in flight, over "
                                    f"max-num-seqs {max_seqs}", lam, batch, rho)
        held = batch * (sum(c.share * c.isl for c in classes) +
                        sum(c.share * c.osl for c in classes) / 2)
        capacity = profile.kv_tokens.get((chunk, max_seqs, speculating), 0)
        kv_use = held / capacity if capacity else math.inf
        if kv_use > 1:
            return PoolState(False, f"{held:,.0f} KV tokens held, over the {capacity:,} the "
                                    "cache holds", lam, batch, rho, kv_use=kv_use)
        step_s = profile.decode_s(batch, speculating) / (1 - rho)
        tpot_s = step_s / per_round
    singles = profile.single_s[chunk] if prefill else ()
    ttft = tuple(s + wait_s + step_s / 2 for s in singles)
    return PoolState(True, "", lam, batch, rho, step_s, tpot_s, ttft, kv_use)


def violation_share(values, shares, limit_s: float) -> float:  # noqa: ANN001
    """Share of requests whose predicted value exceeds the limit (classes by share)."""
    return sum(s for v, s in zip(values, shares, strict=False) if v > limit_s * (1 + 1e-9))


def class_percentile(values, shares, percentile: float) -> float:  # noqa: ANN001
    """The smallest class value at or under which ``percentile`` % of requests fall."""
    total = 0.0
    for value, share in sorted(zip(values, shares, strict=False)):
        total += share
        if total * 100 >= percentile - 1e-9:
            return value
    return max(values)
