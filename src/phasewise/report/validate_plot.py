"""Predicted against measured time, log-log, one colour per source (PNG and HTML)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from phasewise.report.plots import pyplot, save_figure
from phasewise.validate.prediction import Prediction, short_source
from phasewise.validate.score import prediction_rows

MARKERS = {"prefill": "o", "decode": "s", "end_to_end": "D", "gemm": "^", "memory_bw": "v"}


def source_colours(count: int) -> list[tuple[float, ...]]:
    """``count`` distinct colours, one per source: matplotlib's tab10 up to ten, then
    tab20's darker shades before its lighter ones (twenty in all), then tab20b and tab20c
    (sixty); past that they repeat."""
    plt = pyplot()
    tab20 = plt.get_cmap("tab20")
    palette = [plt.get_cmap("tab10")(i) for i in range(10)] if count <= 10 else \
        [tab20(i) for i in range(0, 20, 2)] + [tab20(i) for i in range(1, 20, 2)] + \
        [plt.get_cmap(name)(i) for name in ("tab20b", "tab20c") for i in range(20)]
    return [tuple(palette[i % len(palette)]) for i in range(count)]


def scatter(predictions: Sequence[Prediction], stem: str | Path, *,
            title: str = "phasewise: predicted vs measured") -> tuple[Path, Path]:
    """Calibrated predictions as filled markers, the speed-of-light floor as hollow ones of
    the same colour; the diagonal is a perfect prediction, the band ±25%."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    phase_rows = [p for p in predictions if p.phase in ("prefill", "decode", "end_to_end")]
    sources = list(dict.fromkeys(short_source(p.source) for p in phase_rows))
    for source, colour in zip(sources, source_colours(len(sources)), strict=False):
        rows = [p for p in phase_rows if short_source(p.source) == source]
        for phase, marker in MARKERS.items():
            chosen = [p for p in rows if p.phase == phase]
            if not chosen:
                continue
            ax.scatter([p.measured_s for p in chosen], [p.predicted_s for p in chosen],
                       color=colour, marker=marker, s=22, alpha=0.85,
                       label=f"{source} ({phase})")
            ax.scatter([p.measured_s for p in chosen], [p.floor_s for p in chosen],
                       facecolors="none", edgecolors=colour, marker=marker, s=18, alpha=0.4)
    times = [t for p in phase_rows for t in (p.measured_s, p.predicted_s, p.floor_s)]
    if times:
        low, high = min(times) / 1.5, max(times) * 1.5
        ax.plot([low, high], [low, high], color="black", linewidth=1)
        ax.fill_between([low, high], [low * 0.75, high * 0.75], [low * 1.25, high * 1.25],
                        color="grey", alpha=0.15, linewidth=0)
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("predicted time (s): filled calibrated, hollow speed of light")
    ax.set_title(title)
    # Beside the axes, not over the points: a source list covers the lower-left corner.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax.grid(True, which="both", alpha=0.2)
    return save_figure(fig, stem, title=title, table=prediction_rows(predictions))
