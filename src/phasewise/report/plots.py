"""Figures as PNG and as a self-contained HTML page (inline SVG, no network, no JS).

Renderers build a matplotlib figure and call ``save_figure``; matplotlib is imported only
here and only when a plot is asked for (extra: ``phasewise[plot]``).
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.files import write_all

# Endings a --plot stem may carry by habit; the PNG and the HTML page are both written.
FIGURE_SUFFIXES = (".png", ".html", ".htm", ".svg")


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, or a clear error."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("plots need matplotlib: pip install 'phasewise[plot]'.") from None
    matplotlib.use("Agg")
    # A fixed salt makes the SVG's element ids the same from run to run.
    matplotlib.rcParams["svg.hashsalt"] = "phasewise"
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, stem: str | Path, *, title: str = "",
                table: list[dict[str, Any]] | None = None,
                into: dict[Path, str | bytes] | None = None) -> tuple[Path, Path]:
    """Write ``stem``.png and ``stem``.html (the figure as inline SVG, then the data as a
    table, so the page is readable offline and the numbers can be copied). A stem that
    already ends in a figure's ending (``FIGURE_SUFFIXES``) loses it; any other dot stays
    part of the name (``llama-3.1-8b`` writes ``llama-3.1-8b.png``). With ``into`` the two
    files join that set instead (the caller writes it whole, ``files.write_all``)."""
    stem = Path(stem)
    if stem.suffix.lower() in FIGURE_SUFFIXES:
        stem = stem.with_suffix("")
    png = io.BytesIO()
    # No creation date in either file: the same figure gives the same bytes.
    fig.savefig(png, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    svg = io.StringIO()
    fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    png_path, html_path = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".html")
    files = {png_path: png.getvalue(), html_path: _page(title or stem.name, svg.getvalue(),
                                                          table or [])}
    pyplot().close(fig)
    if into is not None:
        into.update(files)
        return png_path, html_path
    written = write_all(files)
    return written[0], written[1]


def _page(title: str, svg: str, table: list[dict[str, Any]]) -> str:
    svg = svg[svg.find("<svg"):]  # drop the XML prolog; the SVG sits inside HTML
    rows = ""
    if table:
        columns = list(dict.fromkeys(k for row in table for k in row))
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_fmt(row.get(c)))}</td>" for c in columns) + "</tr>"
            for row in table)
        rows = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
            "collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:"
            f"right}}</style></head><body><h1>{html.escape(title)}</h1>{svg}{rows}</body></html>\n")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
