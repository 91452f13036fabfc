"""Views of a device ``Comparison`` and of a ``ParallelScaling`` (TP sweep)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from phasewise.estimate.whatif_types import Comparison, ParallelScaling
from phasewise.report.units import gigabytes, percent, rate, seconds, usd

COMPARE_COLUMNS = ("#", "device", "TP", "TTFT", "TPOT", "tok/s/device", "memory / capacity",
                   "max batch", "$/h", "$/M input", "$/M output", "$/1k requests")


def comparison_title(c: Comparison) -> str:
    keep = f" · KV kept {c.kv_keep:g}" if c.kv_keep < 1 else ""
    return (f"{c.model} · ISL {c.isl:,} · OSL {c.osl:,} · batch {c.batch_size} · weights "
            f"{c.weight_dtype} / act {c.act_dtype} / KV {c.kv_dtype}{keep} · ranked by "
            f"{c.rank_by} · cost model: {c.cost_model}")


def comparison_table(c: Comparison, *, show_skipped: bool = False) -> Group:
    table = Table(title="Devices, best first", title_justify="left")
    for column in COMPARE_COLUMNS:
        table.add_column(column, justify="left" if column == "device" else "right")
    for n, r in enumerate(c.results, 1):
        table.add_row(str(n), r.display_name, str(r.tp), seconds(r.ttft_s), seconds(r.tpot_s),
                      rate(r.tokens_per_s_per_device, ""),
                      f"{gigabytes(r.memory_total_bytes)} / {gigabytes(r.capacity_bytes)}"
                      + ("" if r.fits else " ✗"),
                      f"{r.max_batch_size:,}", _hourly(r),
                      usd(r.usd_per_million_input_tokens), usd(r.usd_per_million_output_tokens),
                      usd(r.usd_per_thousand_requests))
    winners = Table(title="Winner per criterion", title_justify="left", show_header=False)
    winners.add_column("")
    winners.add_column("")
    for criterion, device in c.winners.items():
        winners.add_row(criterion, device)
    parts: list[Any] = [Text(comparison_title(c), style="bold"), table, winners]
    if c.skipped:
        if show_skipped:
            for name, why in c.skipped.items():
                parts.append(Text(f"not ranked: {name}: {why}", style="yellow"))
        else:
            n = len(c.skipped)
            larger = {name: why.rsplit("fits from ", 1)[1].split(" ")[0]
                      for name, why in c.skipped.items() if "fits from TP" in why}
            if larger:
                shown = ", ".join(f"{name} ({tp})" for name, tp in list(larger.items())[:6])
                parts.append(Text(f"{len(larger)} of the devices not ranked fit at a larger TP: "
                                  f"{shown}{' …' if len(larger) > 6 else ''}.", style="yellow"))
            parts.append(Text(f"{n} device{'s' * (n != 1)} not ranked (do not fit, or cannot run "
                              "this precision or parallelism); --show-skipped lists them.",
                              style="yellow"))
    parts.append(Text("$/M input charges the prefill time, $/M output the decode steps; "
                      "devices without a catalog price are marked 'unpriced' and rank after every "
                      "priced one (give --price); '(bought)' is a purchase price spread over its "
                      "amortisation years.", style="dim"))
    return Group(*parts)


def _hourly(r: Any) -> str:
    """The device's $/h, marked when it is an amortised purchase; 'unpriced' when none."""
    if r.unpriced:
        return "unpriced"
    return usd(r.usd_per_hour) + (" (bought)" if r.price_basis == "purchase" else "")


def comparison_rows(c: Comparison) -> list[dict[str, Any]]:
    return [r.model_dump() for r in c.results]


PARALLEL_COLUMNS = ("TP", "devices", "TTFT", "TPOT", "TPOT speed-up", "per-device efficiency",
                    "collectives (prefill)", "collectives (decode)", "weights/device",
                    "memory/device", "fits", "tok/s/device")


def parallel_table(s: ParallelScaling) -> Group:
    table = Table(title=f"Tensor parallelism over {s.link or 'one device'}", title_justify="left")
    for column in PARALLEL_COLUMNS:
        table.add_column(column, justify="right")
    for p in s.points:
        table.add_row(str(p.tp) + ("" if p.within_link_domain else " (crosses nodes)"),
                      str(p.devices), seconds(p.ttft_s), seconds(p.tpot_s),
                      f"{p.tpot_speedup:.2f}×", percent(p.tpot_efficiency),
                      percent(p.prefill_network_share), percent(p.decode_network_share),
                      gigabytes(p.weights_bytes_per_device),
                      gigabytes(p.memory_total_bytes_per_device), "yes" if p.fits else "no",
                      rate(p.tokens_per_s_per_device, ""))
    title = Text(f"{s.model} on {s.hardware} · ISL {s.isl:,} · OSL {s.osl:,} · batch "
                 f"{s.batch_size}", style="bold")
    if s.tp_stops_paying_at:
        verdict = (f"TP stops paying at TP{s.tp_stops_paying_at}: its TPOT is no better than the "
                   f"degree before, because the collectives' link latency outgrows the weight "
                   f"reads it saves. Lowest TPOT at TP{s.best_tp_for_tpot}.")
    else:
        verdict = (f"Every step up in TP still lowers TPOT here (lowest at TP{s.best_tp_for_tpot}); "
                   "watch the per-device efficiency column for what each device adds.")
    parts: list[Any] = [title, table, Text(f"• {verdict}")]
    parts += [Text(f"skipped {k}: {v}", style="yellow") for k, v in s.skipped.items()]
    return Group(*parts)


def parallel_rows(s: ParallelScaling) -> list[dict[str, Any]]:
    return [p.model_dump() for p in s.points]
