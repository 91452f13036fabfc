"""Rendering a simulation: the summary table, sweep rows, plots and a Chrome/Perfetto trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phasewise.report.units import percent, rate, seconds

_METRICS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2el"))


def load_label(s: Any) -> str:  # noqa: ANN401 - a SimSummary
    """'64 clients, ISL 1024, OSL 1024' or '4 req/s (poisson), ISL ..., OSL ...'."""
    w = s.inputs.workload
    if w.get("clients"):
        load = f"{w['clients']} clients"
    elif w.get("rate_rps"):
        load = f"{w['rate_rps']:g} req/s ({w.get('arrival', 'poisson')})"
    else:
        load = f"trace {w.get('trace', '')}".strip()
    lengths = f", ISL {w['isl']}, OSL {w['osl']}" if "isl" in w else ""
    return load + lengths


def header(s: Any) -> str:  # noqa: ANN401 - a SimSummary
    """Model, pools, scheduler, engine and calibration, and the load."""
    i = s.inputs
    pools = ", ".join(f"{p.replicas}× {p.hardware} tp{p.tp}" + (f" ep{p.ep}" if p.ep > 1 else "")
                      + ("" if p.role == "both" else f" ({p.role})") for p in i.pools)
    engine = i.engine_preset or i.engine or "generic"
    return (f"{i.model} on {pools}: {i.scheduler} scheduler, engine {engine}, cost model "
            f"{i.cost_model} (calibration {i.calibration}); {load_label(s)}; "
            f"{s.requests:,} requests")


def summary_table(s: Any, *, detail: bool = False) -> Any:  # noqa: ANN401 - a SimSummary
    """The headline of one run: a latency table, then throughput, load and SLOs."""
    from rich.console import Group
    from rich.table import Table

    i = s.inputs
    latency = Table(title=header(s))
    keys = list(s.ttft.percentiles) or ["p50", "p90", "p99"]
    for column in ("latency", "mean", *keys, "max"):
        latency.add_column(column, justify="right" if column != "latency" else "left")
    for label, key in _METRICS:
        stats = getattr(s, key)
        quantiles = stats.percentiles or {"p50": stats.p50_s, "p90": stats.p90_s,
                                          "p99": stats.p99_s}
        latency.add_row(label, seconds(stats.mean_s), *(seconds(quantiles[k]) for k in keys),
                        seconds(stats.max_s))
    latency.add_row("idle server", seconds(s.idle_ttft_s) + " TTFT",
                    seconds(s.idle_tpot_s) + " TPOT", *([""] * len(keys)))
    rows = [("speculative decoding", i.speculation)] if i.speculation else []
    if detail:
        rows += _detail_rows(i)
    rows += [
        ("duration (simulated)", seconds(s.duration_s)),
        ("requests/s (arrived, done)", f"{s.request_rate_rps:,.2f}, {s.requests_per_s:,.2f}"),
        ("output tokens/s", rate(s.output_tokens_per_s)),
        ("total tokens/s (in + out)", rate(s.total_tokens_per_s)),
        ("output tokens/s per GPU", rate(s.tokens_per_s_per_gpu)),
        ("output tokens/s per user", rate(s.tokens_per_s_per_user)),
        ("in system (mean)", f"{s.mean_in_system:,.1f}"),
        ("queue (mean, max)", f"{s.mean_queue:,.1f}, {s.max_queue:,}"),
        ("decode batch (mean, max)", f"{s.mean_batch:,.1f}, {s.max_batch:,}"),
        ("KV cache use (mean, peak)", f"{percent(s.kv_use_mean)}, {percent(s.kv_use_peak)}"),
        ("preemptions", f"{s.preemptions:,}"),
        ("engine steps", f"{s.steps:,}"),
    ]
    if s.prefix_cached_tokens:
        rows.append(("prefix-cache tokens", f"{s.prefix_cached_tokens:,}"))
    if s.kv_transfer_mean_s is not None:
        rows.append(("KV hand-off (mean)", seconds(s.kv_transfer_mean_s)))
    rows += slo_lines(s.slo)
    rows += [("note", note) for note in s.notes]
    run = Table(show_header=False)
    run.add_column("")
    run.add_column("", justify="right")
    for label, value in rows:
        run.add_row(label, value)
    return Group(latency, run)


def _detail_rows(i: Any) -> list[tuple[str, str]]:  # noqa: ANN401 - SimInputs
    graphs = i.cuda_graph_sizes
    return [("engine preset", i.engine_preset or "none (generic scheduler)"),
            ("max sequences, step token budget", f"{i.max_num_seqs:,}, {i.max_num_batched_tokens:,}"),
            ("CUDA graphs (decode padded to)", f"{len(graphs)} sizes, {graphs[0]}…{graphs[-1]}"
             if graphs else "none"),
            ("memory share (weights + KV)", f"{i.memory_fraction:.3f}" if i.memory_fraction
             else "device minus runtime reserve"),
            ("engine host time per step", i.host_overhead or "none")] + (
        [("new prompts wait for a batch", i.batch_wait)] if i.batch_wait else []) + (
        [("all-reduce fusion", i.fusion)] if i.fusion else [])


def slo_lines(slo: Any) -> list[tuple[str, str]]:  # noqa: ANN401
    if slo is None:
        return []
    targets = " and ".join(t for t in (
        f"TTFT ≤ {seconds(slo.ttft_s)}" if slo.ttft_s is not None else "",
        f"TPOT ≤ {seconds(slo.tpot_s)}" if slo.tpot_s is not None else "") if t)
    verdict = "met" if slo.met else "NOT met"
    lines = [(f"SLO {targets} at p{slo.percentile:g}",
              f"{verdict}: {percent(slo.attainment)} of requests, goodput "
              f"{slo.goodput_rps:,.2f} req/s"),
             (f"p{slo.percentile:g} TTFT / TPOT",
              f"{seconds(slo.ttft_at_percentile_s)} / {seconds(slo.tpot_at_percentile_s)}")]
    lines += [("unreachable", reason) for reason in slo.unreachable]
    return lines


def sweep_row(s: Any) -> dict[str, Any]:  # noqa: ANN401
    """One run of a sweep as a flat row (SI units)."""
    w = s.inputs.workload
    row = {"scheduler": s.inputs.scheduler, "rate_rps": w.get("rate_rps"),
           "clients": w.get("clients"), "engine": s.inputs.engine_preset or s.inputs.engine
           or "generic", "calibration": s.inputs.calibration, "isl": w.get("isl"),
           "osl": w.get("osl"), "requests": s.requests}
    for name in ("ttft", "tpot", "itl", "e2el"):
        stats = getattr(s, name)
        row[f"{name}_mean_s"] = stats.mean_s
        quantiles = stats.percentiles or {"p50": stats.p50_s, "p99": stats.p99_s}
        row.update({f"{name}_{k}_s": v for k, v in quantiles.items()})
    row.update({"requests_per_s": s.requests_per_s,
                "output_tokens_per_s": s.output_tokens_per_s,
                "tokens_per_s_per_gpu": s.tokens_per_s_per_gpu, "mean_batch": s.mean_batch,
                "preemptions": s.preemptions})
    if s.slo is not None:
        row.update({"slo_attainment": s.slo.attainment, "goodput_rps": s.slo.goodput_rps,
                    "slo_met": s.slo.met})
    return row


def sweep_table(summaries: list[Any]) -> Any:  # noqa: ANN401
    from rich.table import Table

    first = summaries[0]
    engine = first.inputs.engine_preset or first.inputs.engine or "generic"
    table = Table(title=f"{first.inputs.model}: {len(summaries)} runs, engine {engine}, "
                        f"calibration {first.inputs.calibration}")
    has_slo = summaries[0].slo is not None
    columns = ["scheduler", "load", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p50",
               "req/s", "out tok/s", "tok/s/GPU", "batch", "preempt"]
    columns += ["SLO attained", "goodput req/s"] if has_slo else []
    for c in columns:
        table.add_column(c, justify="left" if c == "scheduler" else "right")
    for s in summaries:
        w = s.inputs.workload
        load = f"{w['rate_rps']:g} req/s" if w.get("rate_rps") else \
            f"{w['clients']} clients" if w.get("clients") else "trace"
        cells = [s.inputs.scheduler, load, seconds(s.ttft.p50_s), seconds(s.ttft.p99_s),
                 seconds(s.tpot.p50_s), seconds(s.tpot.p99_s), seconds(s.e2el.p50_s),
                 f"{s.requests_per_s:,.2f}", f"{s.output_tokens_per_s:,.0f}",
                 f"{s.tokens_per_s_per_gpu:,.0f}", f"{s.mean_batch:,.1f}", f"{s.preemptions:,}"]
        if has_slo:
            mark = "" if s.slo.met else " ✗"
            cells += [percent(s.slo.attainment) + mark, f"{s.slo.goodput_rps:,.2f}"]
        table.add_row(*cells)
    return table


# ---------------------------------------------------------------- trace and plots


def chrome_trace(sim: Any) -> dict[str, Any]:  # noqa: ANN401 - a Simulation
    """Engine steps as Chrome trace events (JSON trace-event format; open in Perfetto or
    chrome://tracing): one process per replica, steps on thread 0, KV transfers on the
    sending replica's thread 1, and counters for the queue and KV use."""
    from phasewise.serving.metrics import step_table

    events: list[dict[str, Any]] = []
    for r in sim.replicas:
        events.append({"name": "process_name", "ph": "M", "pid": r.index, "tid": 0,
                       "args": {"name": f"replica {r.index} ({r.role}, "
                                        f"{r.pricer.hardware.name} tp{r.pricer.parallelism.tp})"}})
        previous = None
        t = step_table(r)
        columns = ("start_s", "duration_s", "decodes", "prefill_tokens", "prefill_seqs",
                   "waiting", "kv_blocks_used")
        for start, duration, decodes, prefill_tokens, prefill_seqs, waiting, used in zip(
                *(t[c].tolist() for c in columns), strict=False):
            ts = round(start * 1e6, 3)
            events.append({"name": _step_name(int(decodes), int(prefill_tokens), int(prefill_seqs)),
                           "ph": "X", "pid": r.index, "tid": 0, "ts": ts,
                           "dur": round(duration * 1e6, 3),
                           "args": {"decodes": int(decodes), "prefill_tokens": int(prefill_tokens),
                                    "prefill_seqs": int(prefill_seqs)}})
            counters = (int(waiting), int(used))
            if counters != previous:
                events.append({"name": "load", "ph": "C", "pid": r.index, "ts": ts,
                               "args": {"waiting": counters[0], "kv_blocks_used": counters[1]}})
                previous = counters
    for start, duration, src, dst, seq_id in sim.transfers:
        events.append({"name": f"KV request {seq_id} → replica {dst}", "ph": "X", "pid": src,
                       "tid": 1, "ts": round(start * 1e6, 3), "dur": round(duration * 1e6, 3)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": sim.model.name, "scheduler": sim.server.scheduler}}


def _step_name(decodes: int, prefill_tokens: int, prefill_seqs: int) -> str:
    if decodes and prefill_tokens:
        return f"mixed: decode {decodes} + prefill {prefill_tokens} tok"
    if decodes:
        return f"decode {decodes}"
    return f"prefill {prefill_seqs} × {prefill_tokens // max(prefill_seqs, 1)} tok"


def plot_latencies(metrics: Any, stem: str | Path, title: str,
                   into: dict | None = None) -> tuple[Path, Path]:  # noqa: ANN401
    """Cumulative distributions of TTFT, TPOT, ITL and E2E latency."""
    import numpy as np

    from phasewise.report.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    table = []
    for ax, (label, key) in zip(axes, _METRICS, strict=False):
        values = getattr(metrics, "itl_s" if key == "itl" else f"{key}_s")
        values = np.sort(values[~np.isnan(values)]) * 1e3
        if len(values):
            ax.plot(values, np.arange(1, len(values) + 1) / len(values))
            p50, p90, p99 = np.percentile(values, [50, 90, 99])
            table.append({"metric": label, "p50_ms": p50, "p90_ms": p90, "p99_ms": p99})
        ax.set_xlabel(f"{label} (ms)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests (ITL: of gaps)")
    fig.suptitle(_wrapped(title, 160))
    return save_figure(fig, stem, title=title, table=table, into=into)


def plot_load(sim: Any, stem: str | Path, title: str,
              into: dict | None = None) -> tuple[Path, Path]:  # noqa: ANN401
    """Queue length, decode batch and KV-cache use over time, one line per replica."""
    from phasewise.report.plots import pyplot, save_figure
    from phasewise.serving.metrics import step_table

    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.5), sharex=True)
    table = []
    for r in sim.replicas:
        t = step_table(r)
        if not len(t["start_s"]):
            continue
        label = f"replica {r.index} ({r.role})"
        axes[0].step(t["start_s"], t["waiting"], where="post", label=label, lw=0.8)
        decoding = t["decodes"] > 0
        axes[1].plot(t["start_s"][decoding], t["decodes"][decoding], ".", ms=1, label=label)
        axes[2].step(t["start_s"], 100 * t["kv_blocks_used"] / r.capacity.blocks, where="post",
                     label=label, lw=0.8)
        table.append({"replica": r.index, "role": r.role, "steps": len(t["start_s"]),
                      "max_waiting": int(t["waiting"].max()),
                      "max_batch": int(t["decodes"].max()),
                      "peak_kv_pct": float(100 * t["kv_blocks_used"].max() / r.capacity.blocks)})
    axes[0].set_ylabel("waiting requests")
    axes[1].set_ylabel("decode batch")
    axes[2].set_ylabel("KV cache used (%)")
    axes[2].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
        # Counts start at zero; an all-zero series (no queue) gets a visible 0..1 span
        # rather than matplotlib's symmetric ±0.04 around it.
        _, top = ax.get_ylim()
        ax.set_ylim(0, max(top, 1.0))
    axes[2].set_ylim(0, 100)
    if len(sim.replicas) <= 8:
        axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(_wrapped(title))
    return save_figure(fig, stem, title=title, table=table, into=into)


def _wrapped(title: str, width: int = 110) -> str:
    """A long title on two lines rather than cut at the figure's edge."""
    import textwrap

    return "\n".join(textwrap.wrap(title, width)) or title


def plot_sweep(summaries: list[Any], stem: str | Path, title: str,
               into: dict | None = None) -> tuple[Path, Path]:  # noqa: ANN401
    """p50 and p99 TTFT and TPOT, and throughput, against the offered load."""
    from phasewise.report.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    by_scheduler: dict[str, list[Any]] = {}
    for s in summaries:
        by_scheduler.setdefault(s.inputs.scheduler, []).append(s)
    for i, (name, runs) in enumerate(by_scheduler.items()):
        x = [r.inputs.workload.get("rate_rps") or r.inputs.workload.get("clients") or 0 for r in runs]
        color = f"C{i}"
        for ax, metric in ((axes[0], "ttft"), (axes[1], "tpot")):
            ax.plot(x, [getattr(r, metric).p99_s * 1e3 for r in runs], "o-", color=color,
                    label=f"{name} p99")
            ax.plot(x, [getattr(r, metric).p50_s * 1e3 for r in runs], "o--", color=color,
                    label=f"{name} p50")
        axes[2].plot(x, [r.output_tokens_per_s for r in runs], "o-", color=color, label=name)
    closed = summaries[0].inputs.workload.get("clients") is not None
    for ax, label in zip(axes, ("TTFT (ms)", "TPOT (ms)", "output tokens/s"), strict=False):
        ax.set_xlabel("concurrent clients" if closed else "request rate (req/s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return save_figure(fig, stem, title=title, table=[sweep_row(s) for s in summaries],
                       into=into)
