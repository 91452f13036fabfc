"""From screened and verified candidates to the plan's answer: the chosen layout, the best
per device type, the Pareto fronts, and for each the reason it wins and the command
that reproduces its verification."""

from __future__ import annotations

from typing import Any

from phasewise.plan.profile import Profile
from phasewise.plan.queueing import class_percentile
from phasewise.plan.screen import Candidate, Layout, rank_key
from phasewise.plan.types import CandidateRow, Front, PlanReport, PoolRow, TargetResult
from phasewise.plan.verify import Verification, simulate_command
from phasewise.version import __version__

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6
# E2E percentile of the latency axis when no SLO names one.
DEFAULT_LATENCY_PERCENTILE = 90.0
# Shares worth naming in a reason: below these a part does not explain a win.
NAMED_NETWORK_SHARE = 0.02
KV_LIMITING_USE = 0.8


def build_report(prepared: Any, candidates: list[Candidate], screened: int,
                 verified: dict[int, Verification]) -> PlanReport:
    study, spec = prepared.study, prepared.spec
    problem = study.problem
    profiles = {p.shape: p for p in prepared.profiles}
    by_index = {c.index: c for c in candidates}
    rows = _Rows(lambda i: _row(by_index[i], verified.get(i), prepared, profiles))
    checked = sorted((rows[i] for i in verified), key=_cost_key)
    met = [r for r in checked if r.meets_slos]
    chosen = met[0] if met else None
    targets = ", ".join(t.label for t in problem.targets) or "no SLO"
    closest = None
    if chosen is not None:
        verdict = (f"Cheapest layout meeting {targets}: {chosen.label}, ${chosen.usd_per_hour:,.2f}/h "
                   f"on {chosen.devices} devices, verified by simulation.")
    else:
        closest = min(checked, key=lambda r: (_worst_ratio(r), _cost_key(r))) if checked else \
            _best_screened(rows, candidates)
        verdict = (f"No layout searched meets {targets}"
                   + (f"; closest: {closest.label} ({_shortfall(closest)})." if closest else "."))
    notes = list(prepared.notes)
    return PlanReport(
        tool_version=__version__, model=spec.name, inputs=_inputs(study, prepared),
        shapes_priced=len(prepared.shapes), shapes_unfit=prepared.unfit,
        candidates_screened=screened, candidates_verified=len(verified), chosen=chosen,
        verdict=verdict, closest=closest,
        best_per_device=_best_per_device(rows, candidates, verified),
        verified=checked, fronts=_fronts(candidates, checked, problem), notes=notes)


class _Rows(dict):
    """Candidate rows built when first asked for: a search keeps thousands of candidates
    and the report shows a few."""

    def __init__(self, build) -> None:  # noqa: ANN001
        super().__init__()
        self._build = build

    def __missing__(self, index: int) -> CandidateRow:
        row = self[index] = self._build(index)
        return row


def _cost_key(r: CandidateRow) -> tuple:
    return (round(r.usd_per_hour, 6), r.latency_s, r.index)


def _worst_ratio(r: CandidateRow) -> float:
    ratios = [(t.simulated_s if t.simulated_s is not None else t.predicted_s or 0.0) / t.limit_s
              for t in r.targets]
    return max(ratios) if ratios else 0.0


def _shortfall(r: CandidateRow) -> str:
    parts = []
    for t in r.targets:
        value = t.simulated_s if t.simulated_s is not None else t.predicted_s
        if value is not None and value > t.limit_s:
            parts.append(f"{t.target}: {value * 1e3:,.4g} ms")
    return "; ".join(parts) or r.screen_reason or "meets on the screen, not verified"


def _best_screened(rows: _Rows, candidates: list[Candidate]) -> CandidateRow | None:

    if not candidates:
        return None
    return rows[min(candidates, key=rank_key).index]


def _best_per_device(rows: _Rows, candidates: list[Candidate],
                     verified: dict[int, Verification]) -> list[CandidateRow]:
    """Per device type (and device pair): the cheapest verified layout meeting the SLOs,
    else the best the screen found."""

    first: dict[str, Candidate] = {}
    for c in sorted(candidates, key=rank_key):
        first.setdefault(f"{c.layout.kind} {c.layout.device_types}", c)
    best = {key: rows[c.index] for key, c in first.items()}
    for index, v in verified.items():
        if not v.met:
            continue
        r = rows[index]
        key = f"{r.layout} {r.device_types}"
        current = best[key]
        if not current.meets_slos or _cost_key(r) < _cost_key(current):
            best[key] = r
    return sorted(best.values(), key=lambda r: (not r.meets_slos, r.meets_slos is None,
                                                _cost_key(r)))


# ---------------------------------------------------------------- rows


def _pool(role: str, shape, replicas: int) -> PoolRow:  # noqa: ANN001
    par, prec = shape.parallelism, shape.precision
    return PoolRow(role=role, hardware=shape.device.name, replicas=replicas, tp=par.tp, pp=par.pp,
                   ep=par.ep, attention_dp=par.attention_dp, devices_per_replica=par.devices,
                   weight_dtype=prec.weights, act_dtype=prec.activations, kv_dtype=prec.kv_cache,
                   engine=shape.engine, usd_per_device_hour=shape.device.price_usd_per_hour or 0.0)


def _row(c: Candidate, v: Verification | None, prepared: Any,
         profiles: dict[Any, Profile]) -> CandidateRow:
    study = prepared.study
    problem, layout, pred = study.problem, c.layout, c.prediction
    classes = problem.traffic.classes
    shares = [k.share for k in classes]
    targets = []
    for i, t in enumerate(problem.targets):
        predicted = _predicted(pred, t.metric, shares, t.percentile)
        targets.append(TargetResult(target=t.label, metric=t.metric, percentile=t.percentile,
                                    limit_s=t.limit_s, predicted_s=predicted,
                                    simulated_s=v.observed_s[i] if v else None))
    pools = ([_pool("both", layout.prefill, layout.replicas)] if layout.kind == "aggregated" else
             [_pool("prefill", layout.prefill, layout.replicas),
              _pool("decode", layout.decode, layout.decode_replicas)])
    rate = v.requests_per_s if v else pred.request_rate
    out_tps = v.output_tokens_per_s if v else pred.request_rate * problem.traffic.mean_osl
    latency = v.e2e_p90_s if v else (class_percentile(pred.e2e_s, shares, DEFAULT_LATENCY_PERCENTILE)
                                     if pred.e2e_s else 0.0)
    usd_m = (layout.usd_per_hour / SECONDS_PER_HOUR / out_tps * TOKENS_PER_MILLION
             if out_tps > 0 and layout.usd_per_hour > 0 else None)
    command = None
    if pred.status in ("meets", "misses at load"):
        command = simulate_command(study.model, layout, prepared.speculation, problem.traffic,
                                   problem.load, problem.targets, requests=study.requests,
                                   seed=study.seed, cost=problem.space.cost,
                                   link=problem.space.link, trace_path=study.trace_out)
    return CandidateRow(
        index=c.index, label=layout.label, layout=layout.kind, device_types=layout.device_types,
        pools=pools, devices=layout.devices, usd_per_hour=layout.usd_per_hour,
        max_num_seqs=layout.max_seqs, max_num_batched_tokens=layout.chunk_tokens,
        speculative=layout.speculating, request_rate_rps=rate, screen_status=pred.status,
        screen_reason=pred.reason, targets=targets, predicted_batch=pred.batch,
        predicted_prefill_share=pred.prefill_share, predicted_kv_use=min(pred.kv_use, 1e9),
        kv_transfer_s=(v.kv_transfer_mean_s if v and v.kv_transfer_mean_s is not None else
                       (sum(s * t for s, t in zip(shares, pred.transfer_s, strict=False)) if pred.transfer_s
                        else None)),
        verified=v is not None, meets_slos=v.met if v else None,
        goodput_rps=v.goodput_rps if v else None, attainment=v.attainment if v else None,
        output_tokens_per_s=out_tps,
        tokens_per_s_per_gpu=v.tokens_per_s_per_gpu if v else out_tps / layout.devices,
        tokens_per_s_per_user=(v.tokens_per_s_per_user if v else
                               (1.0 / pred.tpot_s if pred.tpot_s else 0.0)),
        usd_per_million_output_tokens=usd_m, latency_s=latency,
        why=why(layout, pred, profiles, usd_m), simulate_command=command)


def _predicted(pred, metric: str, shares: list[float], percentile: float) -> float | None:  # noqa: ANN001
    if not pred.e2e_s:
        return None
    values = {"ttft": pred.ttft_s, "e2e": pred.e2e_s, "tpot": [pred.tpot_s] * len(shares),
              "itl": [pred.itl_s] * len(shares)}[metric]
    return class_percentile(values, shares, percentile)


def why(layout: Layout, pred, profiles: dict[Any, Profile], usd_m: float | None) -> str:  # noqa: ANN001
    """What bounds the layout: the phase that takes the device time, what bounds its
    decode steps, the KV cache's fill, the collectives' share, the KV transfer."""
    if not pred.e2e_s:
        return pred.reason
    decode_shape = layout.decode or layout.prefill
    profile = profiles.get(decode_shape)
    parts = []
    if layout.kind == "aggregated":
        share = pred.prefill_share
        phase = "prefill" if share > 0.5 else "decode"
        parts.append(f"{phase}-bound: prefill takes {100 * share:.0f}% of each replica's time")
    else:
        parts.append(f"prefill pool {100 * pred.prefill_share:.0f}% busy; decode pool at batch "
                     f"{pred.batch:,.1f}")
    if profile is not None and profile.fits:
        point = profile.point(pred.batch, layout.speculating)
        parts.append(f"decode steps {point.bound}-bound at batch {pred.batch:,.1f}")
        if point.network_share >= NAMED_NETWORK_SHARE:
            parts.append(f"collectives {100 * point.network_share:.0f}% of a decode step")
    if pred.kv_use >= KV_LIMITING_USE:
        parts.append(f"KV cache {100 * pred.kv_use:.0f}% full: capacity limits the batch")
    else:
        parts.append(f"KV cache {100 * pred.kv_use:.0f}% full")
    if pred.transfer_s:
        parts.append(f"KV transfer {1e3 * max(pred.transfer_s):,.3g} ms of TTFT")
    if layout.speculating:
        parts.append(f"speculation yields {profile.tokens_per_round:.2f} tokens a round"
                     if profile else "speculative")
    if usd_m is not None:
        parts.append(f"${usd_m:,.3g} per million output tokens")
    return "; ".join(parts)


# ---------------------------------------------------------------- fronts


def pareto(points: list[tuple[float, float, int]], x_larger: bool,
           y_larger: bool) -> list[tuple[float, float, int]]:
    """Points no other point beats on both axes (ties kept once, lowest index first)."""
    sx, sy = (-1 if x_larger else 1), (-1 if y_larger else 1)
    ordered = sorted(points, key=lambda p: (sx * p[0], sy * p[1], p[2]))
    front, best_y = [], None
    for x, y, i in ordered:
        if best_y is None or sy * y < best_y:
            front.append((x, y, i))
            best_y = sy * y
    return front


def _analytic_point(c: Candidate, problem: Any) -> dict[str, float | None]:
    """A candidate's position on the fronts from the screen's figures (as ``_row`` gives
    them for a candidate not simulated)."""
    pred, layout = c.prediction, c.layout
    shares = [k.share for k in problem.traffic.classes]
    out_tps = pred.request_rate * problem.traffic.mean_osl
    return {"tokens_per_s_per_gpu": out_tps / layout.devices,
            "tokens_per_s_per_user": 1.0 / pred.tpot_s if pred.tpot_s else 0.0,
            "latency_s": class_percentile(pred.e2e_s, shares, DEFAULT_LATENCY_PERCENTILE),
            "usd_per_million_output_tokens": (layout.usd_per_hour / SECONDS_PER_HOUR / out_tps
                                              * TOKENS_PER_MILLION
                                              if out_tps > 0 and layout.usd_per_hour > 0 else None)}


def _fronts(candidates: list[Candidate], checked: list[CandidateRow], problem: Any) -> list[Front]:
    stable = [(c.index, _analytic_point(c, problem)) for c in candidates
              if c.prediction.status in ("meets", "misses at load")]
    simulated = [(r.index, {k: getattr(r, k) for k in ("tokens_per_s_per_gpu",
                                                       "tokens_per_s_per_user", "latency_s",
                                                       "usd_per_million_output_tokens")})
                 for r in checked]
    out = []
    for source, pool in (("simulated", simulated), ("analytic", stable)):
        for name, x, y, xl, yl in (
                ("throughput", "tokens_per_s_per_gpu", "tokens_per_s_per_user", True, True),
                ("cost-latency", "latency_s", "usd_per_million_output_tokens", False, False)):
            pts = [(p[x], p[y], i) for i, p in pool if p[y] is not None]
            front = pareto(pts, xl, yl)
            out.append(Front(name=name, x=x, y=y, x_larger_better=xl, y_larger_better=yl,
                             source=source, indices=[i for _, _, i in front],
                             points=[(a, b) for a, b, _ in front]))
    return out


def _inputs(study: Any, prepared: Any) -> dict:
    problem = study.problem
    space = problem.space
    traffic = problem.traffic
    spec = prepared.speculation
    return {
        "model": study.model,
        "traffic": {"classes": [{"isl": c.isl, "osl": c.osl, "share": c.share}
                                for c in traffic.classes],
                    "isl": traffic.isl, "osl": traffic.osl, "trace": traffic.trace,
                    "longest_tokens": traffic.longest_tokens},
        "load": {"kind": problem.load.kind, "value": problem.load.value,
                 "request_rate_rps": problem.load.request_rate(traffic)},
        "targets": [{"metric": t.metric, "limit_s": t.limit_s, "percentile": t.percentile}
                    for t in problem.targets],
        "hardware": [{"name": d.name, "usd_per_hour": d.price_usd_per_hour,
                      "price_basis": getattr(getattr(d, "price", None), "basis", None)}
                     for d in space.hardware],
        "tp": list(space.tp), "pp": list(space.pp),
        "ep": list(space.ep) if space.ep else None,
        "weight_dtypes": list(space.weight_dtypes) if space.weight_dtypes else None,
        "kv_dtypes": list(space.kv_dtypes), "max_num_seqs": list(space.max_seqs),
        "max_num_batched_tokens": list(space.chunk_tokens), "layouts": list(space.layouts),
        "mixed_pools": space.mixed_pools, "speculation": list(space.speculation),
        "task": space.task, "draft": None if spec is None else {
            "tokens": spec.tokens, "accept": spec.accept, "head_fraction": spec.head_fraction,
            "draft": spec.draft, "source": spec.source},
        "max_devices": space.max_devices, "max_usd_per_hour": space.max_usd_per_hour,
        "engines": list(space.engines), "cost_model": space.cost, "kv_link": space.link,
        "verify": study.verify, "requests": study.requests, "seed": study.seed,
    }
