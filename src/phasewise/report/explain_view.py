"""Views of an ``Explanation`` (the two phases side by side) and of a ``BatchSweep``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from phasewise.estimate.whatif_types import BatchSweep, Explanation, PhaseExplanation
from phasewise.report.units import gigabytes, percent, rate, seconds, usd


def _intensity(p: PhaseExplanation) -> str:
    ratio = p.arithmetic_intensity / p.ridge_point if p.ridge_point else 0.0
    side = f"{ratio:,.1f}× above" if ratio >= 1 else f"{1 / ratio:,.0f}× below" if ratio else "—"
    return f"{p.arithmetic_intensity:,.1f} vs ridge {p.ridge_point:,.0f} ({side})"


EXPLAIN_ROWS: list[tuple[str, Any]] = [
    ("kind of operation", lambda p: p.operation),
    ("what bounds it", lambda p: f"{p.bound} ({'FLOP/s' if p.bound == 'compute' else 'bytes/s'})"
     if p.bound in ("compute", "memory") else p.bound),
    ("hardware figure that matters", lambda p: p.hardware_figure),
    ("latency it sets", lambda p: f"{p.sets} = {seconds(p.latency_s)}"),
    ("grows with prompt length", lambda p: p.grows_with_prompt),
    ("grows with output length", lambda p: p.grows_with_output),
    ("grows with batch size", lambda p: p.grows_with_batch),
    ("FLOP/byte (this config)", _intensity),
    ("time: expected / speed of light", lambda p: f"{seconds(p.time_s)} / {seconds(p.sol_time_s)}"),
    ("share of time in attention + KV", lambda p: percent(p.attention_share)),
    ("share of bytes that are KV cache", lambda p: percent(p.kv_bytes_share)),
]


def explain_rows(ex: Explanation) -> list[dict[str, str]]:
    """The table as rows of text (for Markdown and CSV)."""
    return [{"": name, "prefill": get(ex.prefill), "decode": get(ex.decode)}
            for name, get in EXPLAIN_ROWS]


def explain_title(ex: Explanation) -> str:
    i = ex.inputs
    return (f"{i.model} on {ex.hardware_display_name} · ISL {i.isl:,} · OSL {i.osl:,} · batch "
            f"{i.batch_size} · weights {i.weight_dtype} / act {i.act_dtype} / KV {i.kv_dtype}"
            + (f" · TP{i.tp}" if i.tp > 1 else "")
            + (f" · KV kept {i.kv_keep:g}" if i.kv_keep < 1 else ""))


def explain_table(ex: Explanation) -> Group:
    table = Table(title="The two phases", title_justify="left", show_lines=True)
    table.add_column("", style="bold", max_width=22)
    table.add_column("prefill (prompt → first token)", max_width=58)
    table.add_column("decode (one token per step)", max_width=58)
    for row in explain_rows(ex):
        table.add_row(row[""], row["prefill"], row["decode"])
    lines = [Text(f"• {line}") for line in ex.summary]
    return Group(Text(explain_title(ex), style="bold"), table, *lines)


SWEEP_COLUMNS = ("batch", "decode FLOP/B", "ridge", "bound", "TTFT", "TPOT", "tok/s/device",
                 "tok/s/user", "KV cache", "memory", "fits", "$/M output")


def sweep_table(sweep: BatchSweep) -> Group:
    table = Table(title="Batch sweep: decode against the roofline", title_justify="left")
    for column in SWEEP_COLUMNS:
        table.add_column(column, justify="right")
    for p in sweep.points:
        table.add_row(f"{p.batch_size:,}", f"{p.decode_intensity:,.1f}", f"{p.ridge_point:,.0f}",
                      p.decode_bound, seconds(p.ttft_s), seconds(p.tpot_s),
                      rate(p.tokens_per_s_per_device, ""), rate(p.tokens_per_s_per_user, ""),
                      gigabytes(p.kv_cache_bytes), gigabytes(p.memory_total_bytes),
                      "yes" if p.fits else "no", usd(p.usd_per_million_output_tokens))
    turn = (f"decode reaches the ridge at batch {sweep.compute_bound_batch:,}"
            if sweep.compute_bound_batch else
            "decode never reaches the ridge at this context (KV reads grow with the batch)")
    note = Text(f"• memory for the KV cache caps the batch at {sweep.max_batch_size:,}; {turn}.")
    return Group(table, note)


def sweep_rows(sweep: BatchSweep) -> list[dict[str, Any]]:
    return [p.model_dump() for p in sweep.points]


def sweep_plot(sweep: BatchSweep, stem: str | Path) -> tuple[Path, Path]:
    """Decode intensity against batch (with the ridge and the memory cap), and tokens/s per
    device against tokens/s per user; PNG and HTML."""
    from phasewise.report.plots import pyplot, save_figure

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    batches = [p.batch_size for p in sweep.points]
    left.loglog(batches, [p.decode_intensity for p in sweep.points], "o-", label="decode FLOP/byte")
    left.axhline(sweep.points[0].ridge_point, color="tab:red", linestyle="--",
                 label=f"ridge {sweep.points[0].ridge_point:,.0f}")
    if sweep.max_batch_size:
        left.axvline(sweep.max_batch_size, color="tab:gray", linestyle=":",
                     label=f"KV memory cap {sweep.max_batch_size:,}")
    left.set_xlabel("batch size")
    left.set_ylabel("FLOP per byte")
    left.legend()
    left.set_title("Decode intensity rises with batch")
    right.plot([p.tokens_per_s_per_user for p in sweep.points],
               [p.tokens_per_s_per_device for p in sweep.points], "o-")
    for p in sweep.points:
        right.annotate(str(p.batch_size), (p.tokens_per_s_per_user, p.tokens_per_s_per_device),
                       fontsize=7, xytext=(3, 3), textcoords="offset points",
                       color="black" if p.fits else "tab:red")
    right.set_xlabel("tokens/s per user")
    right.set_ylabel("tokens/s per device")
    right.set_title("Throughput against interactivity (red: does not fit)")
    fig.suptitle(explain_title_for_sweep(sweep))
    return save_figure(fig, stem, title=explain_title_for_sweep(sweep), table=sweep_rows(sweep))


def explain_title_for_sweep(sweep: BatchSweep) -> str:
    i = sweep.inputs
    return f"{i.model} on {sweep.hardware_display_name} · ISL {i.isl:,} · OSL {i.osl:,}"
