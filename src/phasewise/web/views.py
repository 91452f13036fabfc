"""Each view of the web app: the form in, the same JSON document the CLI writes out.

These call the Python API the CLI calls (``estimate``, ``explain``, ``batch_sweep``,
``compare``, the simulator), with the form parsed by the CLI's own parsers, so a page and
``phasewise VERB --format json`` give the same numbers for the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.web.inputs import (
    MAX_WEB_RATES,
    MAX_WEB_REQUESTS,
    Form,
    blank_to_none,
    bounded,
    devices,
    model_spec,
    whole,
)

QUICK_VIEWS = ("estimate", "explain", "compare")
LONG_VIEWS = ("simulate", "plan")


def _precision(form: Form) -> Any:
    from phasewise.commands._whatif import fraction
    from phasewise.specs import Precision

    keep = fraction(blank_to_none(form.kv_keep), "--kv-keep")
    return Precision(form.weight_dtype.strip(), form.act_dtype.strip(), form.kv_dtype.strip(),
                     1.0 if keep is None else keep)


def _workload(form: Form) -> Any:
    from phasewise.specs import Workload

    return Workload(whole(form.isl, "--isl"), whole(form.osl, "--osl"),
                    whole(form.batch_size, "--batch-size"))


def _parallelism(form: Form, tp: int | None = None) -> Any:
    from phasewise.specs import Parallelism

    return Parallelism(tp if tp is not None else whole(form.tp, "--tp"), whole(form.pp, "--pp"),
                       whole(form.ep, "--ep"))


def _cost(form: Form) -> Any:
    from phasewise.cost.registry import DEFAULT_COST_MODEL
    from phasewise.estimate.pricing import CostChoice

    return CostChoice(blank_to_none(form.cost) or DEFAULT_COST_MODEL, blank_to_none(form.engine),
                      None)


def _one_device(form: Form) -> Any:
    specs = devices(form)
    if len(specs) != 1:
        raise InputError(f"--hardware takes one device in this view, got {len(specs)}; the "
                         "compare view ranks several.")
    return specs[0]


def estimate_view(form: Form) -> dict[str, Any]:
    from phasewise.estimate import estimate

    cost = _cost(form)
    result = estimate(model_spec(form), _one_device(form), _workload(form), _precision(form),
                      _parallelism(form), cost=cost.name, detail=True, engine=cost.engine,
                      calibration=None)
    return result.model_dump(mode="json")


def explain_view(form: Form) -> dict[str, Any]:
    from phasewise.estimate.explain import explain
    from phasewise.estimate.sweep import batch_sweep

    spec, device = model_spec(form), _one_device(form)
    args = (spec, device, _workload(form), _precision(form), _parallelism(form))
    doc = explain(*args, cost=_cost(form)).model_dump(mode="json")
    if form.batch_sweep:
        doc["batch_sweep"] = batch_sweep(*args, batches=None, cost=_cost(form)).model_dump(
            mode="json")
    return doc


def compare_view(form: Form) -> dict[str, Any]:
    from phasewise.commands._app import ints
    from phasewise.estimate.compare import compare

    chosen = devices(form) if form.hardware.strip() or form.hardware_upload else None
    degrees = ints(form.tp, "--tp")
    result = compare(model_spec(form), _workload(form), _precision(form), hardware=chosen,
                     parallelisms=[_parallelism(form, t) for t in degrees],
                     rank_by=form.rank_by.strip(), cost=_cost(form))
    return result.model_dump(mode="json")


def simulate_bounds(form: Form) -> tuple[int, list[float]]:
    """The requests and load points of a web simulation, within the web app's bounds."""
    from phasewise.commands._app import split_list

    n = bounded(whole(form.num_requests, "--num-requests"), "--num-requests", 1, MAX_WEB_REQUESTS)
    rates = split_list(form.rate, "--rate", float)
    if not 0 < len(rates) <= MAX_WEB_RATES or any(not r > 0 for r in rates):
        raise InputError(f"--rate {form.rate}: give 1 to {MAX_WEB_RATES} positive request rates "
                         "(requests/s), comma-separated.")
    return n, rates


def simulate_view(form: Form) -> dict[str, Any]:
    """The simulate verb itself, run in process on the form's flags, bounded in requests and
    load points so that a web job stays short. An uploaded config or sheet goes to a private
    temporary folder for the run and is removed after it (never to a path a user names)."""
    import tempfile

    from phasewise.commands.report import run_verb

    n, rates = simulate_bounds(form)
    flags = ["--isl", form.isl.strip(), "--osl", form.osl.strip(),
             "--rate", ",".join(f"{r:g}" for r in rates), "--num-requests", str(n),
             "--seed", form.seed.strip(), "--max-num-seqs", form.max_num_seqs.strip(),
             "--weight-dtype", form.weight_dtype.strip(), "--act-dtype", form.act_dtype.strip(),
             "--kv-dtype", form.kv_dtype.strip(), "--tp", form.tp.strip(), "--no-progress"]
    if form.scheduler.strip():
        flags += ["--scheduler", form.scheduler.strip()]
    for flag, value in (("--engine", form.engine), ("--cost", form.cost)):
        if blank_to_none(value):
            flags += [flag, value.strip()]
    with tempfile.TemporaryDirectory(prefix="phasewise-web-") as private:
        model, hardware = form.model.strip(), form.hardware.strip()
        if form.model_upload:
            model = str(Path(private) / "config.json")
            Path(model).write_text(form.model_upload, encoding="utf-8")
        if form.hardware_upload:
            hardware = str(Path(private) / "device.toml")
            Path(hardware).write_text(form.hardware_upload, encoding="utf-8")
        _one_device(form)  # one device in this view, with the CLI's error otherwise
        return run_verb("simulate", ["--model", model, "--hardware", hardware, *flags])


def plan_view(form: Form) -> Any:
    """The planner through its CLI verb (catalog names only: the verb reads no uploads), on
    one worker and with a few candidates verified, so that a web plan stays short."""
    from phasewise.commands.report import run_verb

    if form.model_upload or form.hardware_upload:
        raise InputError("the plan view takes catalog models and devices; uploads work in the "
                         "other views.")
    n, rates = simulate_bounds(form)
    if len(rates) != 1:
        raise InputError(f"--rate {form.rate}: the plan view takes one request rate.")
    return run_verb("plan", plan_flags(form) + ["--workers", "1", "--no-progress"])


def plan_flags(form: Form) -> list[str]:
    """The plan verb's flags for this form; an empty device list searches the catalog."""
    from phasewise.web.inputs import WEB_PLAN_VERIFY

    flags = ["--model", form.model.strip()]
    if form.hardware.strip():
        flags += ["--hardware", form.hardware.strip()]
    return flags + ["--isl", form.isl.strip(), "--osl", form.osl.strip(), "--rate",
                    form.rate.strip(), "--ttft", form.ttft_slo.strip(), "--tpot",
                    form.tpot_slo.strip(), "--verify", str(WEB_PLAN_VERIFY), "--num-requests",
                    form.num_requests.strip()]


def plan_available() -> bool:
    import phasewise.cli  # noqa: F401 - registers every verb on the app
    from phasewise.commands._app import app

    return any((c.name or c.callback.__name__) == "plan" for c in app.registered_commands)


VIEWS: dict[str, Callable[[Form], Any]] = {
    "estimate": estimate_view, "explain": explain_view, "compare": compare_view,
    "simulate": simulate_view, "plan": plan_view}


def cli_command(view: str, form: Form) -> str:
    """The command line that computes the same document (uploads shown as FILE)."""
    import shlex

    if view == "plan":
        return shlex.join(["phasewise", "plan", *plan_flags(form), "--format", "json"])
    model = "CONFIG.json" if form.model_upload else form.model
    words = ["phasewise", view, "--model", model]
    hardware = ",".join(filter(None, [form.hardware.strip(),
                                      "SHEET.toml" if form.hardware_upload else ""]))
    if hardware:
        words += ["--hardware", hardware]
    shared = [("--isl", form.isl), ("--osl", form.osl), ("--weight-dtype", form.weight_dtype),
              ("--act-dtype", form.act_dtype), ("--kv-dtype", form.kv_dtype), ("--tp", form.tp),
              ("--pp", form.pp), ("--ep", form.ep), ("--engine", form.engine),
              ("--cost", form.cost)]
    if view != "simulate":
        shared += [("--batch-size", form.batch_size), ("--kv-keep", form.kv_keep)]
    extra = {"estimate": [("--detail", None)],
             "explain": [("--batch-sweep", None)] if form.batch_sweep else [],
             "compare": [("--rank-by", form.rank_by)],
             "simulate": [("--scheduler", form.scheduler), ("--rate", form.rate),
                          ("--num-requests", form.num_requests),
                          ("--max-num-seqs", form.max_num_seqs), ("--seed", form.seed)],
             "plan": []}[view]
    for flag, value in shared + extra:
        if value is None and flag in ("--detail", "--batch-sweep"):
            words.append(flag)
        elif blank_to_none(value) is not None:
            words += [flag, value.strip()]
    return shlex.join(words + ["--format", "json"])
