"""Rendering a profile: rows for tables, the terminal tables, and the roofline figure.
No arithmetic beyond ratios of fields the profile already holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phasewise.measure.types import Ceilings, Profile, ProfilePoint
from phasewise.report.units import percent, rate, seconds, si


def ceilings_rows(ceilings: Ceilings) -> list[tuple[str, str]]:
    rows = [("device", f"{ceilings.device_name} ({ceilings.device})"),
            ("threads", str(ceilings.threads)), ("clock", ceilings.clock)]
    rows += [(f"GEMM {fmt} (n={ceilings.gemm_size})", si(value, "FLOP/s"))
             for fmt, value in ceilings.gemm_flops_per_s.items()]
    rows += [("copy bandwidth (read + write)", si(ceilings.copy_bytes_per_s, "B/s")),
             ("read bandwidth", si(ceilings.read_bytes_per_s, "B/s")),
             ("memory", si(ceilings.memory_bytes, "B")),
             ("versions", ", ".join(f"{k} {v}" for k, v in ceilings.versions.items()))]
    rows += [("note", note) for note in ceilings.notes]
    return rows


def ceilings_table(ceilings: Ceilings) -> Any:
    from rich.table import Table

    table = Table(title=f"Measured ceilings (median of {ceilings.repeats})", title_justify="left",
                  show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in ceilings_rows(ceilings):
        table.add_row(name, value)
    return table


def point_row(point: ProfilePoint) -> dict[str, Any]:
    """One flat row per point (for --format md/csv, the HTML page and the table)."""
    return {
        "phase": point.phase, "step": point.label, "batch": point.batch_size,
        "context": point.context_tokens, "new_tokens": point.new_tokens,
        "time_s": point.time_s, "tokens_per_s": point.tokens_per_s,
        "flop_per_byte": point.arithmetic_intensity,
        "achieved_flops_per_s": point.achieved_flops_per_s,
        "achieved_bytes_per_s": point.achieved_bytes_per_s, "mfu": point.mfu, "mbu": point.mbu,
        "predicted_bound": point.predicted_bound, "sol_time_s": point.sol_time_s,
        "expected_time_s": point.expected_time_s,
    }


def points_table(profile: Profile) -> Any:
    from rich.table import Table

    expected = any(p.expected_time_s is not None for p in profile.points)
    table = Table(title=f"{profile.model} · {profile.dtype} · {profile.device} · weights: "
                        f"{profile.weights}", title_justify="left")
    columns = ["step", "batch", "context", "TTFT / TPOT", "tokens/s", "FLOP/byte", "FLOP/s",
               "bytes/s", "MFU", "MBU", "bound (ledger)", "speed of light", "measured ÷ SoL"]
    columns += ["expected", "measured ÷ expected"] if expected else []
    for column in columns:
        left = column in ("step", "bound (ledger)")
        table.add_column(column, justify="left" if left else "right")
    ridge = _ridge(profile)
    for p in profile.points:
        cells = [p.label, str(p.batch_size), f"{p.context_tokens:,}", seconds(p.time_s),
                 rate(p.tokens_per_s, ""), f"{p.arithmetic_intensity:,.1f}",
                 si(p.achieved_flops_per_s, "FLOP/s"), si(p.achieved_bytes_per_s, "B/s"),
                 percent(p.mfu), percent(p.mbu), p.predicted_bound, seconds(p.sol_time_s),
                 f"{p.time_s / p.sol_time_s:.2f}×"]
        if expected:
            cells += [seconds(p.expected_time_s),
                      f"{p.time_s / p.expected_time_s:.2f}×" if p.expected_time_s else "—"]
        table.add_row(*cells)
    table.caption = (f"Ridge point {ridge:,.1f} FLOP/byte (measured GEMM ceiling ÷ copy "
                     "bandwidth): steps below it are bound by memory, above it by compute. "
                     "FLOPs and bytes from the ledger; times are medians." + _mbu_note(profile))
    return table


def layers_table(profile: Profile) -> Any:
    """Each point's time split by layer group (Mamba, DeltaNet, attention, MLP layers and
    the parts outside the blocks), beside the ledger's speed of light for that group."""
    from rich.table import Table

    table = Table(title="By layer group", title_justify="left")
    expected = any(r.expected_time_s is not None for p in profile.points for r in p.layers)
    columns = ["step", "layers", "measured", "share", "FLOP/byte", "speed of light",
               "measured ÷ SoL"] + (["expected", "measured ÷ expected"] if expected else [])
    for column in columns:
        table.add_column(column, justify="left" if column in ("step", "layers") else "right")
    for p in profile.points:
        for r in p.layers:
            intensity = r.flops / r.memory_bytes if r.memory_bytes else 0.0
            cells = [p.label, r.layers, seconds(r.time_s), percent(r.time_s / p.time_s),
                     f"{intensity:,.1f}", seconds(r.sol_time_s),
                     f"{r.time_s / r.sol_time_s:.2f}×" if r.sol_time_s else "—"]
            if expected:
                cells += [seconds(r.expected_time_s) if r.expected_time_s else "—",
                          f"{r.time_s / r.expected_time_s:.2f}×" if r.expected_time_s else "—"]
            table.add_row(*cells)
    table.caption = ("Measured: the group's share of instrumented passes (a clock reading "
                     "around every block) times the step's median; the groups sum to the step.")
    return table


def _mbu_note(profile: Profile) -> str:
    """An MBU above 100% is no error: the ledger counts every byte a step reads from memory
    at least once, and a weight set or KV cache that fits in the CPU's caches is read from
    them faster than the measured copy bandwidth (the same reason validate gives for rows
    faster than the speed-of-light floor)."""
    over = [p.label for p in profile.points if p.mbu > 1]
    if not over:
        return ""
    return (f" MBU above 100% ({', '.join(over[:4])}{' …' if len(over) > 4 else ''}): those "
            "steps read part of their bytes from caches faster than the measured copy "
            "bandwidth, which the ledger's once-from-memory count does not see.")


def _ridge(profile: Profile) -> float:
    fmt = _math_format(profile)
    return profile.ceilings.gemm_flops_per_s[fmt] / profile.ceilings.copy_bytes_per_s


def _math_format(profile: Profile) -> str:
    from phasewise.measure.profile import precision_for

    return precision_for(profile.dtype).math_format


def roofline_figure(profile: Profile, stem: str | Path) -> tuple[Path, Path]:
    """Measured points on the measured roofs, log-log: attainable FLOP/s =
    min(GEMM ceiling, FLOP/byte × copy bandwidth). Decode points are labelled by batch, so
    the climb from the memory roof towards the compute roof reads left to right."""
    from phasewise.measure.micro import threads_label
    from phasewise.report.plots import pyplot, save_figure

    plt = pyplot()
    ceilings, fmt = profile.ceilings, _math_format(profile)
    peak, bandwidth = ceilings.gemm_flops_per_s[fmt], ceilings.copy_bytes_per_s
    intensities = [p.arithmetic_intensity for p in profile.points] or [peak / bandwidth]
    low = min(min(intensities), peak / bandwidth) / 4
    high = max(max(intensities), peak / bandwidth) * 4
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.plot(xs, [min(peak, x * bandwidth) for x in xs], color="black", lw=2,
            label=f"measured roof: {si(peak, 'FLOP/s')} {fmt} GEMM, {si(bandwidth, 'B/s')} copy")
    ax.plot(xs, [min(peak, x * ceilings.read_bytes_per_s) for x in xs], color="gray", lw=1,
            ls="--", label=f"read-only bandwidth {si(ceilings.read_bytes_per_s, 'B/s')}")
    for phase, marker, colour in (("prefill", "o", "tab:blue"), ("decode", "^", "tab:red")):
        points = [p for p in profile.points if p.phase == phase]
        ax.scatter([p.arithmetic_intensity for p in points],
                   [p.achieved_flops_per_s for p in points], marker=marker, color=colour,
                   s=50, zorder=3, label=f"{phase} (measured)")
        for p in points:
            text = p.label if phase == "prefill" else f"b={p.batch_size}, ctx {p.context_tokens}"
            ax.annotate(text, (p.arithmetic_intensity, p.achieved_flops_per_s), fontsize=7,
                        textcoords="offset points", xytext=(5, -10))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic, from the ledger)")
    ax.set_ylabel("achieved FLOP/s")
    title = f"{profile.model} on {ceilings.device_name} ({threads_label(ceilings)}{profile.dtype})"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, stem, title=f"Roofline: {title}",
                       table=[point_row(p) for p in profile.points])
