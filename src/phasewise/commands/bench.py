"""`phasewise bench`: load-test a live OpenAI-compatible server (or read another tool's
results), and set each metric beside what `phasewise simulate` predicts for the same load."""

from __future__ import annotations

import math
import re
import sys
from datetime import UTC
from typing import Any

import typer

from phasewise.commands._app import (
    app,
    calibration_option,
    check_format,
    console,
    echo,
    ints,
    split_list,
)
from phasewise.commands.options import engine_option, isl_option, osl_option
from phasewise.errors import InputError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(us|ms|s)?\s*$", re.IGNORECASE)
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1e-3}


@app.command()
def bench(
    url: str | None = typer.Option(None, "--url", help="The server, e.g. "
                                      "http://127.0.0.1:8000 (requests go to it alone)."),
    endpoint: str = typer.Option("completions", "--endpoint", help="completions "
                                 "(/v1/completions) or chat (/v1/chat/completions)."),
    served_model: str | None = typer.Option(None, "--served-model", help="The model name "
                                               "the server serves (default: the first of "
                                               "/v1/models)."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Environment "
                                    "variable holding the API key (sent as a Bearer token, "
                                    "never printed or written)."),
    isl: str = isl_option("distribution"),
    osl: str = osl_option("distribution"),
    num_requests: int = typer.Option(100, "--num-requests", "-n", help="Requests per run."),
    rate: str | None = typer.Option(None, "--rate", help="Open loop: requests per second "
                                       "(inf: all at once); a comma list sweeps."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson or constant."),
    clients: str | None = typer.Option(None, "--clients", help="Closed loop: concurrent "
                                          "clients; a comma list sweeps."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="Open loop: "
                                                  "at most this many requests in flight."),
    trace: str | None = typer.Option(None, "--trace", help="Replay a CSV/JSONL trace "
                                        "(arrival_s, input_tokens, output_tokens)."),
    warmup: int = typer.Option(1, "--warmup", help="Requests sent and not counted first."),
    duration: str | None = typer.Option(None, "--duration", help="Time limit of a run "
                                           "(e.g. 60s): no request starts after it."),
    request_timeout: str = typer.Option("300s", "--request-timeout", help="Deadline of one "
                                        "request; past it the request counts as timed out."),
    hold_length: bool = typer.Option(True, "--hold-length/--no-hold-length", help="Send "
                                     "min_tokens and ignore_eos so answers run to --osl."),
    seed: int = typer.Option(0, "--seed", help="Seed of lengths, arrivals and prompts."),
    percentiles: str = typer.Option("50,90,99", "--percentiles", help="Percentiles reported."),
    ttft: str | None = typer.Option(None, "--ttft", help="Goodput SLO on TTFT (200ms; a "
                                       "bare number is milliseconds)."),
    tpot: str | None = typer.Option(None, "--tpot", help="Goodput SLO on TPOT."),
    e2el: str | None = typer.Option(None, "--e2el", help="Goodput SLO on E2E latency."),
    read: str | None = typer.Option(None, "--read", help="Read result files instead of "
                                       "running (comma list): phasewise bench --save-result, "
                                       "vllm bench serve --save-result, llama-bench -o json, "
                                       "GuideLLM's benchmarks.json."),
    predict: bool = typer.Option(False, "--predict", help="Serve the same load in the "
                                 "simulator and print measured against predicted."),
    model: str | None = typer.Option(None, "--model", "-m", help="The model, for "
                                        "--predict and the measurement rows (catalog name "
                                        "or config)."),
    hardware: str | None = typer.Option(None, "--hardware", "-H", help="The device, for "
                                           "--predict and the rows (catalog name, 'local' or "
                                           "a TOML sheet)."),
    engine: str | None = engine_option(),
    weight_dtype: str = typer.Option("bf16", "--weight-dtype", help="The served weights' "
                                     "format (bf16, fp8, a GGUF type such as Q4_K_M...)."),
    scheduler: str = typer.Option("continuous", "--scheduler", help="The simulated "
                                  "server's scheduler."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Sequences the "
                                               "simulated server keeps in flight (default 1 "
                                               "for llama.cpp, 256 otherwise)."),
    calibration: str | None = calibration_option(),
    save_result: str | None = typer.Option(None, "--save-result", help="Write the runs "
                                              "(summary and every request) as JSON."),
    measurements_out: str | None = typer.Option(None, "--measurements-out", help="Write "
                                                   "the runs as rows `phasewise validate "
                                                   "--measurements` reads (needs --model, "
                                                   "--hardware, --engine)."),
    fit_overhead: str | None = typer.Option(None, "--fit-overhead", help="Fit the "
                                               "engine's host overhead per step to the runs "
                                               "and write the calibration profile here."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="A progress bar (terminal only)."),
) -> None:
    """Measure a live server's TTFT, TPOT, ITL, E2E latency and throughput, and set them
    beside the prediction."""
    from phasewise.measure.bench_predict import Target

    check_format(fmt)
    wanted = [float(p) for p in split_list(percentiles, "--percentiles", float)]
    if any(not 0 < p <= 100 for p in wanted):
        raise InputError(f"--percentiles {percentiles}: give percentiles in (0, 100].")
    target = None
    if predict or measurements_out or fit_overhead:
        _need_target(model, hardware, engine, predict, measurements_out, fit_overhead)
        target = Target(model=model, hardware=hardware, engine=engine, weight_dtype=weight_dtype,
                        scheduler=scheduler, max_num_seqs=max_num_seqs, calibration=calibration)
    if read:
        if url:
            raise InputError("--url runs a load test and --read reads results; give one.")
        kind, runs, tests = _read(read)
        endpoint_doc: dict[str, Any] = {"read": read, "kind": kind}
    else:
        if not url:
            raise InputError("--url is missing: name the server, e.g. --url "
                             "http://127.0.0.1:8000 (or --read FILE to read results).")
        runs, endpoint_doc = _measure(url, endpoint, served_model, api_key_env, isl, osl,
                                      num_requests, rate, arrival, clients, max_concurrency,
                                      trace, warmup, duration, request_timeout, hold_length,
                                      seed, tuple(wanted), (ttft, tpot, e2el), progress)
        tests = []
    predictions = [_compare(run, target) for run in runs] if predict else None
    _write_files(runs, tests, endpoint_doc, predictions, target, save_result, measurements_out,
                 weight_dtype, isl, osl)
    if fit_overhead:
        _fit(runs, target, fit_overhead)
    _render(runs, tests, predictions, fmt)


# ---------------------------------------------------------------- parsing


def _duration_s(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    match = _DURATION.match(str(text))
    if not match or not float(match.group(1)) > 0:
        raise InputError(f"{flag} {text}: give a positive duration such as 200ms, 1.5s or 500 "
                         "(milliseconds).")
    return float(match.group(1)) * _UNIT_S[match.group(2).lower() if match.group(2) else None]


def _need_target(model: str | None, hardware: str | None, engine: str | None, predict: bool,
                 measurements_out: str | None, fit_overhead: str | None) -> None:
    flag = "--predict" if predict else "--measurements-out" if measurements_out \
        else "--fit-overhead"
    missing = [name for name, value in (("--model", model), ("--hardware", hardware))
               if not value]
    if (measurements_out or fit_overhead) and not engine:
        missing.append("--engine")
    if missing:
        raise InputError(f"{flag} needs {', '.join(missing)}: the model, device and engine "
                         "the server runs (e.g. --model smollm2-135m --hardware local "
                         "--engine llama.cpp).")


def _loads(rate: str | None, arrival: str, clients: str | None, max_concurrency: int | None,
           trace: str | None) -> list[Any]:
    from phasewise.measure.bench import Load

    given = [f for f, v in (("--rate", rate), ("--clients", clients), ("--trace", trace))
             if v is not None]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} each set the load; give one of them.")
    if arrival not in ("poisson", "constant"):
        raise InputError(f"--arrival {arrival}: choose poisson or constant.")
    if max_concurrency is not None and (max_concurrency < 1 or clients):
        raise InputError("--max-concurrency caps an open loop at 1 or more requests in flight; "
                         "with --clients the clients are the cap.")
    if trace:
        return [Load(trace=trace, max_concurrency=max_concurrency)]
    if clients:
        values = ints(clients, "--clients")
        if any(c < 1 for c in values):
            raise InputError(f"--clients {clients}: give at least 1 client.")
        return [Load(clients=c) for c in values]
    rates = split_list(rate or "inf", "--rate", float)
    if any(not r > 0 for r in rates):
        raise InputError(f"--rate {rate}: give positive rates (inf: all at once).")
    return [Load(rate_rps=r, arrival=arrival, max_concurrency=max_concurrency) for r in rates]


# ---------------------------------------------------------------- running and reading


def _measure(url: str, api: str, served_model: str | None, api_key_env: str, isl: str,
             osl: str, num_requests: int, rate: str | None, arrival: str, clients: str | None,
             max_concurrency: int | None, trace: str | None, warmup: int, duration: str | None,
             request_timeout: str, hold_length: bool, seed: int, percentiles: tuple,
             slo_texts: tuple, show_progress: bool) -> tuple[list[Any], dict]:
    from phasewise.measure.bench import APIS, Endpoint, Plan, parse_base_url, run
    from phasewise.measure.bench_metrics import Slos

    if api not in APIS:
        raise InputError(f"--endpoint {api}: choose {' or '.join(APIS)}.")
    if num_requests < 1 or warmup < 0:
        raise InputError("--num-requests must be at least 1 and --warmup at least 0.")
    timeout_s = _duration_s(request_timeout, "--request-timeout")
    target = Endpoint(parse_base_url(url), api, served_model, api_key_env, timeout_s,
                      hold_length)
    slos = Slos(ttft_s=_duration_s(slo_texts[0], "--ttft"),
                tpot_s=_duration_s(slo_texts[1], "--tpot"),
                e2el_s=_duration_s(slo_texts[2], "--e2el"))
    plan = Plan(num_requests, isl, osl, warmup, _duration_s(duration, "--duration")
                if duration else None, seed, percentiles, slos)
    runs = []
    for load in _loads(rate, arrival, clients, max_concurrency, trace):
        runs.append(_with_progress(lambda tick, load=load: run(target, load, plan, on_done=tick),
                                   f"bench {_label(load.describe())}", num_requests,
                                   show_progress))
    endpoint_doc = {"url": target.base_url, "endpoint": APIS[api], "served_model": served_model,
                    "api_key_env": api_key_env, "hold_length": hold_length,
                    "request_timeout_s": timeout_s}
    return runs, endpoint_doc


def _with_progress(call: Any, label: str, total: int, show: bool) -> Any:
    if not (show and sys.stderr.isatty()):
        return call(None)
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        return call(lambda done, _total: bar.update(task, completed=done))


def _read(paths: str) -> tuple[str, list[Any], list[dict]]:
    from phasewise.measure.bench_results import read_results

    kinds, runs, tests = [], [], []
    for path in split_list(paths, "--read", str):
        kind, items = read_results(path)
        kinds.append(kind)
        (tests if kind == "llama-bench" else runs).extend(items)
    return ",".join(dict.fromkeys(kinds)), runs, tests


def _compare(run: Any, target: Any) -> list[dict]:
    from phasewise.measure.bench_predict import compare
    from phasewise.measure.bench_predict import predict as simulate_run

    return [c.row() for c in compare(run.summary, simulate_run(run, target))]


def _fit(runs: list[Any], target: Any, out: str) -> None:
    from phasewise.files import write_atomic
    from phasewise.measure.bench_fit import fit_overhead

    result = fit_overhead(runs, target)
    path = write_atomic(out, result.toml())
    sys.stderr.write(f"{result.level} step_overhead_s: {result.before_s * 1e3:.4g} ms -> "
                     f"{result.after_s * 1e3:.4g} ms over {len(result.runs)} run(s), rms log "
                     f"residual of TPOT {result.rms_log_residual:.3f}; wrote {path}\n"
                     f"use it: --calibration {path}\n")


def _write_files(runs: list[Any], tests: list[dict], endpoint_doc: dict, predictions: Any,
                 target: Any, save_result: str | None, measurements_out: str | None,
                 weight_dtype: str, isl: str, osl: str) -> None:
    from phasewise.files import write_atomic
    from phasewise.report.output import rows_to_csv, to_json

    if save_result:
        from phasewise.measure.bench_results import document

        write_atomic(save_result, to_json(document(runs, endpoint=endpoint_doc,
                                                   plan={"isl": isl, "osl": osl},
                                                   predictions=predictions)))
    if measurements_out:
        from datetime import datetime

        from phasewise.measure.bench_results import llama_bench_rows, measurement_rows

        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        source = f"phasewise bench {stamp}"
        rows = measurement_rows(runs, hardware=target.hardware, model=target.model,
                                weight_dtype=weight_dtype, software=target.engine,
                                source=source, record_prefix=f"BENCH-{stamp}")
        rows += llama_bench_rows(tests, hardware=target.hardware, source=source,
                                 record_prefix=f"LLAMABENCH-{stamp}")
        if not rows:
            raise InputError("no completed run to write as measurement rows.")
        write_atomic(measurements_out, rows_to_csv(rows))


# ---------------------------------------------------------------- rendering


def _label(load: dict) -> str:
    if load.get("kind") == "closed":
        return f"{load['clients']} client(s)"
    if load.get("kind") == "open":
        return f"{load['rate_rps']} req/s"
    return str(load.get("kind"))


def _summary_rows(run: Any) -> list[dict]:
    s = run.summary
    rows = [{"metric": "load", "value": _label(s.load)},
            {"metric": "completed / sent", "value": f"{s.completed} / {s.sent}"},
            {"metric": "failed", "value": s.failed}, {"metric": "timed out", "value": s.timed_out},
            {"metric": "not sent (time limit)", "value": s.not_sent},
            {"metric": "length mismatches", "value": s.length_mismatches},
            {"metric": "duration (s)", "value": round(s.duration_s, 3)},
            {"metric": "request throughput (req/s)", "value": round(s.request_throughput_rps, 3)},
            {"metric": "output throughput (tok/s)", "value": round(s.output_throughput_tps, 2)},
            {"metric": "total throughput (tok/s)", "value": round(s.total_token_throughput_tps, 2)}]
    if s.request_goodput_rps is not None:
        rows.append({"metric": "goodput (req/s)", "value": round(s.request_goodput_rps, 3)})
    for name in ("ttft", "tpot", "itl", "e2el"):
        stat = getattr(s, name)
        if not stat.count:
            continue
        parts = {"mean": stat.mean_s, "median": stat.median_s,
                 **{k: v for k, v in stat.percentiles_s.items() if k != "p50"}}
        for key, value in parts.items():
            rows.append({"metric": f"{key} {name.upper()} (ms)", "value": round(value * 1e3, 3)})
    return rows


def _render(runs: list[Any], tests: list[dict], predictions: Any, fmt: str) -> None:
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json

    if fmt == "json":
        echo(to_json({"runs": [{"summary": r.summary.model_dump(mode="json"),
                                "notes": list(r.notes),
                                **({"prediction": predictions[i]} if predictions else {})}
                               for i, r in enumerate(runs)], "llama_bench": tests}))
        return
    if fmt == "csv":
        from phasewise.report.output import flatten

        echo(rows_to_csv(_comparison_rows(predictions) if predictions else
                         [_run_row(i, r) for i, r in enumerate(runs)] or [flatten(t) for t in tests]))
        return
    tables = [(f"Run {i + 1}", _summary_rows(r)) for i, r in enumerate(runs)]
    if predictions:
        tables += [(f"Run {i + 1}: measured against predicted (error = predicted / measured − 1)",
                    [_prediction_cells(row) for row in p]) for i, p in enumerate(predictions)]
    if tests:
        tables.append(("llama-bench", [{"test": f"pp{t.get('n_prompt')}" if t.get("n_prompt")
                                        else f"tg{t.get('n_gen')}", "model": t.get("model_type"),
                                        "t/s": t.get("avg_ts")} for t in tests]))
    for title, rows in tables:
        if fmt == "md":
            echo(f"**{title}**\n\n" + rows_to_markdown(rows))
        else:
            _table(title, rows)
    for i, run in enumerate(runs):
        for note in run.notes:
            sys.stderr.write(f"run {i + 1}: {note}\n")


def _run_row(index: int, run: Any) -> dict:
    """A run as one CSV row: its load, counts, throughputs and latency statistics (s)."""
    from phasewise.report.output import flatten

    s = run.summary.model_dump(mode="json")
    return {"run": index + 1, **flatten({k: v for k, v in s.items() if k != "errors"})}


def _comparison_rows(predictions: list[list[dict]]) -> list[dict]:
    return [{"run": i + 1, **row} for i, rows in enumerate(predictions) for row in rows]


def _prediction_cells(row: dict) -> dict:
    scale = 1e3 if row["unit"] == "s" else 1.0
    unit = "ms" if row["unit"] == "s" else row["unit"]
    error = row["error"]
    return {"metric": f"{row['statistic']} {row['metric']}".strip() + f" ({unit})",
            "measured": round(row["measured"] * scale, 4),
            "predicted": round(row["predicted"] * scale, 4),
            "error": "" if error is None or math.isnan(error) else f"{error:+.1%}"}


def _table(title: str, rows: list[dict]) -> None:
    from rich.table import Table

    view = Table(title=title, title_justify="left")
    for column in rows[0] if rows else {}:
        view.add_column(column, justify="left" if column in ("metric", "model", "test") else "right")
    for row in rows:
        view.add_row(*(str(v) for v in row.values()))
    console().print(view)
