"""One phasewise JSON document as one self-contained HTML page with interactive plots.

The page (a Jinja template, ``templates/report.html``) carries everything it needs
(Plotly's bundled script, the styles, the plot data, the document itself), so it opens
offline, and it holds no timestamp, no random id and no
unsorted mapping: the same document and command give the same bytes.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.report.sections import Section, build_sections, document_kind
from phasewise.report.tables import Table
from phasewise.version import __version__

STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
header{background:#20262e;color:#fff;padding:1em 2em}header h1{margin:0 0 .3em;font-size:1.4em}
header .meta{opacity:.85;font-size:.9em}pre.command{background:#0f1317;color:#d6f5d6;padding:.6em;
overflow-x:auto;border-radius:4px;white-space:pre-wrap}main{padding:0 2em 2em}
nav{padding:.6em 2em;background:#eef1f4;font-size:.9em}nav a{margin-right:1em}
section{margin:1.5em 0}h2{border-bottom:2px solid #ccd;padding-bottom:.2em}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:1em}
.plot{background:#fff;border:1px solid #dde;min-height:420px}
table{border-collapse:collapse;font-size:12px;margin:.6em 0 1.2em;background:#fff}
td,th{border:1px solid #ccd;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#eef1f4}td:first-child,th:first-child{text-align:left}
caption{text-align:left;font-weight:600;padding:.3em 0}.tablewrap{overflow-x:auto;max-height:640px}
.notes li{margin:.2em 0}.error{background:#fde8e8;border:1px solid #e99;padding:.6em;color:#900}
details pre{max-height:480px;overflow:auto;background:#fff;border:1px solid #dde;padding:.6em}
"""

RENDER_SCRIPT = """
function phasewiseDrawPlots(root){
  var specs=JSON.parse(document.getElementById('plot-data').textContent);
  root.querySelectorAll('div.plot').forEach(function(div){
    var spec=specs[div.id]; if(!spec){return;}
    Plotly.newPlot(div,spec.data,spec.layout,{responsive:true,displaylogo:false}).then(function(){
      div.setAttribute('data-rendered','true');});
  });
}
function phasewiseDownload(){
  var text=document.getElementById('document-data').textContent;
  var a=document.createElement('a');
  a.href=URL.createObjectURL(new Blob([text],{type:'application/json'}));
  a.download='phasewise.json';a.click();
}
phasewiseDrawPlots(document);
"""


def plotly_js() -> str:
    """Plotly's own bundled, minified script, as the plotly package ships it."""
    if find_spec("plotly") is None:
        raise InputError("the HTML report needs plotly: pip install 'phasewise[report]'.")
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text("utf-8")


def script_json(value: Any) -> str:
    """JSON to sit inside a <script> element: sorted keys, and no '<' that could close it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False,
                      default=str).replace("<", "\\u003c")


def render_sections(sections: list[Section], *, first_plot: int = 1) -> tuple[str, dict]:
    """The sections as HTML and their plot specifications keyed by div id (plot-1, plot-2…:
    numbered in order, so the ids are the same every time)."""
    parts: list[str] = []
    plots: dict[str, Any] = {}
    for index, section in enumerate(sections, start=1):
        parts.append(f"<section id='section-{index}'><h2>{html.escape(section.title)}</h2>")
        if section.notes:
            parts.append("<ul class='notes'>" + "".join(
                f"<li>{html.escape(str(n))}</li>" for n in section.notes if n) + "</ul>")
        if section.figures:
            parts.append("<div class='plots'>")
            for figure in section.figures:
                plot_id = f"plot-{first_plot + len(plots)}"
                plots[plot_id] = {"data": figure.data, "layout": figure.layout}
                parts.append(f"<div class='plot' id='{plot_id}' "
                             f"aria-label='{html.escape(figure.title)}'></div>")
            parts.append("</div>")
        parts.extend(_table(table) for table in section.tables if table.rows)
        parts.append("</section>")
    return "".join(parts), plots


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    rows = []
    for row in table.rows:
        cells = []
        for cell in row:
            value = "" if cell.value is None or isinstance(cell.value, str) else \
                f" data-value='{html.escape(json.dumps(cell.value))}'"
            cells.append(f"<td{value}>{html.escape(cell.text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class='tablewrap'><table data-title='{html.escape(table.title)}'>"
            f"<caption>{html.escape(table.title)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def reproduce_command(doc: Any) -> str:
    """The command that writes ``doc`` again, where its inputs say enough; otherwise how to
    draw this page from the saved document."""
    from phasewise.report.reproduce import command_for

    return command_for(doc)


def html_report(doc: Any, *, command: str | None = None) -> str:
    """The whole page for ``doc`` (the skeleton is ``templates/report.html``, escaped by
    Jinja; the sections, the styles and the scripts go in as they are). ``command`` is what
    reproduces it (default: rebuilt from the document's inputs)."""
    from markupsafe import Markup

    sections = build_sections(doc if isinstance(doc, dict) else {"value": doc})
    body, plots = render_sections(sections)
    return _template().render(
        title=sections[0].title if sections else "phasewise report", sections=sections,
        kind=document_kind(doc), renderer=__version__,
        version=str(doc.get("tool_version", __version__) if isinstance(doc, dict)
                    else __version__),
        command=command or reproduce_command(doc), style=Markup(STYLE),
        plotly=Markup(plotly_js()), body=Markup(body),
        document_text=json.dumps(doc, indent=2, sort_keys=True, default=str),
        plot_data=Markup(script_json(plots)), document_data=Markup(script_json(doc)),
        render_script=Markup(RENDER_SCRIPT))


def _template() -> Any:
    """The page skeleton: autoescaped, and an unknown name is an error, not a blank."""
    try:
        import jinja2
    except ImportError:
        raise InputError("the HTML report needs jinja2: pip install 'phasewise[report]'."
                         ) from None
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("phasewise.report", "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return environment.get_template("report.html")


def write_report(doc: Any, path: str | Path, *, command: str | None = None) -> Path:
    from phasewise.files import write_atomic

    return write_atomic(path, html_report(doc, command=command))
