"""`phasewise profile`: measure this machine's ceilings, then real prefill and decode steps
of a reference transformer, each beside its ledger and the predicted time."""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from phasewise.commands._app import app, calibration_file, console, echo, ints
from phasewise.errors import InputError

DEFAULT_MODEL = "smollm2-135m"
PROFILE_FORMATS = ("table", "json", "csv", "md")


@app.command()
def profile(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog name, config.json "
                                        f"or its folder (default {DEFAULT_MODEL}, or read from "
                                        "--weights)."),
    weights: Optional[str] = typer.Option(None, "--weights", help="Real weights: a .gguf file or "
                                          "a folder of .safetensors in Hugging Face layout "
                                          "(default: random weights; speed does not depend on "
                                          "them)."),
    micro: bool = typer.Option(False, "--micro", help="Only the microbenchmarks: GEMM ceiling per "
                               "format, copy and read bandwidth."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="fp32, bf16 or fp16 (default fp32 "
                                        "on CPU, bf16 on CUDA)."),
    prompt_lengths: str = typer.Option("128,512,2048", "--prompt-lengths", "--isl",
                                       help="Prefill points: prompt tokens (comma list)."),
    batch_size: str = typer.Option("1,4,16,64", "--batch-size", "-b",
                                   help="Decode points: sequences per step (comma list)."),
    context: str = typer.Option("512", "--context", help="Decode points: cached tokens per "
                                "sequence (comma list)."),
    repeats: int = typer.Option(5, "--repeats", help="Timed repeats per point (the median is "
                                "kept)."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed runs before the repeats."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch "
                                          "(default: torch's, which follows OMP_NUM_THREADS)."),
    ceilings_file: Optional[str] = typer.Option(None, "--ceilings", help="Reuse the ceilings of "
                                                "an earlier run (its JSON) instead of measuring."),
    calibration: Optional[str] = typer.Option(None, "--calibration", callback=calibration_file,
                                              help="A calibration "
                                              "profile (TOML): show the calibrated model's "
                                              "expected time too."),
    gemm_size: Optional[int] = typer.Option(None, "--gemm-size", help="Side of the square GEMMs "
                                            "(default 2048 on CPU, 8192 on CUDA)."),
    buffer_mib: Optional[int] = typer.Option(None, "--buffer-mib", help="Bandwidth buffer, MiB "
                                             "(default 256 on CPU, 2048 on CUDA)."),
    cuda_graphs: bool = typer.Option(True, "--cuda-graphs/--no-cuda-graphs",
                                     help="Replay decode as a CUDA graph (CUDA only)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights and tokens."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Write the JSON document here, "
                                      "whole, after every point (an interrupted run keeps them)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Roofline figure: writes STEM.png "
                                       "and STEM.html."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
) -> None:
    """Measure the local device, then prefill and decode of a model, beside the ledger."""
    from phasewise.measure.micro import resolve_device

    if fmt not in PROFILE_FORMATS:
        raise InputError(f"--format {fmt}: choose one of {', '.join(PROFILE_FORMATS)}.")
    _set_threads(threads)
    where = resolve_device(device)
    dtype = dtype or ("bf16" if where.startswith("cuda") else "fp32")
    measure = dict(gemm_size=gemm_size, buffer_bytes=buffer_mib * 2**20 if buffer_mib else None,
                   warmup=warmup, repeats=repeats)
    if micro:
        _micro(where, measure, out, fmt)
        return
    _profile_model(where, dtype, model, weights, ceilings_file, calibration, measure, out,
                   plot, fmt, cuda_graphs, seed, _plan(prompt_lengths, batch_size, context,
                                                       warmup, repeats))


def _set_threads(threads: int | None) -> None:
    if threads is None:
        return
    if threads < 1:
        raise InputError(f"--threads {threads}: give at least 1.")
    import torch

    torch.set_num_threads(threads)


def _plan(prompt_lengths: str, batch_size: str, context: str, warmup: int, repeats: int) -> Any:
    from phasewise.measure.profile import ProfilePlan

    return ProfilePlan(tuple(ints(prompt_lengths, "--prompt-lengths")),
                       tuple(ints(batch_size, "--batch-size")), tuple(ints(context, "--context")),
                       warmup=warmup, repeats=repeats)


def _micro(device: str, measure: dict, out: str | None, fmt: str) -> None:
    from phasewise.measure.micro import measure_ceilings
    from phasewise.report.profile_view import ceilings_rows, ceilings_table
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.files import write_atomic

    _status(f"measuring the ceilings of {device}…")
    ceilings = measure_ceilings(device, **measure)
    document = to_json(ceilings.model_dump(mode="json"))
    if out:
        write_atomic(out, document)
    rows = [{"quantity": k, "value": v} for k, v in ceilings_rows(ceilings)]
    if fmt == "json":
        echo(document)
    elif fmt in ("md", "csv"):
        echo(rows_to_markdown(rows) if fmt == "md" else rows_to_csv(rows))
    else:
        console().print(ceilings_table(ceilings))


def _profile_model(device: str, dtype: str, model_ref: str | None, weights: str | None,
                   ceilings_file: str | None, calibration: str | None, measure: dict,
                   out: str | None, plot: str | None, fmt: str, cuda_graphs: bool, seed: int,
                   plan: Any) -> None:
    from phasewise.version import __version__
    from phasewise.measure.calibrate import spec_to_document
    from phasewise.measure.loading import resolve_spec
    from phasewise.measure.micro import measure_ceilings
    from phasewise.measure.profile import check_fits, prepare_model
    from phasewise.measure.types import Profile

    spec = resolve_spec(model_ref or (None if weights else DEFAULT_MODEL), weights)
    check_fits(spec, plan, dtype, device)  # before anything is allocated
    if ceilings_file:
        ceilings = _read_ceilings(ceilings_file)
    else:
        _status(f"measuring the ceilings of {device}…")
        ceilings = measure_ceilings(device, **measure)
    cost = _calibrated(ceilings, calibration) if calibration else None
    source = f"weights from {weights}" if weights else "random weights"
    _status(f"building {spec.name} ({source})…")
    reference = prepare_model(spec, plan, dtype=dtype, device=device, weights=weights, seed=seed)
    document = Profile(tool_version=__version__, model=spec.name, model_spec=spec_to_document(spec),
                       weights=weights or f"random (seed {seed})", dtype=dtype, device=device,
                       ceilings=ceilings)
    document = _measure_all(reference, spec, ceilings, plan, document, cost, out,
                            dtype=dtype, device=device, cuda_graphs=cuda_graphs, seed=seed)
    _render(document, fmt, plot)


def _measure_all(reference: Any, spec: Any, ceilings: Any, plan: Any, document: Any,
                 cost: Any, out: str | None, **run: Any) -> Any:
    """Measure point by point; the output file is rewritten whole after each, so Ctrl-C
    leaves every point measured so far on disk (``complete`` stays false)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from phasewise.measure.profile import profile_points
    from phasewise.report.output import to_json
    from phasewise.files import write_atomic

    points = []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn(
        "{task.completed}/{task.total}"), TimeElapsedColumn(), console=Console(stderr=True),
        transient=True)
    with progress:
        task = progress.add_task(f"profiling {spec.name}", total=len(plan.steps))
        for point in profile_points(reference, spec, ceilings, plan, cost=cost, **run):
            points.append(point)
            document = document.model_copy(update={"points": list(points)})
            if out:
                write_atomic(out, to_json(document.model_dump(mode="json")))
            progress.update(task, advance=1, description=f"profiling {spec.name}: {point.label}")
    document = document.model_copy(update={"complete": True})
    if out:
        write_atomic(out, to_json(document.model_dump(mode="json")))
    return document


def _render(document: Any, fmt: str, plot: str | None) -> None:
    from phasewise.report.profile_view import ceilings_table, point_row, points_table, roofline_figure
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json

    if plot:
        png, html = roofline_figure(document, plot)
        _status(f"wrote {png} and {html}")
    if fmt == "json":
        echo(to_json(document.model_dump(mode="json")))
    elif fmt == "md":
        echo(rows_to_markdown(point_row(p) for p in document.points))
    elif fmt == "csv":
        echo(rows_to_csv(point_row(p) for p in document.points))
    else:
        console().print(ceilings_table(document.ceilings), points_table(document))


def _read_ceilings(path: str) -> Any:
    import json
    from pathlib import Path

    from pydantic import ValidationError

    from phasewise.measure.types import Ceilings

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"--ceilings {path}: cannot read it as JSON ({err}).") from None
    try:
        return Ceilings.model_validate(data.get("ceilings", data))
    except (ValidationError, AttributeError):
        raise InputError(f"--ceilings {path}: not the output of `phasewise profile --micro "
                         "--format json` or of a profile run.") from None


def _calibrated(ceilings: Any, calibration: str) -> Any:
    from phasewise.cost.calibrated import Calibrated
    from phasewise.measure.micro import hardware_from_ceilings

    return Calibrated.for_device(hardware_from_ceilings(ceilings), calibration=calibration)


def _status(message: str) -> None:
    sys.stderr.write(message + "\n")
