"""`phasewise explain`: the two phases at a glance, the turning points, and a batch sweep."""

from __future__ import annotations

import sys

import typer

from phasewise.commands._app import (
    act_dtype_option,
    app,
    batch_size_option,
    calibration_option,
    check_format,
    console,
    echo,
    ep_option,
    ints,
    kv_dtype_option,
    kv_keep_option,
    pp_option,
    weight_dtype_option,
)
from phasewise.commands._whatif import fraction, one
from phasewise.commands.estimate import DEFAULT_HARDWARE, DEFAULT_MODEL
from phasewise.commands.options import (
    engine_option,
    isl_option,
    one_tp,
    osl_option,
    tp_option,
)


@app.command()
def explain(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Catalog name, config.json path, or HF repo id in the cache."),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-H",
                                 help="Catalog device or TOML sheet."),
    isl: str = isl_option(),
    osl: str = osl_option(),
    batch_size: str = batch_size_option(),
    weight_dtype: str = weight_dtype_option(),
    act_dtype: str = act_dtype_option(),
    kv_dtype: str = kv_dtype_option(),
    kv_keep: str | None = kv_keep_option(),
    tp: str = tp_option(),
    pp: int = pp_option(),
    ep: int = ep_option(),
    cost: str | None = typer.Option(None, "--cost", help="Cost model for the expected times."),
    engine: str | None = engine_option(),
    calibration: str | None = calibration_option(),
    batch_sweep: bool = typer.Option(False, "--batch-sweep",
                                     help="Add a batch sweep: decode intensity against the ridge, "
                                          "tokens/s per device and per user, memory cap."),
    batches: str | None = typer.Option(None, "--batches",
                                          help="Batch sizes for the sweep (default: doubling "
                                               "past the memory cap)."),
    plot: str | None = typer.Option(None, "--plot",
                                       help="Write the sweep as PATH.png and PATH.html."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
) -> None:
    """Explain prefill and decode for one configuration: what each phase does, what bounds it,
    what it costs here, and where that changes."""
    from phasewise.cost.registry import DEFAULT_COST_MODEL
    from phasewise.estimate.explain import explain as run_explain
    from phasewise.estimate.pricing import CostChoice
    from phasewise.estimate.sweep import batch_sweep as run_sweep
    from phasewise.report.explain_view import (
        explain_rows,
        explain_table,
        sweep_plot,
        sweep_rows,
        sweep_table,
    )
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.specs import Parallelism, Precision, Workload

    check_format(fmt)
    if plot:
        from phasewise.files import check_output_stem

        check_output_stem(plot, "--plot")
    keep = fraction(kv_keep, "--kv-keep")
    precision = Precision(weight_dtype, act_dtype, kv_dtype, 1.0 if keep is None else keep)
    workload = Workload(one(ints(isl, "--isl"), "--isl"), one(ints(osl, "--osl"), "--osl"),
                        one(ints(batch_size, "--batch-size"), "--batch-size"))
    par = Parallelism(one_tp(tp), pp, ep)
    cost_choice = CostChoice(cost or DEFAULT_COST_MODEL, engine, calibration)
    result = run_explain(model, hardware, workload, precision, par, cost=cost_choice)
    sweep = None
    if batch_sweep or batches or plot:
        sweep = run_sweep(model, hardware, workload, precision, par,
                          batches=ints(batches, "--batches") or None, cost=cost_choice)
    if fmt == "json":
        doc = result.model_dump(mode="json")
        if sweep:
            doc["batch_sweep"] = sweep.model_dump(mode="json")
        echo(to_json(doc))
    elif fmt in ("csv", "md"):
        render = rows_to_csv if fmt == "csv" else rows_to_markdown
        echo(render(explain_rows(result)))
        if sweep:
            echo(render(sweep_rows(sweep)))
    else:
        out = console()
        out.print(explain_table(result))
        if sweep:
            out.print(sweep_table(sweep))
    if sweep and plot:
        png, html = sweep_plot(sweep, plot)
        sys.stderr.write(f"wrote {png} and {html}\n")
