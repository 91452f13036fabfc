"""Plotly figure specifications as plain dicts (``data`` and ``layout``): the plot shapes
the report and the web app draw. Geometry only: every value plotted comes from a document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PHASE_COLOURS = {"prefill": "#1f77b4", "decode": "#d62728"}
CLASS_COLOURS = {"weights": "#4c78a8", "kv_read": "#f58518", "kv_write": "#e45756",
                 "activations": "#72b7b2", "network": "#54a24b", "gemm": "#4c78a8",
                 "attention": "#f58518", "elementwise": "#72b7b2", "communication": "#54a24b"}


@dataclass(frozen=True)
class Figure:
    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]


def plot_layout(title: str, x_title: str, y_title: str, *, log_x: bool = False,
                log_y: bool = False, **extra: Any) -> dict[str, Any]:
    layout = {"title": {"text": title}, "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
              "xaxis": {"title": {"text": x_title}}, "yaxis": {"title": {"text": y_title}},
              "legend": {"orientation": "h", "y": -0.2}, "height": 420}
    for axis, log in (("xaxis", log_x), ("yaxis", log_y)):
        if log:
            layout[axis]["type"] = "log"
    layout.update(extra)
    return layout


def roofline(title: str, hardware: dict[str, Any], phases: list[dict[str, Any]]) -> Figure:
    """Attainable FLOP/s against arithmetic intensity: the bandwidth slope and the compute
    roof meeting at the device's ridge (peak ÷ bandwidth, as the document gives it), with
    each phase at its intensity and achieved rate (measured, or the document's MFU × peak)."""
    peak = hardware["peak_flops_per_s"]
    bandwidth = hardware["memory_bandwidth_bytes_per_s"]
    ridge = hardware["ridge_point"]
    intensities = [p["arithmetic_intensity"] for p in phases if p.get("arithmetic_intensity")]
    low = min([ridge / 100, *intensities]) / 10
    high = max([ridge * 100, *intensities]) * 10
    data = [{"type": "scatter", "mode": "lines", "name": "roofline",
             "x": [low, ridge, high], "y": [bandwidth * low, peak, peak],
             "line": {"color": "#555"}, "hovertemplate": "%{x:.3g} FLOP/B: %{y:.3s}FLOP/s"},
            {"type": "scatter", "mode": "lines", "name": f"ridge {ridge:,.0f} FLOP/B",
             "x": [ridge, ridge], "y": [bandwidth * low, peak],
             "line": {"color": "#999", "dash": "dot"}}]
    for phase in phases:
        name = phase.get("phase", "")
        data.append({"type": "scatter", "mode": "markers+text", "name": phase.get("label", name),
                     "x": [phase["arithmetic_intensity"]],
                     "y": [phase.get("achieved_flops_per_s") or phase["mfu"] * peak],
                     "text": [f"{phase.get('label', name)} ({phase.get('bound', '')}-bound)"],
                     "textposition": "top right",
                     "marker": {"size": 12, "color": PHASE_COLOURS.get(name, "#333")}})
    return Figure(title, data, plot_layout(title, "arithmetic intensity (FLOP/byte)",
                                       "FLOP/s", log_x=True, log_y=True))


def bars(title: str, categories: list[Any], series: dict[str, list[Any]], category_title: str,
         value_title: str, *, stack: bool = False, log_value: bool = False,
         horizontal: bool = False, ranked: bool = False) -> Figure:
    """One bar per category and series; ``ranked`` lets the browser order the categories by
    their value, smallest first."""
    data = []
    for name, values in series.items():
        trace = {"type": "bar", "name": name, "marker": {"color": CLASS_COLOURS.get(name)}}
        trace.update({"y": categories, "x": values, "orientation": "h"} if horizontal else
                     {"x": categories, "y": values})
        data.append(trace)
    x_title, y_title = (value_title, category_title) if horizontal else (category_title,
                                                                         value_title)
    layout = plot_layout(title, x_title, y_title, log_x=log_value and horizontal,
                     log_y=log_value and not horizontal, barmode="stack" if stack else "group")
    category_axis = layout["yaxis" if horizontal else "xaxis"]
    if ranked:
        category_axis["categoryorder"] = "total ascending"
    if horizontal:
        layout["height"] = max(420, 16 * len(categories) * max(1, len(series)) + 140)
        category_axis["autorange"] = "reversed"
        layout["margin"]["l"] = 170
    return Figure(title, data, layout)


def lines(title: str, x: list[Any], series: dict[str, list[Any]], x_title: str, y_title: str,
          *, log_x: bool = False, log_y: bool = False) -> Figure:
    data = [{"type": "scatter", "mode": "lines+markers", "name": name, "x": x, "y": values}
            for name, values in series.items()]
    return Figure(title, data, plot_layout(title, x_title, y_title, log_x=log_x, log_y=log_y))


def pareto(title: str, points: list[dict[str, Any]], x_key: str, y_key: str,
           label_key: str) -> Figure:
    """Per-user speed against per-device throughput, one marker per configuration (the
    front is the upper-right edge; each point's label says what it is)."""
    chosen = [p for p in points if p.get(x_key) is not None and p.get(y_key) is not None]
    data = [{"type": "scatter", "mode": "markers+lines", "name": "configurations",
             "x": [p[x_key] for p in chosen], "y": [p[y_key] for p in chosen],
             "text": [str(p.get(label_key, "")) for p in chosen],
             "hovertemplate": "%{text}<br>%{x:.4g}, %{y:.4g}<extra></extra>"}]
    return Figure(title, data, plot_layout(title, x_key.replace("_", " "), y_key.replace("_", " ")))
