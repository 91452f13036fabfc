"""The analytic screen: every candidate layout priced from its shapes' profiles.

A candidate is a layout (colocated replicas, or a prefill pool and a decode pool), its
batch limits and whether it speculates. For each one the screen checks the memory fit,
the SLOs at the idle server (a lower bound no replica count can beat) and the steady
state at the target load (``plan.queueing``), and prices it in dollars an hour. Replica
counts are not guessed: for each shape and knob setting the screen finds the fewest
replicas that are stable and the fewest that meet the SLOs on the analytic model, and
keeps those and a few more (the simulator decides how much headroom the tail needs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phasewise.plan.profile import Profile
from phasewise.plan.queueing import PoolState, pool_state, violation_share
from phasewise.plan.space import Load, PoolShape, SearchSpace, Target, Traffic

# Most replicas of one shape the screen considers (a search bound, not a limit of the model).
MAX_REPLICAS = 4096
# Disaggregated pairs kept as candidates per (prefill device, decode device) and status:
# the cheapest few; every pair is evaluated and counted.
PAIRS_KEPT = 4
# Damped fixed-point steps of a closed loop's rate: each halves the distance to the
# rate its latencies imply, so 40 leave 2⁻⁴⁰ of the first guess's error.
CLOSED_LOOP_ITERATIONS = 40

STATUS_ORDER = {"meets": 0, "misses at load": 1, "unstable": 2, "misses at idle": 3,
                "over budget": 4}


@dataclass(frozen=True, slots=True)
class Layout:
    """A deployment. Colocated: ``replicas`` of ``prefill`` run both phases; disaggregated:
    ``replicas`` prefill instances and ``decode_replicas`` of ``decode``."""

    kind: str
    prefill: PoolShape
    replicas: int
    max_seqs: int
    chunk_tokens: int | None  # the chunked scheduler's budget; None: the default budget
    speculating: bool
    decode: PoolShape | None = None
    decode_replicas: int = 0

    @property
    def devices(self) -> int:
        extra = self.decode.devices * self.decode_replicas if self.decode else 0
        return self.prefill.devices * self.replicas + extra

    @property
    def usd_per_hour(self) -> float:
        extra = self.decode.usd_per_hour * self.decode_replicas if self.decode else 0.0
        return self.prefill.usd_per_hour * self.replicas + extra

    @property
    def device_types(self) -> str:
        if self.decode and self.decode.device.name != self.prefill.device.name:
            return f"{self.prefill.device.name}+{self.decode.device.name}"
        return self.prefill.device.name

    @property
    def label(self) -> str:
        spec = " +spec" if self.speculating else ""
        if self.kind == "aggregated":
            return (f"{self.replicas}× [{self.prefill.label}] seqs {self.max_seqs} "
                    f"chunk {self.chunk_tokens}{spec}")
        return (f"prefill {self.replicas}× [{self.prefill.label}] + decode "
                f"{self.decode_replicas}× [{self.decode.label}] seqs {self.max_seqs}{spec}")


@dataclass(frozen=True, slots=True)
class Prediction:
    """The analytic figures of a candidate at the target load (per class where they
    differ between classes)."""

    status: str
    reason: str
    request_rate: float
    ttft_s: tuple[float, ...]
    tpot_s: float
    itl_s: float
    e2e_s: tuple[float, ...]
    batch: float
    prefill_share: float
    kv_use: float
    transfer_s: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Candidate:
    index: int
    layout: Layout
    prediction: Prediction


@dataclass(frozen=True, slots=True)
class Problem:
    """What one plan answers: the traffic, the load and the targets, on a search space."""

    traffic: Traffic
    load: Load
    targets: tuple[Target, ...]
    space: SearchSpace


# ---------------------------------------------------------------- checks


def _misses(targets, classes, ttft, tpot, itl, e2e) -> list[str]:  # noqa: ANN001
    shares = [c.share for c in classes]
    values = {"ttft": ttft, "tpot": [tpot] * len(classes), "itl": [itl] * len(classes),
              "e2e": e2e}
    return [t.label for t in targets
            if violation_share(values[t.metric], shares, t.limit_s) > 1 - t.percentile / 100 + 1e-9]


def _budget_ok(layout: Layout, space: SearchSpace) -> bool:
    return ((space.max_devices is None or layout.devices <= space.max_devices) and
            (space.max_usd_per_hour is None or layout.usd_per_hour <= space.max_usd_per_hour + 1e-9))


def idle_misses(profile: Profile, problem: Problem, chunk: int, speculating: bool,
                transfer_s: tuple[float, ...] = (), decode: Profile | None = None) -> list[str]:
    """SLOs one request on an idle server already misses: no replica count helps."""
    classes = problem.traffic.classes
    dec = decode or profile
    per_round = dec.tokens_per_round if speculating else 1.0
    step = dec.decode_s(1, speculating)
    ttft = [s + (transfer_s[i] if transfer_s else 0.0)
            for i, s in enumerate(profile.single_s[chunk])]
    e2e = [t + max(c.osl - 1, 0) * step / per_round for t, c in zip(ttft, classes, strict=False)]
    return _misses(problem.targets, classes, ttft, step / per_round, step, e2e)


# ---------------------------------------------------------------- colocated


def colocated(profile: Profile, problem: Problem, replicas: int, max_seqs: int, chunk: int,
              speculating: bool) -> Prediction:
    """A colocated layout of ``replicas`` replicas at the target load."""
    classes = problem.traffic.classes
    rate = problem.load.request_rate(problem.traffic)
    if rate is None:
        return _closed_loop(profile, problem, replicas, max_seqs, chunk, speculating)
    state = pool_state(profile, classes, rate / replicas, chunk=chunk, max_seqs=max_seqs,
                       speculating=speculating)
    return _prediction(state, problem, rate)


def _prediction(state: PoolState, problem: Problem, rate: float,
                transfer_s: tuple[float, ...] = (), decode: PoolState | None = None,
                waits: tuple[float, ...] = ()) -> Prediction:
    classes = problem.traffic.classes
    if not state.stable or (decode is not None and not decode.stable):
        reason = state.reason or decode.reason
        return Prediction("unstable", reason, rate, (), 0.0, 0.0, (), state.batch,
                          state.prefill_share, state.kv_use)
    dec = decode or state
    ttft = tuple(t + (transfer_s[i] if transfer_s else 0.0) + (waits[i] if waits else 0.0)
                 for i, t in enumerate(state.ttft_s))
    e2e = tuple(t + max(c.osl - 1, 0) * dec.tpot_s for t, c in zip(ttft, classes, strict=False))
    missed = _misses(problem.targets, classes, ttft, dec.tpot_s, dec.step_s, e2e)
    return Prediction("misses at load" if missed else "meets", "; ".join(missed), rate, ttft,
                      dec.tpot_s, dec.step_s, e2e, dec.batch, state.prefill_share, dec.kv_use,
                      transfer_s)


def _closed_loop(profile: Profile, problem: Problem, replicas: int, max_seqs: int, chunk: int,
                 speculating: bool) -> Prediction:
    """``users`` clients with no think time: each replica holds users / replicas requests,
    at most ``max_seqs`` in flight and the rest queued; the rate settles where rate =
    users / E2E (Little's law), found by damped iteration. A queued request waits
    (queued requests) ÷ rate before it is admitted (Little's law on the queue)."""
    classes = problem.traffic.classes
    per_replica = problem.load.users / replicas
    in_flight = min(per_replica, max_seqs)
    lam = in_flight / max(sum(c.share * s for c, s in zip(classes, profile.single_s[chunk], strict=False))
                          + sum(c.share * c.osl for c in classes)
                          * profile.decode_s(in_flight, speculating), 1e-9)
    state, wait_s = None, 0.0
    for _ in range(CLOSED_LOOP_ITERATIONS):
        state = pool_state(profile, classes, lam, chunk=chunk, max_seqs=max_seqs,
                           speculating=speculating)
        if not state.stable:
            lam *= 0.8
            continue
        wait_s = max(0.0, per_replica - max_seqs) / lam
        e2e = wait_s + sum(c.share * (t + max(c.osl - 1, 0) * state.tpot_s)
                           for c, t in zip(classes, state.ttft_s, strict=False))
        lam = 0.5 * lam + 0.5 * per_replica / e2e
    waits = tuple(wait_s for _ in classes)
    return _prediction(state, problem, lam * replicas, waits=waits)


# ---------------------------------------------------------------- replica counts


def _smallest(ok, lo: int, hi: int) -> int | None:  # noqa: ANN001
    """The smallest n in [lo, hi] with ok(n), for ok monotone in n; None if none: steps
    of doubling length up, then bisection back."""
    if lo > hi:
        return None
    n, step = lo, 1
    while not ok(n):
        if n >= hi:
            return None
        lo, n, step = n + 1, min(hi, n + step), step * 2
    while lo < n:
        mid = (lo + n) // 2
        if ok(mid):
            n = mid
        else:
            lo = mid + 1
    return n


def replica_counts(evaluate, extra: int, cap: int) -> list[int]:  # noqa: ANN001
    """The fewest stable replicas, the fewest meeting the SLOs on the analytic model, and
    ``extra`` more."""
    stable = _smallest(lambda n: evaluate(n).status != "unstable", 1, cap)
    if stable is None:
        return [cap]
    meets = _smallest(lambda n: evaluate(n).status == "meets", stable, cap)
    base = meets if meets is not None else stable
    counts = [stable] + [n for n in range(base, base + extra + 1) if n <= cap]
    return sorted(dict.fromkeys(counts))


def screen_colocated(profiles: list[Profile], problem: Problem, start: int) -> list[Candidate]:
    space = problem.space
    out: list[Candidate] = []
    for profile in profiles:
        if not profile.fits:
            continue
        cap = _cap(profile.shape, space)
        for chunk in space.chunk_tokens:
            for seqs in space.max_seqs:
                for speculating in space.speculation:
                    if speculating and not profile.spec:
                        continue
                    if not profile.kv_tokens.get((chunk, seqs, speculating)):
                        continue
                    missed = idle_misses(profile, problem, chunk, speculating)

                    def evaluate(n, chunk=chunk, seqs=seqs, speculating=speculating,  # noqa: ANN001, ANN202
                                 profile=profile):
                        return colocated(profile, problem, n, seqs, chunk, speculating)

                    counts = [1] if missed else replica_counts(evaluate, space.extra_replicas, cap)
                    for n in counts:
                        layout = Layout("aggregated", profile.shape, n, seqs, chunk, speculating)
                        pred = evaluate(n)
                        if missed:
                            pred = _with_status(pred, "misses at idle", "; ".join(missed))
                        elif not _budget_ok(layout, space):
                            pred = _with_status(pred, "over budget", "over the device or $/h budget")
                        out.append(Candidate(start + len(out), layout, pred))
    return out


def _cap(shape: PoolShape, space: SearchSpace) -> int:
    cap = MAX_REPLICAS
    if space.max_devices is not None:
        cap = min(cap, max(1, space.max_devices // shape.devices))
    if space.max_usd_per_hour is not None and shape.usd_per_hour > 0:
        cap = min(cap, max(1, int(space.max_usd_per_hour // shape.usd_per_hour)))
    return cap


def _with_status(pred: Prediction, status: str, reason: str) -> Prediction:
    from dataclasses import replace

    return replace(pred, status=status, reason=reason)


# ---------------------------------------------------------------- disaggregated


@dataclass(frozen=True, slots=True)
class _Side:
    profile: Profile
    replicas: int
    state: PoolState
    chunk: int
    max_seqs: int = 0
    speculating: bool = False


def _pool_options(profile: Profile, problem: Problem, rate: float, role: str, seqs: int,
                  speculating: bool, chunk: int) -> list[_Side]:
    """Replica counts of one pool: the fewest stable, the fewest meeting that pool's own
    SLOs (TTFT for prefill; TPOT and ITL for decode), and ``extra`` more."""
    classes = problem.traffic.classes
    targets = [t for t in problem.targets
               if t.metric in (("ttft",) if role == "prefill" else ("tpot", "itl"))]
    prefill = role == "prefill"

    def state(n: int) -> PoolState:
        return pool_state(profile, classes, rate / n, chunk=chunk, max_seqs=seqs,
                          speculating=speculating, prefill=prefill, decode=not prefill)

    def status(n: int):  # noqa: ANN202
        s = state(n)
        if not s.stable:
            return _Status("unstable")
        missed = _misses(targets, classes, s.ttft_s if prefill else [0.0] * len(classes),
                         s.tpot_s, s.step_s, [0.0] * len(classes))
        return _Status("misses at load" if missed else "meets")

    counts = replica_counts(status, problem.space.extra_replicas, _cap(profile.shape, problem.space))
    return [_Side(profile, n, state(n), chunk, seqs, speculating) for n in counts
            if state(n).stable]


@dataclass(frozen=True, slots=True)
class _Status:
    status: str


def transfer_s(problem: Problem, kv_bytes_per_token: float, link, lanes):  # noqa: ANN001
    """KV transfer per class as the simulator moves it: latency + ISL × KV bytes per token
    ÷ (link bandwidth × devices sending in parallel); ``lanes`` may be an array."""
    return [link.latency_s + c.isl * kv_bytes_per_token / (link.bandwidth_bytes_per_s * lanes)
            for c in problem.traffic.classes]


def screen_disaggregated(profiles: list[Profile], problem: Problem, start: int, link,  # noqa: ANN001
                         kv_bytes: dict, disagg_chunk: int) -> tuple[list[Candidate], int]:
    """Every prefill pool against every decode pool of the same formats, PP and EP (and
    the same device unless mixed pools are allowed); returns the kept candidates and the
    number of pairs evaluated."""
    space = problem.space
    if "disaggregated" not in space.layouts:
        return [], 0
    rate = problem.load.request_rate(problem.traffic)
    if rate is None:
        rate = _closed_loop_rate(profiles, problem, disagg_chunk)
        if rate is None:
            return [], 0
    groups: dict[tuple, tuple[list, list]] = {}
    for p in profiles:
        if not p.fits or disagg_chunk not in p.single_s:
            continue
        sh = p.shape
        key = (sh.precision, sh.parallelism.pp, sh.parallelism.ep, sh.engine)
        pre, dec = groups.setdefault(key, ([], []))
        pre.extend(_pool_options(p, problem, rate, "prefill", min(space.max_seqs), False,
                                 disagg_chunk))
        for seqs in space.max_seqs:
            for speculating in space.speculation:
                if speculating and not p.spec:
                    continue
                if not p.kv_tokens.get((disagg_chunk, seqs, speculating)):
                    continue
                dec.extend(_pool_options(p, problem, rate, "decode", seqs, speculating,
                                         disagg_chunk))
    out: list[Candidate] = []
    evaluated = 0
    for key, (pre, dec) in groups.items():
        if not pre or not dec:
            continue
        evaluated += len(pre) * len(dec)
        out.extend(_pairs(pre, dec, problem, start + len(out), link, kv_bytes[key[0]], rate))
    return out, evaluated


def _pairs(pre: list[_Side], dec: list[_Side], problem: Problem, start: int, link,  # noqa: ANN001
           kv_bytes_per_token: float, rate: float) -> list[Candidate]:
    """All pairs of one group at once (numpy), keeping the cheapest few per device pair."""
    space, classes = problem.space, problem.traffic.classes
    usd = np.array([s.profile.shape.usd_per_hour * s.replicas for s in pre])[:, None] + \
        np.array([s.profile.shape.usd_per_hour * s.replicas for s in dec])[None, :]
    devices = np.array([s.profile.shape.devices * s.replicas for s in pre])[:, None] + \
        np.array([s.profile.shape.devices * s.replicas for s in dec])[None, :]
    lanes = np.minimum(np.array([s.profile.shape.devices for s in pre])[:, None],
                       np.array([s.profile.shape.devices for s in dec])[None, :])
    moves = transfer_s(problem, kv_bytes_per_token, link, lanes)
    tpot = np.array([s.state.tpot_s for s in dec])[None, :]
    itl = np.array([s.state.step_s for s in dec])[None, :]
    miss = np.zeros(usd.shape, dtype=bool)
    idle_miss = np.zeros(usd.shape, dtype=bool)
    idle_step = np.array([s.profile.decode_s(1, s.speculating) /
                          (s.profile.tokens_per_round if s.speculating else 1.0) for s in dec])
    for t in problem.targets:
        bad = np.zeros(usd.shape)
        bad_idle = np.zeros(usd.shape)
        for i, c in enumerate(classes):
            ttft = np.array([s.state.ttft_s[i] for s in pre])[:, None] + moves[i]
            ttft_idle = np.array([s.profile.single_s[s.chunk][i] for s in pre])[:, None] + moves[i]
            value = {"ttft": ttft, "tpot": tpot, "itl": itl,
                     "e2e": ttft + max(c.osl - 1, 0) * tpot}[t.metric]
            idle = {"ttft": ttft_idle, "tpot": idle_step[None, :], "itl": idle_step[None, :],
                    "e2e": ttft_idle + max(c.osl - 1, 0) * idle_step[None, :]}[t.metric]
            bad = bad + c.share * (value > t.limit_s * (1 + 1e-9))
            bad_idle = bad_idle + c.share * (idle > t.limit_s * (1 + 1e-9))
        miss |= bad > 1 - t.percentile / 100 + 1e-9
        idle_miss |= bad_idle > 1 - t.percentile / 100 + 1e-9
    over = np.zeros(usd.shape, dtype=bool)
    if space.max_devices is not None:
        over |= devices > space.max_devices
    if space.max_usd_per_hour is not None:
        over |= usd > space.max_usd_per_hour + 1e-9
    status = np.where(over, 4, np.where(idle_miss, 3, np.where(miss, 1, 0)))
    if not space.mixed_pools:
        same = np.array([s.profile.shape.device.name for s in pre])[:, None] == \
            np.array([s.profile.shape.device.name for s in dec])[None, :]
        status = np.where(same, status, -1)
    kept = _keep(status, usd, pre, dec)
    names = {v: k for k, v in STATUS_ORDER.items()}
    out = []
    for i, j in kept:
        p, d = pre[i], dec[j]
        layout = Layout("disaggregated", p.profile.shape, p.replicas, d.max_seqs, None,
                        d.speculating, d.profile.shape, d.replicas)
        move = tuple(float(m[i, j]) for m in moves)
        pred = (_prediction(p.state, problem, rate, move, d.state)
                if problem.load.users is None else _closed_pair(p, d, problem, move, rate))
        code = int(status[i, j])
        if code in (3, 4):
            pred = _with_status(pred, names[code], "over the device or $/h budget" if code == 4
                                else "misses the SLOs on an idle server")
        out.append(Candidate(start + len(out), layout, pred))
    return out


def _closed_loop_rate(profiles: list[Profile], problem: Problem, chunk: int) -> float | None:
    """A first rate for ``users`` clients on disaggregated pools: users ÷ the shortest
    idle E2E any shape gives (the pools are sized at it; each pair then finds its own)."""
    classes, users = problem.traffic.classes, problem.load.users
    batch = min(users, max(problem.space.max_seqs))
    e2e = [sum(c.share * (s + max(c.osl - 1, 0) * p.decode_s(batch, False))
               for c, s in zip(classes, p.single_s[chunk], strict=False))
           for p in profiles if p.fits and chunk in p.single_s]
    return users / min(e2e) if e2e else None


def _closed_pair(p: _Side, d: _Side, problem: Problem, move: tuple[float, ...],
                 rate: float) -> Prediction:
    """A disaggregated pair under ``users`` clients: the rate settles where rate = users ÷
    E2E (damped iteration, as ``_closed_loop``); users beyond the decode pool's sequence
    slots wait (queued users) ÷ rate."""
    classes, users = problem.traffic.classes, problem.load.users
    lam, pre, dec, wait_s = rate, p.state, d.state, 0.0
    for _ in range(CLOSED_LOOP_ITERATIONS):
        pre = pool_state(p.profile, classes, lam / p.replicas, chunk=p.chunk,
                         max_seqs=p.max_seqs, speculating=False, decode=False)
        dec = pool_state(d.profile, classes, lam / d.replicas, chunk=d.chunk,
                         max_seqs=d.max_seqs, speculating=d.speculating, prefill=False)
        if not (pre.stable and dec.stable):
            lam *= 0.8
            continue
        wait_s = max(0.0, users - d.replicas * d.max_seqs) / lam
        e2e = wait_s + sum(c.share * (t + m + max(c.osl - 1, 0) * dec.tpot_s)
                           for c, t, m in zip(classes, pre.ttft_s, move, strict=False))
        lam = 0.5 * lam + 0.5 * users / e2e
    return _prediction(pre, problem, lam, move, dec, waits=tuple(wait_s for _ in classes))


def _keep(status, usd, pre: list[_Side], dec: list[_Side]) -> list[tuple[int, int]]:  # noqa: ANN001
    """The cheapest ``PAIRS_KEPT`` pairs of each status per (prefill, decode) device pair."""
    kept = []
    pre_dev = [s.profile.shape.device.name for s in pre]
    dec_dev = [s.profile.shape.device.name for s in dec]
    buckets: dict[tuple, list] = {}
    order = np.lexsort((usd.ravel(), status.ravel()))
    ncols = usd.shape[1]
    for flat in order:
        i, j = divmod(int(flat), ncols)
        code = int(status[i, j])
        if code < 0:
            continue
        bucket = buckets.setdefault((pre_dev[i], dec_dev[j], code), [])
        if len(bucket) < PAIRS_KEPT:
            bucket.append((i, j))
            kept.append((i, j))
    return sorted(kept)


def rank_key(c: Candidate) -> tuple:
    """Screened order: meeting the SLOs first, then cheaper, then faster end to end."""
    pred = c.prediction
    e2e = sum(pred.e2e_s) / len(pred.e2e_s) if pred.e2e_s else float("inf")
    return (STATUS_ORDER[pred.status], round(c.layout.usd_per_hour, 6), e2e, c.index)
