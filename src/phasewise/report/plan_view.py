"""Views of a ``PlanReport``: the terminal table, flat rows for CSV and Markdown, and the
Pareto plots (PNG and a self-contained HTML page)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from phasewise.plan.types import CandidateRow, PlanReport
from phasewise.report.units import seconds, usd

COLUMNS = ("#", "layout", "devices", "$/h", "$/M out", "rate", "TTFT", "TPOT", "E2E p90",
           "tok/s/user", "tok/s/GPU", "screen", "simulated")


def _target(row: CandidateRow, metric: str) -> str:
    for t in row.targets:
        if t.metric == metric:
            value = t.simulated_s if t.simulated_s is not None else t.predicted_s
            return seconds(value) + ("" if t.simulated_s is not None else " ~")
    return "—"


def _verdict(row: CandidateRow) -> str:
    if row.meets_slos is None:
        return "—"
    return "meets" if row.meets_slos else "misses"


def plan_table(report: PlanReport, top: int = 15) -> Group:
    title = (f"{report.model} · {report.candidates_screened:,} candidates screened on "
             f"{report.shapes_priced:,} shapes, {report.candidates_verified} simulated")
    table = Table(title="Simulated candidates, cheapest first (~: analytic, not simulated)",
                  title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "layout" else "right")
    for n, r in enumerate(report.verified[:top], 1):
        table.add_row(str(n), Text(r.label), str(r.devices), usd(r.usd_per_hour),
                      usd(r.usd_per_million_output_tokens), f"{r.request_rate_rps:,.3g}/s",
                      _target(r, "ttft"), _target(r, "tpot"), seconds(r.latency_s),
                      f"{r.tokens_per_s_per_user:,.0f}", f"{r.tokens_per_s_per_gpu:,.0f}",
                      r.screen_status, _verdict(r))
    best = Table(title="Best per device type", title_justify="left")
    for column in ("layout", "$/h", "verdict", "why"):
        best.add_column(column, justify="left")
    for r in report.best_per_device[:top]:
        verdict = _verdict(r) if r.verified else f"screen: {r.screen_status}"
        best.add_row(Text(r.label), usd(r.usd_per_hour), verdict, Text(r.why))
    parts: list[Any] = [Text(title, style="bold"), table, best]
    answer = report.chosen or report.closest
    if answer is not None:
        parts.append(Text(f"why: {answer.why}"))
        if answer.simulate_command:
            parts.append(Text(f"reproduce: {answer.simulate_command}", style="dim"))
    return Group(*parts)


def plan_rows(report: PlanReport) -> list[dict[str, Any]]:
    """One flat row per simulated candidate, then the best of each device type."""
    rows = []
    seen = set()
    for r in report.verified + report.best_per_device:
        if r.index in seen:
            continue
        seen.add(r.index)
        row = {"model": report.model, "index": r.index, "chosen": report.chosen is not None
               and r.index == report.chosen.index, "layout": r.layout, "label": r.label,
               "devices": r.devices, "usd_per_hour": r.usd_per_hour,
               "usd_per_million_output_tokens": r.usd_per_million_output_tokens,
               "request_rate_rps": r.request_rate_rps, "screen_status": r.screen_status,
               "verified": r.verified, "meets_slos": r.meets_slos, "goodput_rps": r.goodput_rps,
               "tokens_per_s_per_user": r.tokens_per_s_per_user,
               "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu, "latency_s": r.latency_s}
        for t in r.targets:
            row[f"{t.metric}_p{t.percentile:g}_predicted_s"] = t.predicted_s
            row[f"{t.metric}_p{t.percentile:g}_simulated_s"] = t.simulated_s
        row["why"] = r.why
        row["simulate_command"] = r.simulate_command
        rows.append(row)
    return rows


def write_plots(report: PlanReport, folder: str) -> list[Path]:
    """Both Pareto fronts: tokens/s per user against tokens/s per GPU, and $/M output
    tokens against E2E latency; every candidate the screen found stable in grey, the
    simulated ones in colour, each front as a line."""
    from phasewise.report.plots import pyplot, save_figure

    plt = pyplot()
    out = []
    rows = {r.index: r for r in report.verified}
    for name, xlabel, ylabel in (("throughput", "output tokens/s per GPU", "tokens/s per user"),
                                 ("cost-latency", "E2E p90 (s)", "$ per million output tokens")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for front in report.fronts:
            if front.name != name or not front.points:
                continue
            xs, ys = zip(*front.points, strict=False)
            style = dict(color="0.6", marker=".", linestyle="--") if front.source == "analytic" \
                else dict(color="tab:blue", marker="o", linestyle="-")
            ax.plot(xs, ys, label=f"{front.source} front", **style)
        field_x, field_y = (("tokens_per_s_per_gpu", "tokens_per_s_per_user") if name == "throughput"
                            else ("latency_s", "usd_per_million_output_tokens"))
        met = [r for r in rows.values() if r.meets_slos and getattr(r, field_y) is not None]
        missed = [r for r in rows.values() if not r.meets_slos and getattr(r, field_y) is not None]
        for group, colour, label in ((met, "tab:green", "simulated, meets SLOs"),
                                     (missed, "tab:red", "simulated, misses")):
            if group:
                ax.scatter([getattr(r, field_x) for r in group], [getattr(r, field_y) for r in group],
                           color=colour, s=18, label=label, zorder=3)
        if report.chosen is not None:
            ax.scatter([getattr(report.chosen, field_x)], [getattr(report.chosen, field_y)],
                       marker="*", s=160, color="gold", edgecolor="black", label="chosen", zorder=4)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{report.model}: {name} front")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        table = [{"index": r.index, "layout": r.label, field_x: getattr(r, field_x),
                  field_y: getattr(r, field_y), "meets_slos": r.meets_slos} for r in rows.values()]
        stem = Path(folder) / f"plan-{_safe(report.model)}-{name}"
        out.extend(save_figure(fig, stem, title=f"{report.model}: {name} Pareto front",
                               table=table))
    return out


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-._" else "-" for ch in name)
