"""`phasewise plan`: the cheapest deployment that meets the SLOs, verified by simulation."""

from __future__ import annotations

import sys
from typing import Any

import typer

from phasewise.commands._app import (
    app,
    check_format,
    console,
    echo,
    given,
    ints,
    refuse_unused,
    split_list,
    task_option,
)
from phasewise.commands.options import (
    engine_option,
    isl_option,
    osl_option,
    tp_degrees,
    tp_option,
)
from phasewise.errors import InputError

DEFAULT_MODEL = "llama-3.1-8b"
# A cloud's hourly rent and a bought card's price spread over its years of use are not one
# kind of cost (the second leaves out hosts, power and networking), so by default the
# planner compares devices priced one way: on-demand.
PRICE_BASES = ("on-demand", "purchase", "any")
# The planner searches layouts: the degrees a node of eight devices splits into.
SEARCHED_TP = "1,2,4,8"
# A stage of at least this many tasks shows a progress bar on a terminal.
PROGRESS_MIN_TASKS = 2


@app.command()
def plan(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Catalog name, config.json "
                              "path or cached HF repo id; a comma list plans each."),
    hardware: str | None = typer.Option(None, "--hardware", "-H", help="Candidate devices, "
                                           "comma-separated (default: every catalog device "
                                           "with a price)."),
    price: str | None = typer.Option(None, "--price", help="US$ per device-hour: one number "
                                        "for every device, or DEVICE=PRICE pairs."),
    price_basis: str = typer.Option("on-demand", "--price-basis", help="Default devices: those "
                                    "priced on-demand (cloud rent), by purchase (amortised), "
                                    "or any."),
    isl: str = isl_option("distribution"),
    osl: str = osl_option("distribution"),
    mix: str | None = typer.Option(None, "--mix", help="Request classes ISL:OSL:SHARE, e.g. "
                                      "8192:256:0.5,1024:1024:0.5."),
    trace: str | None = typer.Option(None, "--trace", help="CSV/JSONL trace(s) to plan for "
                                        "(arrival_s, input_tokens, output_tokens); a comma "
                                        "list plans each."),
    rate: float | None = typer.Option(None, "--rate", help="Load: requests per second "
                                         "(Poisson)."),
    users: int | None = typer.Option(None, "--users", help="Load: concurrent users (closed "
                                        "loop)."),
    token_rate: float | None = typer.Option(None, "--token-rate", help="Load: output tokens "
                                               "per second."),
    ttft: str | None = typer.Option(None, "--ttft", help="TTFT SLO: 500ms, 2s, or 2s@p99."),
    tpot: str | None = typer.Option(None, "--tpot", help="TPOT SLO, as --ttft."),
    itl: str | None = typer.Option(None, "--itl", help="Inter-token latency SLO, as --ttft."),
    e2e: str | None = typer.Option(None, "--e2e", help="End-to-end latency SLO, as --ttft."),
    slo_percentile: float = typer.Option(90.0, "--slo-percentile",
                                         help="Percentile of an SLO that names none."),
    tp: str = tp_option(SEARCHED_TP, purpose="Tensor-parallel degrees searched (a comma list)"),
    pp: str = typer.Option("1,2", "--pp", help="Pipeline degrees searched (above 1 only where "
                           "nothing else fits)."),
    ep: str | None = typer.Option(None, "--ep", help="Expert-parallel degrees (default: 1, "
                                     "and 2, 4, 8 for MoE models; EP above TP is attention DP)."),
    weight_dtype: str | None = typer.Option(None, "--weight-dtype", help="Weight formats "
                                               "searched (default: the checkpoint's, and fp8 "
                                               "where the device has fp8 math)."),
    kv_dtype: str = typer.Option("bf16,fp8", "--kv-dtype", help="KV formats searched (fp8 where "
                                 "the device has fp8 math)."),
    max_num_seqs: str = typer.Option("32,64,128,256", "--max-num-seqs",
                                     help="Batch limits searched."),
    max_num_batched_tokens: str = typer.Option("2048,8192", "--max-num-batched-tokens",
                                               help="Chunked-prefill budgets searched."),
    layouts: str = typer.Option("aggregated,disaggregated", "--layouts",
                                help="aggregated, disaggregated or both."),
    same_device: bool = typer.Option(False, "--same-device", help="Disaggregated pools on one "
                                     "device type (default: each pool its own)."),
    speculation: str = typer.Option("off,on", "--speculation", help="Speculative decoding "
                                    "searched: off, on or both."),
    spec_tokens: int | None = typer.Option(None, "--spec-tokens", help="Draft tokens a round "
                                              "(default: the model's MTP modules, else 3)."),
    spec_accept: float | None = typer.Option(None, "--spec-accept", help="Per-token "
                                                "acceptance (default: the published figure "
                                                "for the draft kind and --task)."),
    task: str = task_option(),
    draft: str | None = typer.Option(None, "--draft", help="A draft model instead of the "
                                        "model's MTP head or a one-layer head."),
    max_gpus: int | None = typer.Option(None, "--max-gpus", help="Budget: devices in all."),
    max_usd_per_hour: float | None = typer.Option(None, "--max-usd-per-hour",
                                                     help="Budget: US$ an hour in all."),
    engine: str | None = engine_option(more="; a comma list searches each"),
    cost: str = typer.Option("calibrated", "--cost", help="Cost model: calibrated or sol."),
    kv_link: str = typer.Option("infiniband-ndr-400", "--kv-link",
                                help="Link KV moves over between disaggregated pools."),
    verify_top: int = typer.Option(50, "--verify", help="Candidates to simulate."),
    num_requests: int = typer.Option(600, "--num-requests", "-n",
                                     help="Requests in each verification run."),
    seed: int = typer.Option(0, "--seed", help="Seed of the verification runs' requests."),
    executor_name: str = typer.Option("local", "--executor", help="local (process pool), "
                                      "serial or ray."),
    workers: int | None = typer.Option(None, "--workers", help="Local pool processes, or "
                                          "CPUs of a local Ray instance."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster address "
                                              "(default: start a local instance)."),
    top: int = typer.Option(15, "--top", help="Rows of the table."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
    plot: str | None = typer.Option(None, "--plot", help="Write the Pareto plots (PNG and "
                                       "HTML) into this folder."),
    trace_out: str | None = typer.Option(None, "--trace-out", help="With --mix: write the "
                                            "verification requests here, the trace the "
                                            "printed commands replay."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="A progress bar on long searches (terminal only)."),
) -> None:
    """Search devices, parallelism, formats, batch limits, pool layouts and speculation for
    the cheapest deployment meeting the SLOs: every candidate screened analytically, the
    best simulated at the target load."""
    from phasewise.plan import plan as run_plan
    from phasewise.plan.executors import executor as make_executor

    check_format(fmt)
    studies = _studies(locals())
    if verify_top < 0:
        raise InputError(f"--verify {verify_top}: give 0 or more candidates to simulate.")
    if trace_out:
        _write_trace(studies[0], trace_out)
    run = make_executor(executor_name, workers=workers, ray_address=ray_address)
    try:
        reports = run_plan(*studies, executor=run, progress=_progress(progress))
    finally:
        run.close()
    _render(reports, fmt, top, plot)


def _studies(flags: dict[str, Any]) -> list:
    """One study per model and trace, all on one search space and problem."""
    from phasewise.commands._whatif import request_mix, resolve_prices
    from phasewise.plan import Problem, Study
    from phasewise.plan.inputs import target, traffic

    load = _load(flags)
    percentile = flags["slo_percentile"]
    targets = tuple(target(m, flags[m], percentile) for m in ("ttft", "tpot", "itl", "e2e")
                    if flags[m] is not None)
    if not targets:
        raise InputError("give at least one SLO: --ttft, --tpot, --itl or --e2e (e.g. "
                         "--ttft 2s --tpot 50ms).")
    space = _space(flags, resolve_prices)
    mix = request_mix(flags["mix"])
    traces = split_list(flags["trace"], "--trace", str) if flags["trace"] else [None]
    if mix is not None and flags["trace"]:
        raise InputError("--mix and --trace each set the requests; give one of them.")
    if flags["trace"] and load is not None:
        raise InputError("a trace carries its own arrival times; drop --rate, --users and "
                         "--token-rate.")
    if load is None and not flags["trace"]:
        raise InputError("give the load: --rate (requests/s), --users (concurrent) or "
                         "--token-rate (output tokens/s), or a --trace.")
    studies = []
    for name in split_list(flags["model"], "--model", str):
        for path in traces:
            the_load = load or _trace_load(path)
            t = traffic(isl=flags["isl"], osl=flags["osl"], mix=mix, trace=path, load=the_load,
                        requests=flags["num_requests"], seed=flags["seed"])
            studies.append(Study(name, Problem(t, the_load, targets, space),
                                 verify=flags["verify_top"], requests=flags["num_requests"],
                                 seed=flags["seed"], trace_out=flags["trace_out"]))
    return studies


def _load(flags: dict[str, Any]) -> Any:
    from phasewise.plan import Load

    given = [(k, flags[f]) for k, f in (("rate", "rate"), ("users", "users"),
                                         ("tokens", "token_rate")) if flags[f] is not None]
    if len(given) > 1:
        raise InputError("--rate, --users and --token-rate each set the load; give one.")
    return Load(*given[0]) if given else None


def _trace_load(path: str) -> Any:
    from phasewise.plan import Load
    from phasewise.serving import load_trace

    stream = load_trace(path)
    span = float(stream.arrival_s.max() - stream.arrival_s.min())
    if len(stream) < 2 or span <= 0:
        raise InputError(f"{path}: a trace needs at least two requests at different times to "
                         "give a rate.")
    return Load("rate", (len(stream) - 1) / span)


def _space(flags: dict[str, Any], resolve_prices) -> Any:  # noqa: ANN001
    from phasewise.catalog import hardware_names, load_hardware
    from phasewise.catalog.speculative import check_task
    from phasewise.estimate.cost_energy import with_price
    from phasewise.plan import SearchSpace

    names = split_list(flags["hardware"], "--hardware", str) if flags["hardware"] else hardware_names()
    overrides = resolve_prices(flags["price"], names)
    devices = [with_price(load_hardware(n), overrides.get(load_hardware(n).name)) for n in names]
    if flags["price_basis"] not in PRICE_BASES:
        raise InputError(f"--price-basis {flags['price_basis']}: choose one of "
                         f"{', '.join(PRICE_BASES)}.")
    if not flags["hardware"]:
        devices = [d for d in devices if d.name in overrides or
                   flags["price_basis"] in ("any", _basis_of(d))]
    priced = tuple(d for d in devices if d.price_usd_per_hour is not None)
    if flags["hardware"] and len(priced) < len(devices):
        missing = ", ".join(d.name for d in devices if d.price_usd_per_hour is None)
        raise InputError(f"{missing}: no catalog price; give one with --price DEVICE=USD_PER_HOUR.")
    onoff = {"off": False, "on": True}
    spec = split_list(flags["speculation"], "--speculation", str)
    if any(s not in onoff for s in spec):
        raise InputError(f"--speculation {flags['speculation']}: give off, on or off,on.")
    if "on" not in spec:
        refuse_unused(given("spec_tokens", "spec_accept", "draft", "task"), "--speculation on")
    return SearchSpace(
        hardware=priced, tp=tuple(tp_degrees(flags["tp"])), pp=tuple(ints(flags["pp"], "--pp")),
        ep=tuple(ints(flags["ep"], "--ep")) if flags["ep"] else None,
        weight_dtypes=tuple(split_list(flags["weight_dtype"], "--weight-dtype", str))
        if flags["weight_dtype"] else None,
        kv_dtypes=tuple(split_list(flags["kv_dtype"], "--kv-dtype", str)),
        max_seqs=tuple(ints(flags["max_num_seqs"], "--max-num-seqs")),
        chunk_tokens=tuple(ints(flags["max_num_batched_tokens"], "--max-num-batched-tokens")),
        layouts=tuple(split_list(flags["layouts"], "--layouts", str)),
        mixed_pools=not flags["same_device"], speculation=tuple(dict.fromkeys(onoff[s] for s in spec)),
        max_devices=flags["max_gpus"], max_usd_per_hour=flags["max_usd_per_hour"],
        engines=tuple(split_list(flags["engine"], "--engine", str)) if flags["engine"] else (None,),
        cost=flags["cost"], link=flags["kv_link"], spec_tokens=flags["spec_tokens"],
        spec_accept=flags["spec_accept"], draft=flags["draft"], task=check_task(flags["task"]))


def _basis_of(device: Any) -> str:
    """How a catalog device is priced: its price's basis where the sheet records one
    (on-demand rent or an amortised purchase), on-demand otherwise."""
    return getattr(getattr(device, "price", None), "basis", "on-demand")


def _progress(enabled: bool) -> Any:
    """A rich progress bar per stage on a terminal, else nothing."""
    if not (enabled and sys.stderr.isatty()):
        return None
    from rich.progress import Progress

    def start(stage: str, total: int) -> Any:
        if total < PROGRESS_MIN_TASKS:
            return None
        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task(stage, total=total)
        state = {"done": 0}

        def tick() -> None:
            state["done"] += 1
            bar.update(task, completed=state["done"])
            if state["done"] >= total:
                bar.stop()

        return tick

    return start


def _write_trace(study: Any, path: str) -> None:
    from phasewise.files import write_atomic
    from phasewise.plan.verify import draw_requests, trace_csv

    problem = study.problem
    if problem.traffic.mix is None:
        raise InputError("--trace-out writes the requests drawn for a --mix; without one the "
                         "printed commands draw them from --isl, --osl and --seed.")
    requests, _ = draw_requests(problem.traffic, problem.load, study.requests, study.seed)
    write_atomic(path, trace_csv(requests))


def _render(reports: list, fmt: str, top: int, plot: str | None) -> None:
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.report.plan_view import plan_rows, plan_table, write_plots

    if plot:
        for report in reports:
            write_plots(report, plot)
    if fmt == "json":
        docs = [r.model_dump(mode="json") for r in reports]
        echo(to_json(docs[0] if len(docs) == 1 else {"plans": docs}))
    elif fmt in ("csv", "md"):
        rows = [row for r in reports for row in plan_rows(r)]
        echo(rows_to_csv(rows) if fmt == "csv" else rows_to_markdown(rows))
    else:
        out = console()
        for report in reports:
            out.print(plan_table(report, top))
            echo(report.verdict)
            for note in report.notes:
                echo(f"note: {note}")
