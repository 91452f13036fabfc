"""`phasewise calibrate`: fit this machine's calibration profile from profile runs and
write it, with a hardware sheet of the measured ceilings, for `phasewise estimate`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from phasewise.commands._app import app, console, echo, ints, split_list, whole
from phasewise.commands.profile import MAX_REPEATS, MAX_TOKENS, require_torch
from phasewise.errors import InputError

# What `calibrate` profiles when not told, per kind of device. On a CPU a small model's
# steps are bound by its GEMMs and memory. On a GPU a small model's eager prefill is bound by
# the host dispatching its kernels (on an H200, Llama-3.2-1B's 128- to 2048-token prompts all
# take 6.6-12 ms, and vary by up to 70% from run to run), which the calibrated model does not
# describe; prompts of 2048+ tokens of a model of billions of parameters, and decode
# replayed as a CUDA graph, are bound by the GPU (benchmarks/README.md, "Profile on CUDA").
CPU_DEFAULTS = {"model": "smollm2-135m", "prompt_lengths": "128,256,512,1024",
                "batch_size": "1"}
CUDA_DEFAULTS = {"prompt_lengths": "2048,4096", "batch_size": "1,8"}
# On a GPU: the largest of these that fits in its free memory.
CUDA_MODELS = ("llama-3.1-8b", "llama-3.2-3b", "llama-3.2-1b")


@app.command()
def calibrate(
    profiles: str | None = typer.Option(None, "--from", help="Profile documents to fit (JSON "
                                           "from `phasewise profile --out`), comma list. Without "
                                           "it, the models of --model are profiled now. Serving "
                                           "runs (`phasewise bench --save-result`, `vllm bench "
                                           "serve --save-result`) fit the engine's host "
                                           "overhead per step instead (with --engine, "
                                           "--hardware and --model)."),
    engine: str | None = typer.Option(None, "--engine", help="With serving runs in --from: "
                                         "the engine whose step overhead is fitted."),
    hardware: str | None = typer.Option(None, "--hardware", "-H", help="With serving runs in "
                                           "--from: the device the server ran on."),
    weight_dtype: str = typer.Option("auto", "--weight-dtype", help="With serving runs in "
                                     "--from: the weights' format the server ran (auto: the "
                                     "checkpoint's)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Models to profile when "
                                        "--from is not given (comma list; default "
                                        "smollm2-135m on a CPU, on a GPU the largest of "
                                        "llama-3.1-8b, -3.2-3b, -3.2-1b that fits)."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp32, bf16 or fp16 (default fp32 "
                                        "on CPU, bf16 on CUDA)."),
    prompt_lengths: str | None = typer.Option(
        None, "--prompt-lengths", "--isl", help="Prefill points to profile (comma list; "
        "default 128,256,512,1024 on a CPU, 2048,4096 on a GPU, where shorter prompts are "
        "bound by the host launching eager kernels)."),
    batch_size: str | None = typer.Option(
        None, "--batch-size", "-b", help="Decode batch sizes to profile (comma list; default "
        "1 on a CPU, where BLAS GEMMs of 2-16 rows run slower than the smooth curve of the "
        "calibrated model and fitting them distorts prefill and batch-1 decode; 1,8 on a "
        "GPU)."),
    context: str = typer.Option("128,1024", "--context", help="Decode contexts to profile."),
    repeats: int = typer.Option(3, "--repeats", help="Timed repeats per point."),
    out_dir: str | None = typer.Option(None, "--out-dir", help="Where to write "
                                          "calibration.toml and hardware.toml (default "
                                          "$PHASEWISE_HOME or ~/.config/phasewise)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
) -> None:
    """Fit the calibrated cost model to measurements of this machine."""
    from phasewise.files import check_output_dir, write_all
    from phasewise.local import local_dir
    from phasewise.measure.calibrate import calibration_toml, fit_calibration, hardware_sheet_toml
    from phasewise.report.output import to_json

    if fmt not in ("table", "json"):
        raise InputError(f"--format {fmt}: choose table or json.")
    whole(repeats, "--repeats", maximum=MAX_REPEATS)
    folder = Path(out_dir).expanduser() if out_dir else local_dir()
    if not out_dir:
        try:  # this machine's own folder is made on first use
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # check_output_dir names the problem
    check_output_dir(folder, "--out-dir")
    if profiles is not None and _serving_runs(profiles):
        _fit_host_overhead(profiles, model, hardware, engine, weight_dtype, folder, fmt)
        return
    if engine or hardware:
        raise InputError("--engine and --hardware go with serving runs in --from (bench or "
                         "vllm result files); profiles fit this machine's own sheet.")
    if profiles is not None:
        documents = [_read_profile(path) for path in split_list(profiles, "--from", str)]
    else:
        _plan(prompt_lengths or CPU_DEFAULTS["prompt_lengths"],
              batch_size or CPU_DEFAULTS["batch_size"], context, repeats)
        require_torch("calibrate")
        from phasewise.measure.micro import resolve_device

        where = resolve_device(device)
        cuda = where.startswith("cuda")
        dtype = dtype or ("bf16" if cuda else "fp32")
        defaults = CUDA_DEFAULTS if cuda else CPU_DEFAULTS
        plan = _plan(prompt_lengths or defaults["prompt_lengths"],
                     batch_size or defaults["batch_size"], context, repeats)
        if model:
            models = split_list(model, "--model", str)
        elif cuda:
            models = [largest_that_fits(CUDA_MODELS, plan, dtype, where)]
        else:
            models = [CPU_DEFAULTS["model"]]
        documents = _profile_now(models, where, dtype, plan)
    result, hardware = fit_calibration(documents)
    calibration_path, sheet_path = write_all({
        folder / "calibration.toml": calibration_toml(result, hardware),
        folder / "hardware.toml": hardware_sheet_toml(documents[0].ceilings)})
    usage = ("phasewise estimate --hardware local" if folder == local_dir() else
             f"phasewise estimate --hardware {sheet_path} --calibration {calibration_path}")
    if fmt == "json":
        echo(to_json({"calibration": str(calibration_path), "hardware": str(sheet_path),
                      "usage": usage, "fit": result.profile.fit,
                      "values": result.profile.values,
                      "points": _residual_rows(result)}))
        return
    console().print(_constants_table(result), _residuals_table(result))
    sys.stderr.write(f"wrote {calibration_path} and {sheet_path}\nuse it: {usage}\n")


def _plan(prompt_lengths: str, batch_size: str, context: str, repeats: int) -> Any:
    from phasewise.measure.profile import ProfilePlan

    return ProfilePlan(tuple(ints(prompt_lengths, "--prompt-lengths", maximum=MAX_TOKENS)),
                       tuple(ints(batch_size, "--batch-size", maximum=MAX_TOKENS)),
                       tuple(ints(context, "--context", maximum=MAX_TOKENS)), repeats=repeats,
                       layer_passes=0)  # the fit reads whole steps


def largest_that_fits(models: tuple[str, ...], plan: Any, dtype: str, where: str) -> str:
    """The first of ``models`` (largest first) whose profile fits in ``where``'s free
    memory; the smallest one's refusal when none does."""
    from phasewise.catalog import load_model
    from phasewise.measure.profile import check_fits

    for name in models:
        try:
            check_fits(load_model(name), plan, dtype, where)
            return name
        except InputError as refusal:
            last = refusal
    raise InputError(f"{last} Or name a smaller model with --model.")


def _serving_runs(profiles: str) -> bool:
    """Whether --from names serving-run result files (every one of them) rather than
    profile documents; a mix is refused."""
    from phasewise.measure.bench_results import read_results

    kinds = []
    for path in split_list(profiles, "--from", str):
        try:
            kinds.append(read_results(path)[0] in ("phasewise", "vllm"))
        except InputError:
            kinds.append(False)
    if any(kinds) and not all(kinds):
        raise InputError("--from mixes serving runs and profile documents; fit them apart.")
    return all(kinds)


def _fit_host_overhead(profiles: str, model: str | None, hardware: str | None,
                       engine: str | None, weight_dtype: str, folder: Path, fmt: str) -> None:
    """The engine's step overhead fitted to single-client serving runs (measure.bench_fit),
    written as a calibration profile that --calibration reads."""
    from phasewise.files import write_all
    from phasewise.measure.bench_fit import fit_overhead
    from phasewise.measure.bench_predict import Target
    from phasewise.measure.bench_results import read_results
    from phasewise.report.output import to_json

    missing = [flag for flag, v in (("--model", model), ("--hardware", hardware),
                                    ("--engine", engine)) if not v]
    if missing:
        raise InputError(f"fitting a host overhead from serving runs needs {', '.join(missing)}: "
                         "the model, device and engine the server ran.")
    runs = [run for path in split_list(profiles, "--from", str) for run in read_results(path)[1]]
    result = fit_overhead(runs, Target(model=model, hardware=hardware, engine=engine,
                                       weight_dtype=weight_dtype))
    (path,) = write_all({folder / "calibration.toml": result.toml()})
    summary = {"calibration": str(path), "level": result.level,
               "step_overhead_s_before": result.before_s, "step_overhead_s": result.after_s,
               "runs": len(result.runs), "rms_log_residual": result.rms_log_residual,
               "usage": f"--engine {engine} --calibration {path}"}
    if fmt == "json":
        echo(to_json(summary))
        return
    sys.stderr.write(f"{result.level} step_overhead_s: {result.before_s * 1e3:.4g} ms -> "
                     f"{result.after_s * 1e3:.4g} ms over {len(result.runs)} run(s), rms log "
                     f"residual of TPOT {result.rms_log_residual:.3f}; wrote {path}\n"
                     f"use it: {summary['usage']}\n")


def _read_profile(path: str) -> Any:
    from pydantic import ValidationError

    from phasewise.files import read_json
    from phasewise.measure.types import SCHEMA_VERSION, Profile

    document = read_json(path, what="profile document")
    if not isinstance(document, dict) or "ceilings" not in document:
        raise InputError(f"--from {path}: not a `phasewise profile --out` document.")
    if document.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise InputError(f"--from {path}: profile schema_version "
                         f"{document.get('schema_version')!r}, this phasewise reads "
                         f"{SCHEMA_VERSION}; profile again with this version.")
    try:
        return Profile.model_validate(document)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(f"--from {path}: not a `phasewise profile --out` document ({where}: "
                         f"{first['msg']}).") from None


def _profile_now(models: list[str], where: str, dtype: str, plan: Any) -> list[Any]:
    """Measure the ceilings once, then every model's points, with a progress bar."""
    from rich.console import Console
    from rich.progress import Progress

    from phasewise.catalog import load_model
    from phasewise.measure.calibrate import spec_to_document
    from phasewise.measure.micro import measure_ceilings
    from phasewise.measure.profile import check_fits, prepare_model, profile_points
    from phasewise.measure.types import Profile
    from phasewise.version import __version__

    specs = [load_model(m) for m in models]
    for spec in specs:
        check_fits(spec, plan, dtype, where)
    sys.stderr.write(f"measuring the ceilings of {where}…\n")
    ceilings = measure_ceilings(where)
    documents = []
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("profiling", total=len(specs) * len(plan.steps))
        for spec in specs:
            reference = prepare_model(spec, plan, dtype=dtype, device=where)
            points = []
            for point in profile_points(reference, spec, ceilings, plan, dtype=dtype, device=where):
                points.append(point)
                progress.update(task, advance=1, description=f"{spec.name}: {point.label}")
            documents.append(Profile(tool_version=__version__, model=spec.name,
                                     model_spec=spec_to_document(spec), weights="random (seed 0)",
                                     dtype=dtype, device=where, ceilings=ceilings,
                                     points=points, complete=True))
            del reference
    return documents


def _residual_rows(result: Any) -> list[dict[str, Any]]:
    return [{"measurement": obs.key, "measured_s": obs.measured_s, "fitted_s": float(pred),
             "error": float(pred / obs.measured_s - 1.0)}
            for obs, pred in zip(result.observations, result.predicted_s, strict=False) if not obs.ceiling]


def _constants_table(result: Any) -> Any:
    from rich.table import Table

    fit = result.profile.fit
    table = Table(title=f"Fitted constants ({fit['rows']} rows, rms log residual "
                        f"{fit['rms_log_residual']})", title_justify="left")
    for column in ("level", "constant", "value", "rows", "rms log residual"):
        table.add_column(column, justify="left" if column in ("level", "constant") else "right")
    for level, values in result.profile.values.items():
        for name, value in sorted(values.items()):
            record = result.profile.records.get(level, {}).get(name, {})
            if record.get("rows"):
                table.add_row(level, name, f"{value:.4g}", str(record.get("rows")),
                              f"{record.get('rms_log_residual', 0):.3f}")
    return table


def _residuals_table(result: Any) -> Any:
    from rich.table import Table

    from phasewise.report.units import percent, seconds

    table = Table(title="Measured against fitted", title_justify="left")
    for column in ("measurement", "measured", "fitted", "error"):
        table.add_column(column, justify="left" if column == "measurement" else "right")
    for row in _residual_rows(result):
        table.add_row(row["measurement"], seconds(row["measured_s"]), seconds(row["fitted_s"]),
                      percent(row["error"]))
    return table
