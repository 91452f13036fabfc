"""`phasewise validate`: how right the estimates are, against published measurements."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from phasewise.commands._app import app, calibration_file, check_format, console, echo


@app.command()
def validate(
    measurements: list[Path] | None = typer.Option(
        None, "--measurements", help="Measurements CSV (repeatable); default: the bundled ones."),
    holdout_source: str | None = typer.Option(
        None, "--holdout-source", help="Refit without this source and score its rows only."),
    leave_one_source_out: bool = typer.Option(
        False, "--leave-one-source-out",
        help="Hold out every source in turn (each row scored by a fit that never saw its "
             "source): the honest figure."),
    refit: bool = typer.Option(False, "--refit",
                               help="Score a fit to these same rows (in-sample)."),
    calibration: str | None = typer.Option(
        None, "--calibration", callback=calibration_file,
        help="Score this calibration profile instead of the bundled one."),
    write_calibration: Path | None = typer.Option(
        None, "--write-calibration", help="Fit every row and write the profile (TOML) here."),
    rows: bool = typer.Option(False, "--rows", help="Print every row, not the summary."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write the predicted-vs-measured scatter (PNG and HTML) to DIR."),
    why: list[str] | None = typer.Option(
        None, "--why",
        help="Explain this row (record id, repeatable): its scenario, the estimate command "
             "that reproduces it, its time by cause and each constant with the profile level "
             "it came from, under the fit the other options choose (an excluded or skipped "
             "row: why it is not scored)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
    serving: bool = typer.Option(False, "--serving", help="Replay the serving runs (a "
                                 "concurrency, a request rate, MLPerf Offline/Server, max "
                                 "throughput) through the simulator and score what they "
                                 "measured (mean TTFT, TPOT, throughput)."),
    serving_file: Path | None = typer.Option(
        None, "--serving-file", help="Serving runs in the serving_hopper.csv layout "
                                     "(default: the bundled file)."),
) -> None:
    """Accuracy per source and phase, calibrated model and speed of light side by side."""
    from phasewise.validate.measurements import load_bundled, load_measurements
    from phasewise.validate.outcome import run_validation

    check_format(fmt)
    if serving or serving_file is not None:
        _serving(serving_file, fmt, rows)
        return
    if sum(map(bool, (holdout_source, leave_one_source_out, refit, calibration))) > 1:
        from phasewise.errors import InputError

        raise InputError("choose one of --holdout-source, --leave-one-source-out, --refit and "
                         "--calibration.")
    _check_outputs(write_calibration, plot)
    files = [load_measurements(p) for p in measurements] if measurements else load_bundled()
    if why:
        if write_calibration is not None or plot is not None or rows:
            from phasewise.errors import InputError

            raise InputError("--why explains rows on its own; drop --write-calibration, --plot "
                             "and --rows, or run them without --why.")
        _why(files, why, fmt, holdout_source=holdout_source,
             leave_one_source_out=leave_one_source_out, refit=refit, calibration=calibration)
        return
    with _fold_progress(leave_one_source_out) as progress:
        outcome = run_validation(files, holdout_source=holdout_source,
                                 leave_one_source_out=leave_one_source_out, refit=refit,
                                 calibration=calibration, write_calibration=write_calibration,
                                 progress=progress)
    _render(outcome, fmt, rows)
    if plot is not None:
        from phasewise.report.validate_plot import scatter

        png, html = scatter(outcome.predictions, plot / "validate",
                            title=f"phasewise validate ({outcome.mode})")
        sys.stderr.write(f"wrote {png} and {html}\n")
    for line in outcome.summary_lines():
        sys.stderr.write(line + "\n")


def _serving(path: Path | None, fmt: str, rows: bool) -> None:
    """Serving rows replayed and scored, by engine and device, and the rows skipped."""
    from collections import Counter

    import numpy as np

    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.validate.serving import SERVING_FILE, load_serving, replay_all

    if path is not None and not path.is_file():
        from phasewise.errors import InputError

        raise InputError(f"--serving-file {path}: no such file; give a CSV in the "
                         "serving_hopper.csv layout.")
    loaded, problems = load_serving(path or SERVING_FILE)
    results, skipped = replay_all(loaded)
    skipped = list(problems) + skipped
    per_row = [{"id": r.row.record_id, "engine": r.row.engine, "device": r.row.device,
                "concurrency": r.row.concurrency, "isl": r.row.isl, "osl": r.row.osl,
                **{f"{k}_error": v for k, v in r.errors().items()}} for r in results]
    groups: dict[tuple[str, str], list] = {}
    for r in results:
        for key in ((r.row.engine, r.row.device), ("all", "all")):
            groups.setdefault(key, []).append(r.errors())
    summary = []
    for (engine, device), errs in sorted(groups.items(), key=lambda kv: kv[0] == ("all", "all")):
        row = {"engine": engine, "device": device, "rows": len(errs)}
        for metric in ("tpot", "ttft", "throughput"):
            values = np.abs([e[metric] for e in errs if metric in e])
            if len(values):
                row[f"{metric}_median_abs_error"] = float(np.median(values))
                row[f"{metric}_p90_abs_error"] = float(np.percentile(values, 90))
        summary.append(row)
    table = per_row if rows else summary
    total = len(results) + len(skipped)
    if fmt == "json":
        echo(to_json({"summary": summary, "rows": per_row, "skipped": [str(p) for p in skipped],
                      "simulated_share": len(results) / max(total, 1)}))
    elif fmt in ("csv", "md"):
        echo((rows_to_csv if fmt == "csv" else rows_to_markdown)(table))
    else:
        from rich.table import Table

        out = Table(title=f"serving runs: {len(results)} of {total} simulated")
        columns = list(dict.fromkeys(k for r in table for k in r))
        for c in columns:
            out.add_column(c, justify="left" if c in ("id", "engine", "device") else "right")
        for r in table:
            out.add_row(*(_cell(r.get(c, "")) for c in columns))
        console().print(out)
    reasons = Counter(p.reason.split(":")[0] for p in skipped)
    for reason, count in reasons.most_common():
        sys.stderr.write(f"skipped {count} rows: {reason}\n")


def _check_outputs(write_calibration: Path | None, plot: Path | None) -> None:
    """The files validate writes, checked before the fits (which take minutes)."""
    from phasewise.files import check_output_dir, check_output_file

    if write_calibration is not None:
        check_output_file(write_calibration, "--write-calibration")
    if plot is not None:
        check_output_dir(plot, "--plot")


@contextmanager
def _fold_progress(every_source: bool) -> Iterator[Callable[[int, int, str], None] | None]:
    """A progress bar over the held-out folds (a fit each, minutes in all) on a terminal;
    nothing when stderr is a file or a pipe."""
    if not every_source or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    from phasewise.validate.run import short_source

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("holding out", total=None)

        def advance(done: int, total: int, source: str) -> None:
            bar.update(task, completed=done, total=total,
                       description=f"holding out {short_source(source)}")

        yield advance


def _why(files, ids: list[str], fmt: str, **mode) -> None:  # noqa: ANN001, ANN003
    from phasewise.report.output import to_json
    from phasewise.validate.outcome import explain_rows

    if fmt in ("csv", "md"):
        from phasewise.errors import InputError

        raise InputError("--why prints text or json; use --format table or --format json.")
    traces = explain_rows(files, ids, **mode)
    if fmt == "json":
        echo(to_json([t.document() for t in traces]))
        return
    for t in traces:
        echo("\n".join(t.lines()))


def _render(outcome, fmt: str, rows: bool) -> None:  # noqa: ANN001 - a ValidationOutcome
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.validate.score import prediction_rows, score_rows

    if fmt == "json":
        echo(to_json(outcome.document()))
        return
    table = (prediction_rows(outcome.predictions) if rows
             else score_rows(outcome.scores, as_text=fmt != "csv"))
    if fmt == "csv":
        echo(rows_to_csv(table))
    elif fmt == "md":
        echo(rows_to_markdown(table))
    else:
        from rich.table import Table

        view = Table(title=f"phasewise validate: {outcome.mode} (error = predicted / measured "
                           "time − 1)")
        for column in (table[0] if table else {}):
            view.add_column(column, justify="left" if column in ("source", "phase", "record_id",
                                                                 "hardware", "model", "engine",
                                                                 "metric", "unit") else "right")
        for row in table:
            view.add_row(*(_cell(v) for v in row.values()))
        console().print(view)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
