"""Per-request latencies, throughput, goodput and load over time, from a finished run.

Names follow the serving benchmarks users read (vLLM's ``bench serve``, GenAI-Perf):
TTFT is arrival to first token; TPOT is (E2E − TTFT) / (OSL − 1); ITL is every gap
between two consecutive tokens of a request; E2E is arrival to last token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phasewise.serving.replica import Replica
from phasewise.serving.simulator import Simulation
from phasewise.serving.types import LatencyStats, PoolInputs, SimInputs, SimSummary, SloReport
from phasewise.specs.precision import MODULE_CLASSES
from phasewise.version import __version__


@dataclass(frozen=True, slots=True)
class Slo:
    """Targets a request must meet to count as good; None leaves a metric free."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float = 90.0


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """One row per request, in request order, as columns; ``itl_s`` holds every gap."""

    id: np.ndarray
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray  # NaN for one-token answers
    e2el_s: np.ndarray
    preemptions: np.ndarray
    replica: np.ndarray
    decode_replica: np.ndarray
    transfer_s: np.ndarray
    itl_s: np.ndarray

    def rows(self) -> list[dict]:
        """Per-request rows for JSONL, numbers as plain Python values."""
        cols = ("id", "arrival_s", "input_tokens", "output_tokens", "ttft_s", "tpot_s", "e2el_s",
                "preemptions", "replica", "decode_replica", "transfer_s")
        lists = [getattr(self, c).tolist() for c in cols]
        out = []
        for values in zip(*lists, strict=False):
            row = dict(zip(cols, values, strict=False))
            if row["tpot_s"] != row["tpot_s"]:  # NaN: a one-token answer has no TPOT
                row["tpot_s"] = None
            out.append(row)
        return out


def token_times(seq, ticks: list[np.ndarray]) -> np.ndarray:  # noqa: ANN001
    """Every token time of a served request, in order (see ``Seq.pieces``)."""
    parts = []
    for piece in seq.pieces:
        if isinstance(piece, float):
            parts.append(np.array([piece]))
        elif len(piece) == 3:
            replica, k0, n = piece
            parts.append(ticks[replica][k0:k0 + n])
        else:  # speculative rounds of p/q tokens: token j lands in round ⌈j·q/p⌉
            replica, k0, n, p, q = piece
            rounds = -(-np.arange(1, n + 1) * q // p)
            parts.append(ticks[replica][k0 + rounds - 1])
    return np.concatenate(parts)


def request_metrics(sim: Simulation) -> RequestMetrics:
    """Per-request figures of every request past the warm-up."""
    ticks = [np.frombuffer(r.tick_end_s, dtype=float) for r in sim.replicas]
    seqs = [s for s in sim.requests if s.id >= sim.warmup]
    ttft, e2el, gaps = np.empty(len(seqs)), np.empty(len(seqs)), []
    for i, seq in enumerate(seqs):
        times = token_times(seq, ticks)
        ttft[i] = times[0] - seq.arrival_s + sim.frontend_s
        e2el[i] = times[-1] - seq.arrival_s + sim.frontend_s
        if len(times) > 1:
            gaps.append(np.diff(times))
    osl = np.array([s.osl for s in seqs])
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(osl > 1, (e2el - ttft) / np.maximum(osl - 1, 1), np.nan)
    return RequestMetrics(
        id=np.array([s.id for s in seqs]), arrival_s=np.array([s.arrival_s for s in seqs]),
        input_tokens=np.array([s.isl for s in seqs]), output_tokens=osl, ttft_s=ttft,
        tpot_s=tpot, e2el_s=e2el, preemptions=np.array([s.preemptions for s in seqs]),
        replica=np.array([s.replica for s in seqs]),
        decode_replica=np.array([s.decode_replica for s in seqs]),
        transfer_s=np.array([s.transfer_s for s in seqs]),
        itl_s=np.concatenate(gaps) if gaps else np.empty(0))


def latency_stats(values: np.ndarray, percentiles: tuple[float, ...] = (50, 90, 99)
                  ) -> LatencyStats:
    values = values[~np.isnan(values)]
    if not len(values):
        return LatencyStats(count=0, mean_s=0.0, p50_s=0.0, p90_s=0.0, p99_s=0.0, max_s=0.0,
                            percentiles={percentile_key(q): 0.0 for q in percentiles})
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    asked = np.percentile(values, list(percentiles))
    return LatencyStats(count=len(values), mean_s=float(values.mean()), p50_s=float(p50),
                        p90_s=float(p90), p99_s=float(p99), max_s=float(values.max()),
                        percentiles={percentile_key(q): float(v)
                                     for q, v in zip(percentiles, asked, strict=False)})


def percentile_key(q: float) -> str:
    """'p50', 'p99.9'."""
    return f"p{q:g}"


def step_table(replica: Replica) -> dict[str, np.ndarray]:
    """A replica's steps as columns (``Replica.STEP_FIELDS``)."""
    data = np.frombuffer(replica.steps, dtype=float).reshape(-1, len(Replica.STEP_FIELDS))
    return {f: data[:, i] for i, f in enumerate(Replica.STEP_FIELDS)}


def slo_report(m: RequestMetrics, slo: Slo, duration_s: float, idle_ttft_s: float,
               idle_tpot_s: float) -> SloReport:
    good = np.ones(len(m.id), dtype=bool)
    if slo.ttft_s is not None:
        good &= m.ttft_s <= slo.ttft_s
    if slo.tpot_s is not None:
        good &= np.isnan(m.tpot_s) | (m.tpot_s <= slo.tpot_s)
    attainment = float(good.mean())
    tpots = m.tpot_s[~np.isnan(m.tpot_s)]
    unreachable = []
    if slo.ttft_s is not None and slo.ttft_s < idle_ttft_s:
        unreachable.append(f"TTFT ≤ {slo.ttft_s * 1e3:.4g} ms is below the idle-server TTFT of "
                           f"{idle_ttft_s * 1e3:.4g} ms")
    if slo.tpot_s is not None and slo.tpot_s < idle_tpot_s:
        unreachable.append(f"TPOT ≤ {slo.tpot_s * 1e3:.4g} ms is below the idle-server TPOT of "
                           f"{idle_tpot_s * 1e3:.4g} ms")
    return SloReport(
        ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, percentile=slo.percentile, attainment=attainment,
        goodput_rps=float(good.sum() / duration_s) if duration_s else 0.0,
        met=attainment * 100 >= slo.percentile - 1e-9,
        ttft_at_percentile_s=float(np.percentile(m.ttft_s, slo.percentile)),
        tpot_at_percentile_s=float(np.percentile(tpots, slo.percentile)) if len(tpots) else 0.0,
        unreachable=unreachable)


def summarize(sim: Simulation, *, slo: Slo | None = None, workload: dict | None = None,
              metrics: RequestMetrics | None = None,
              percentiles: tuple[float, ...] = (50, 90, 99)) -> SimSummary:
    m = metrics or request_metrics(sim)
    stats = lambda values: latency_stats(values, percentiles)  # noqa: E731
    start_s = float(m.arrival_s.min())
    duration_s = float((m.arrival_s + m.e2el_s).max() - start_s) or 1e-12
    load = _load_over_time(sim.replicas, duration_s)
    idle_ttft_s, idle_tpot_s = _idle_server(sim, m)
    tpot = stats(m.tpot_s)
    output_tokens = int(m.output_tokens.sum())
    transfers = m.transfer_s[m.decode_replica != m.replica] if sim.transfers else None
    cached_tokens = sum(r.prefix_hit_tokens for r in sim.replicas)
    return SimSummary(
        tool_version=__version__, inputs=_inputs(sim, workload or {}),
        requests=len(m.id), devices=sim.devices, duration_s=duration_s, steps=sim.steps,
        events=sim.events, priced_shapes=sim.priced_shapes,
        ttft=stats(m.ttft_s), tpot=tpot, itl=stats(m.itl_s), e2el=stats(m.e2el_s),
        request_rate_rps=(len(m.id) - 1) / float(m.arrival_s.max() - start_s)
        if len(m.id) > 1 and m.arrival_s.max() > start_s else 0.0,
        requests_per_s=len(m.id) / duration_s,
        input_tokens_per_s=float(m.input_tokens.sum()) / duration_s,
        output_tokens_per_s=output_tokens / duration_s,
        total_tokens_per_s=float(m.input_tokens.sum() + output_tokens) / duration_s,
        tokens_per_s_per_gpu=output_tokens / duration_s / sim.devices,
        tokens_per_s_per_user=1.0 / tpot.mean_s if tpot.mean_s else 0.0,
        preemptions=int(m.preemptions.sum()),
        prefix_cached_tokens=cached_tokens,
        kv_transfer_mean_s=float(transfers.mean()) if transfers is not None and len(transfers)
        else None,
        idle_ttft_s=idle_ttft_s, idle_tpot_s=idle_tpot_s,
        slo=slo_report(m, slo, duration_s, idle_ttft_s, idle_tpot_s) if slo else None,
        notes=sim.notes + _load_notes(sim, m, idle_ttft_s, idle_tpot_s, slo), **load)


# A queue is growing when its second half holds this much more than its first, on average.
GROWING_QUEUE_FACTOR = 1.5


def _load_notes(sim: Simulation, m: RequestMetrics, idle_ttft_s: float, idle_tpot_s: float,
                slo: Slo | None) -> list[str]:
    """Overload (arrivals outpacing completions, the queue growing) and SLOs that even an
    idle server misses."""
    notes = []
    waits = m.ttft_s
    half = len(waits) // 2
    if sim.closed_loop is None and half >= 10:
        first, second = float(np.mean(waits[:half])), float(np.mean(waits[half:]))
        arrival_rps = (len(m.id) - 1) / max(float(np.ptp(m.arrival_s)), 1e-12)
        done_rps = len(m.id) / max(float((m.arrival_s + m.e2el_s).max() - m.arrival_s.min()),
                                   1e-12)
        if second > GROWING_QUEUE_FACTOR * first and arrival_rps > done_rps:
            notes.append(f"overloaded: requests arrive at {arrival_rps:,.2f}/s and complete at "
                         f"{done_rps:,.2f}/s; the queue grows through the run (mean TTFT "
                         f"{first * 1e3:,.0f} ms in the first half, {second * 1e3:,.0f} ms in "
                         "the second), so the figures depend on the run's length")
    if slo is not None and ((slo.ttft_s is not None and slo.ttft_s < idle_ttft_s)
                            or (slo.tpot_s is not None and slo.tpot_s < idle_tpot_s)):
        notes.append(f"the idle server already breaks the SLO (one request alone: TTFT "
                     f"{idle_ttft_s * 1e3:.4g} ms, TPOT {idle_tpot_s * 1e3:.4g} ms); no load "
                     "meets it on this hardware and layout")
    return notes


def _load_over_time(replicas: list[Replica], duration_s: float) -> dict:
    """Time-weighted means (values sampled at each step's start, held for the step; zero
    while a replica idles) and maxima of queue, in-system count, batch and KV use."""
    in_system = queue = kv_use = 0.0
    max_queue = max_batch = 0
    kv_peak = batch_sum = decode_steps = 0.0
    for r in replicas:
        t = step_table(r)
        if not len(t["start_s"]):
            continue
        dur = t["duration_s"]
        in_system += float((t["in_system"] * dur).sum()) / duration_s
        queue += float((t["waiting"] * dur).sum()) / duration_s
        used = t["kv_blocks_used"] / r.capacity.blocks
        kv_use += float((used * dur).sum()) / duration_s / len(replicas)
        kv_peak = max(kv_peak, float(used.max()))
        max_queue = max(max_queue, int(t["waiting"].max()))
        decoding = t["decodes"][t["decodes"] > 0]
        batch_sum += float(decoding.sum())
        decode_steps += len(decoding)
        max_batch = max(max_batch, int(decoding.max()) if len(decoding) else 0)
    return {"mean_in_system": in_system, "mean_queue": queue, "max_queue": max_queue,
            "mean_batch": batch_sum / decode_steps if decode_steps else 0.0,
            "max_batch": max_batch, "kv_use_mean": kv_use, "kv_use_peak": kv_peak}


def _idle_server(sim: Simulation, m: RequestMetrics) -> tuple[float, float]:
    """TTFT and TPOT of one request of the mean lengths alone on a replica, from the
    estimate (the prefill pool's TTFT and the decode pool's TPOT when disaggregated; the
    speculative what-if's TPOT when speculating)."""
    from phasewise.estimate import estimate
    from phasewise.estimate.speculative import speculative
    from phasewise.specs import Workload

    isl = max(1, int(round(float(m.input_tokens.mean()))))
    osl = max(2, int(round(float(m.output_tokens.mean()))))
    first, last = sim.replicas[0].pricer, sim.replicas[-1].pricer
    workload = Workload(isl, osl, 1)
    ttft_s = estimate(sim.model, first.hardware, workload, first.precision, first.parallelism,
                      cost=first.cost).ttft_s
    spec = sim.server.speculation
    if spec is None:
        return ttft_s, estimate(sim.model, last.hardware, workload, last.precision,
                                last.parallelism, cost=last.cost).tpot_s
    report = speculative(sim.model, last.hardware, workload, last.precision, last.parallelism,
                         draft=spec.draft, draft_head_fraction=spec.draft_head_fraction,
                         spec_tokens=spec.tokens, spec_accept=spec.accept, batches=(1,),
                         cost=last.cost)
    return ttft_s, report.at_batch.tpot_s


def _inputs(sim: Simulation, workload: dict) -> SimInputs:
    server = sim.server
    pools = []
    seen = set()
    for r in sim.replicas:
        if r.role in seen:
            continue
        seen.add(r.role)
        par, cap = r.pricer.parallelism, r.capacity
        pools.append(PoolInputs(
            role=r.role, hardware=r.pricer.hardware.name,
            replicas=sum(x.role == r.role for x in sim.replicas), tp=par.tp, pp=par.pp, ep=par.ep,
            kv_cache_blocks=cap.blocks, kv_cache_tokens=cap.tokens, kv_cache_bytes=cap.kv_bytes,
            weights_bytes=cap.weights_bytes))
    limits = sim.replicas[0].limits
    disaggregated = any(r.role == "decode" for r in sim.replicas)
    # The formats the steps were priced in: 'auto' resolved to the checkpoint's own, as the
    # estimate's inputs name them.
    precision = sim.replicas[0].pricer.precision
    return SimInputs(
        model=sim.model.name, pools=pools, scheduler=server.scheduler,
        max_num_seqs=limits.max_seqs, max_num_batched_tokens=limits.max_batched_tokens,
        block_size=server.block_tokens, load_balancer=server.load_balancer,
        kv_link=server.kv_link if disaggregated else None,
        weight_dtype=precision.weights, act_dtype=precision.activations,
        kv_dtype=precision.kv_cache,
        weight_formats={cls: precision.weight_format_for(cls) for cls in MODULE_CLASSES},
        formats_source=precision.source or "--weight-dtype", cost_model=sim.cost_model,
        engine=getattr(sim.replicas[0].pricer.cost, "engine", None),
        engine_preset=server.preset.label if server.preset else None,
        calibration=str(server.calibration) if server.calibration else "bundled",
        cuda_graph_sizes=list(server.preset.cuda_graph_sizes) if server.preset else [],
        memory_fraction=server.preset.memory_fraction if server.preset else None,
        host_overhead=_host(server.preset),
        batch_wait=_batch_wait(limits), fusion=_fusion(sim),
        bucket_tokens=sim.bucket_tokens, speculation=_speculation(server.speculation),
        workload=workload)


def _host(preset) -> str | None:  # noqa: ANN001
    if preset is None:
        return None
    h = preset.host
    how = "overlapped with the device" if h.overlap else "added to the device time"
    kernels = f"; each kernel {h.kernel_s * 1e6:.3g} µs over its work" \
        if h.kernel_s is not None else ""
    return (f"{h.base_s * 1e3:.3g} ms + {h.per_seq_s * 1e6:.3g} µs per sequence a step, {how}"
            + kernels + (f" ({h.source})" if h.source else ""))


def _fusion(sim: Simulation) -> str | None:
    """The all-reduce + RMSNorm fusion the steps were priced with, where it applied."""
    for r in sim.replicas:
        rule = r.pricer.fusion
        if rule is not None and rule.applies(r.pricer.model, r.pricer.parallelism):
            saved = rule.launches_saved(r.pricer.model)
            return (f"residual add + RMSNorm inside each all-reduce: {saved} launches "
                    f"a step fewer ({rule.source.split(':')[0]})")
    return None


def _batch_wait(limits) -> str | None:  # noqa: ANN001
    if not limits.batch_wait_iters:
        return None
    return (f"up to {limits.batch_wait_iters} steps, or until a step holds "
            f"{limits.batch_wait_tokens:,} tokens (batch_wait_timeout_iters, "
            "batch_wait_max_tokens_ratio)")


def _speculation(spec) -> str | None:  # noqa: ANN001
    if spec is None:
        return None
    draft = f"head {spec.draft_head_fraction:g}" if spec.draft is None else \
        getattr(spec.draft, "name", spec.draft)
    source = f" ({spec.source})" if spec.source else ""
    return (f"{draft}, γ={spec.tokens}, α={spec.accept:g}{source}: "
            f"{float(spec.tokens_per_round):.3f} tokens a round")
