"""`phasewise profile`: measure this machine's ceilings, then real prefill and decode steps
of a reference transformer, each beside its ledger and the predicted time."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from phasewise.commands._app import app, calibration_file, console, echo, ints, whole
from phasewise.errors import InputError

DEFAULT_MODEL = "smollm2-135m"
PROFILE_FORMATS = ("table", "json", "csv", "md")


@app.command()
def profile(
    model: str | None = typer.Option(None, "--model", "-m", help="Catalog name, config.json "
                                        f"or its folder (default {DEFAULT_MODEL}, or read from "
                                        "--weights)."),
    weights: str | None = typer.Option(None, "--weights", help="Real weights: a .gguf file or "
                                          "a folder of .safetensors in Hugging Face layout "
                                          "(default: random weights; speed does not depend on "
                                          "them)."),
    micro: bool = typer.Option(False, "--micro", help="Only the microbenchmarks: GEMM ceiling per "
                               "format, copy and read bandwidth."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp32, bf16 or fp16 (default fp32 "
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
    threads: int | None = typer.Option(None, "--threads", help="CPU threads for torch "
                                          "(default: torch's, which follows OMP_NUM_THREADS)."),
    ceilings_file: str | None = typer.Option(None, "--ceilings", help="Reuse the ceilings of "
                                                "an earlier run (its JSON) instead of measuring."),
    calibration: str | None = typer.Option(None, "--calibration", callback=calibration_file,
                                              help="A calibration "
                                              "profile (TOML): show the calibrated model's "
                                              "expected time too."),
    gemm_size: int | None = typer.Option(None, "--gemm-size", help="Side of the square GEMMs "
                                            "(default 2048 on CPU, 8192 on CUDA)."),
    buffer_mib: int | None = typer.Option(None, "--buffer-mib", help="Bandwidth buffer, MiB "
                                             "(default 256 on CPU, 2048 on CUDA)."),
    cuda_graphs: bool = typer.Option(True, "--cuda-graphs/--no-cuda-graphs",
                                     help="Replay decode as a CUDA graph (CUDA only)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights and tokens."),
    out: str | None = typer.Option(None, "--out", "-o", help="Write the JSON document here, "
                                      "whole, after every point (an interrupted run keeps them)."),
    plot: str | None = typer.Option(None, "--plot", help="Roofline figure: writes STEM.png "
                                       "and STEM.html."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
) -> None:
    """Measure the local device, then prefill and decode of a model, beside the ledger."""
    if fmt not in PROFILE_FORMATS:
        raise InputError(f"--format {fmt}: choose one of {', '.join(PROFILE_FORMATS)}.")
    _check_flags(repeats=repeats, warmup=warmup, threads=threads, gemm_size=gemm_size,
                 buffer_mib=buffer_mib, seed=seed, dtype=dtype, out=out, plot=plot)
    plan = None if micro else _plan(prompt_lengths, batch_size, context, warmup, repeats)
    require_torch("profile")
    from phasewise.measure.micro import resolve_device

    _set_threads(threads)
    where = resolve_device(device)
    dtype = dtype or ("bf16" if where.startswith("cuda") else "fp32")
    measure = dict(gemm_size=gemm_size, buffer_bytes=buffer_mib * 2**20 if buffer_mib else None,
                   warmup=warmup, repeats=repeats)
    if micro:
        _micro(where, measure, out, fmt)
        return
    _profile_model(where, dtype, model, weights, ceilings_file, calibration, measure, out,
                   plot, fmt, cuda_graphs, seed, plan)


# Ranges of the measurement flags: beyond them a run measures nothing more (a median of
# 1,000 repeats is as steady as it gets) or could not allocate its buffers.
MAX_REPEATS = 1_000
MAX_GEMM_SIZE = 65_536
DTYPES = ("fp32", "bf16", "fp16")
# Tokens per profiled step: past a million a reference step would not fit any device.
MAX_TOKENS = 1_000_000


def require_torch(verb: str) -> None:
    """An InputError naming the extra to install when PyTorch is missing (or broken)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError(f"`phasewise {verb}` runs models with PyTorch, which is not "
                         "installed: pip install 'phasewise[profile]'.") from None


def _check_flags(*, repeats: int, warmup: int, threads: int | None, gemm_size: int | None,
                 buffer_mib: int | None, seed: int, dtype: str | None, out: str | None,
                 plot: str | None) -> None:
    """The measurement flags in range and the output paths writable, before torch is
    imported or anything measured."""
    from phasewise.files import check_output_file, check_output_stem

    whole(repeats, "--repeats", maximum=MAX_REPEATS)
    whole(warmup, "--warmup", minimum=0, maximum=MAX_REPEATS)
    whole(threads, "--threads", maximum=os.cpu_count() or 1)
    whole(gemm_size, "--gemm-size", maximum=MAX_GEMM_SIZE)
    whole(seed, "--seed", minimum=0, maximum=2**63 - 1)
    if buffer_mib is not None:
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        whole(buffer_mib, "--buffer-mib", maximum=max(1, memory_mib // 4))
    if dtype is not None and dtype not in DTYPES:
        raise InputError(f"--dtype {dtype}: choose one of {', '.join(DTYPES)}.")
    if out:
        check_output_file(out, "--out")
    if plot:
        check_output_stem(plot, "--plot")


def _set_threads(threads: int | None) -> None:
    if threads is None:
        return
    if threads < 1:
        raise InputError(f"--threads {threads}: give at least 1.")
    import torch

    torch.set_num_threads(threads)


def _plan(prompt_lengths: str, batch_size: str, context: str, warmup: int, repeats: int) -> Any:
    from phasewise.measure.profile import ProfilePlan

    return ProfilePlan(tuple(ints(prompt_lengths, "--prompt-lengths", maximum=MAX_TOKENS)),
                       tuple(ints(batch_size, "--batch-size", maximum=MAX_TOKENS)),
                       tuple(ints(context, "--context", maximum=MAX_TOKENS)),
                       warmup=warmup, repeats=repeats)


def _micro(device: str, measure: dict, out: str | None, fmt: str) -> None:
    from phasewise.files import write_atomic
    from phasewise.measure.micro import measure_ceilings
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.report.profile_view import ceilings_rows, ceilings_table

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
    from phasewise.measure.calibrate import spec_to_document
    from phasewise.measure.loading import check_loadable, resolve_spec
    from phasewise.measure.micro import measure_ceilings
    from phasewise.measure.profile import check_fits, prepare_model
    from phasewise.measure.reference import check_buildable
    from phasewise.measure.types import Profile
    from phasewise.version import __version__

    spec = resolve_spec(model_ref or (None if weights else DEFAULT_MODEL), weights)
    check_buildable(spec)  # before the ceilings are measured
    if weights:
        check_loadable(spec)
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

    from phasewise.files import write_atomic
    from phasewise.measure.profile import profile_points
    from phasewise.report.output import to_json

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
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.report.profile_view import (
        ceilings_table,
        layers_table,
        point_row,
        points_table,
        roofline_figure,
    )

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
        tables = [ceilings_table(document.ceilings), points_table(document)]
        if any(p.layers for p in document.points):
            tables.append(layers_table(document))
        console().print(*tables)


def _read_ceilings(path: str) -> Any:
    from pydantic import ValidationError

    from phasewise.files import read_json
    from phasewise.measure.types import Ceilings

    data = read_json(path, what="ceilings document")
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
