"""`phasewise compare`: devices ranked for one model and workload, or one device across TP."""

from __future__ import annotations

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
    split_list,
    weight_dtype_option,
)
from phasewise.commands._whatif import fraction, one, resolve_prices
from phasewise.commands.estimate import DEFAULT_MODEL
from phasewise.commands.options import (
    engine_option,
    isl_option,
    osl_option,
    tp_degrees,
    tp_option,
)


@app.command()
def compare(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Catalog name, config.json path, or HF repo id in the cache."),
    hardware: str | None = typer.Option(None, "--hardware", "-H",
                                           help="Devices to rank, comma-separated (default: "
                                                "every catalog device that fits)."),
    isl: str = isl_option(),
    osl: str = osl_option(),
    batch_size: str = batch_size_option(),
    weight_dtype: str = weight_dtype_option(),
    act_dtype: str = act_dtype_option(),
    kv_dtype: str = kv_dtype_option(),
    kv_keep: str | None = kv_keep_option(),
    tp: str = tp_option(purpose="Tensor-parallel degrees (a comma list: one device across "
                                "several degrees shows TP scaling)"),
    pp: int = pp_option(),
    ep: int = ep_option(),
    price: str | None = typer.Option(None, "--price",
                                        help="US$ per device-hour: one number for every device, "
                                             "or DEVICE=PRICE pairs."),
    rank_by: str = typer.Option("cost", "--rank-by",
                                help="cost (per request), ttft, tpot, throughput, input-cost or "
                                     "output-cost."),
    all_devices: bool = typer.Option(False, "--all", help="Rank devices that do not fit too."),
    show_skipped: bool = typer.Option(False, "--show-skipped",
                                      help="List the devices left out and why."),
    cost: str | None = typer.Option(None, "--cost", help="Cost model for the expected times."),
    engine: str | None = engine_option(),
    calibration: str | None = calibration_option(),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
) -> None:
    """Rank devices for one model and workload: TTFT, TPOT, throughput, memory fit, price and
    cost per million input and output tokens, with the winner of each phase."""
    from phasewise.catalog import hardware_names
    from phasewise.cost.registry import DEFAULT_COST_MODEL
    from phasewise.estimate.compare import compare as run_compare
    from phasewise.estimate.cost_energy import with_price
    from phasewise.estimate.parallel import tp_scaling
    from phasewise.estimate.pricing import CostChoice
    from phasewise.report.compare_view import (
        comparison_rows,
        comparison_table,
        parallel_rows,
        parallel_table,
    )
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.specs import Parallelism, Precision, Workload

    check_format(fmt)
    keep = fraction(kv_keep, "--kv-keep")
    precision = Precision(weight_dtype, act_dtype, kv_dtype, 1.0 if keep is None else keep)
    workload = Workload(one(ints(isl, "--isl"), "--isl"), one(ints(osl, "--osl"), "--osl"),
                        one(ints(batch_size, "--batch-size"), "--batch-size"))
    devices = split_list(hardware, "--hardware", str) if hardware else hardware_names()
    degrees = tp_degrees(tp)
    overrides = resolve_prices(price, devices)
    cost_choice = CostChoice(cost or DEFAULT_COST_MODEL, engine, calibration)
    if hardware and len(devices) == 1 and len(degrees) > 1:
        from phasewise.catalog import load_hardware

        device = load_hardware(devices[0])
        result = tp_scaling(model, with_price(device, overrides.get(device.name)), workload,
                            precision, tp_degrees=degrees, pp=pp, ep=ep, cost=cost_choice)
        rows, view = parallel_rows(result), parallel_table(result)
    else:
        result = run_compare(model, workload, precision, hardware=devices,
                             parallelisms=[Parallelism(t, pp, ep) for t in degrees],
                             rank_by=rank_by, prices=overrides, include_unfit=all_devices,
                             cost=cost_choice)
        rows, view = comparison_rows(result), comparison_table(result, show_skipped=show_skipped)
    if fmt == "json":
        echo(to_json(result.model_dump(mode="json")))
    elif fmt == "csv":
        echo(rows_to_csv(rows))
    elif fmt == "md":
        echo(rows_to_markdown(rows))
    else:
        console().print(view)
