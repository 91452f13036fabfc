"""Figure files: the --plot stem names them, dots and all."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasewise.report.plots import pyplot, save_figure

pytest.importorskip("matplotlib")


def _figure():
    fig, ax = pyplot().subplots()
    ax.plot([1, 2], [1, 4])
    return fig


@pytest.mark.parametrize("stem, written", [
    # a model name with a version in it is the whole stem (it once wrote llama-3.png)
    ("llama-3.1-8b", "llama-3.1-8b"),
    ("roofline", "roofline"),
    # the habit of naming the file: both files are still written, beside each other
    ("figure.png", "figure"),
    ("figure.html", "figure"),
])
def test_a_plot_stem_keeps_its_dots_and_sheds_a_figure_ending(tmp_path: Path, stem: str,
                                                              written: str) -> None:
    png, page = save_figure(_figure(), tmp_path / stem, title="t", table=[{"x": 1}])
    assert (png.name, page.name) == (f"{written}.png", f"{written}.html")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in page.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{written}.html", f"{written}.png"]
