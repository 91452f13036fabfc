"""Fitting an engine's host overhead per step from a few bench runs on one server.

A server that keeps one sequence in flight runs one decode step per output token, so a
run's mean TPOT is the step time: the kernels the calibrated model prices plus the fixed
time per step (``step_overhead_s``: scheduling, sampling, detokenizing, streaming). With
the kernels priced as they are, the constant that explains the run is

    step_overhead_s' = step_overhead_s + (TPOT_measured − TPOT_predicted),

and over several runs the fit takes the median (robust to one disturbed run). The value is
written at the engine's level for the device's class (``engine:<name>/class:<class>``, the
level ``cost.calibration`` resolves first for this constant), in a copy of the profile the
prediction used, so `--calibration FILE` applies it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from phasewise.errors import InputError
from phasewise.measure.bench_metrics import BenchRun
from phasewise.measure.bench_predict import Target, predict

CONSTANT = "step_overhead_s"
FIT_METHOD = ("median over single-sequence bench runs of step_overhead_s + (measured − "
              "predicted mean TPOT) (measure/bench_fit.py)")


@dataclass(frozen=True, slots=True)
class OverheadFit:
    """The fitted constant, the level it belongs to, and each run before and after."""

    level: str
    before_s: float
    after_s: float
    runs: tuple[dict[str, float], ...]  # measured, predicted before and after, per run
    rms_log_residual: float
    profile: Any  # cost.calibration.Profile holding the new value

    def toml(self) -> str:
        from phasewise.cost.calibration import profile_to_toml

        return (f"# {CONSTANT} of {self.level} fitted to {len(self.runs)} bench run(s) "
                f"(rms log residual of TPOT {self.rms_log_residual:.4f}).\n"
                + profile_to_toml(self.profile))


def base_profile(target: Target) -> Any:
    """The profile the prediction uses: the file given, this machine's own fit for the
    ``local`` sheet, else the bundled one."""
    from phasewise.cost.calibration import load_profile
    from phasewise.local import LOCAL_DEVICE_NAME, local_calibration_path

    if target.calibration:
        return load_profile(target.calibration)
    if target.hardware == LOCAL_DEVICE_NAME and local_calibration_path():
        return load_profile(str(local_calibration_path()))
    return load_profile(None)


def overhead_level(target: Target) -> tuple[str, float]:
    """The level key this constant is resolved from first for the device and engine, and
    its value now."""
    from phasewise.catalog import load_hardware
    from phasewise.cost.calibration import constants_for, level_keys, parameter_defs, resolve_engine

    engine = resolve_engine(target.engine)
    if engine.fitted_name == "generic":
        raise InputError("--fit-overhead needs --engine: the overhead is an engine's constant.")
    hardware = load_hardware(target.hardware)
    level = level_keys(hardware, engine, parameter_defs()[CONSTANT])[0]
    current = getattr(constants_for(base_profile(target), hardware, engine), CONSTANT)
    return level, current


def single_sequence(runs: Sequence[BenchRun]) -> list[BenchRun]:
    usable = [r for r in runs if r.summary.tpot.count and r.summary.max_concurrency_seen <= 1]
    if not usable:
        raise InputError("--fit-overhead needs runs that kept one request in flight "
                         "(--clients 1) with answers of more than one token.")
    return usable


def fit_overhead(runs: Sequence[BenchRun], target: Target) -> OverheadFit:
    usable = single_sequence(runs)
    level, before = overhead_level(target)
    profile = base_profile(target)
    predicted = [predict(r, target).tpot.mean_s for r in usable]
    measured = [r.summary.tpot.mean_s for r in usable]
    after = float(np.median([before + m - p for m, p in zip(measured, predicted, strict=False)]))
    if not after > 0:
        raise InputError(f"the runs' TPOT is below what the kernels alone are priced at "
                         f"({min(measured) * 1e3:.3g} ms measured, {min(predicted) * 1e3:.3g} ms "
                         "predicted): the device or engine constants, not the overhead, are "
                         "off; check --hardware and --engine.")
    fitted = _with_value(profile, level, after, usable)
    again = [predict(r, refit_target(target, fitted)).tpot.mean_s for r in usable]
    logs = [math.log(p / m) for p, m in zip(again, measured, strict=False)]
    rows = tuple({"measured_s": m, "predicted_before_s": p, "predicted_after_s": a}
                 for m, p, a in zip(measured, predicted, again, strict=False))
    return OverheadFit(level, before, after, rows,
                       float(np.sqrt(np.mean(np.square(logs)))), fitted)


def refit_target(target: Target, profile: Any) -> Target:
    """The target priced with ``profile`` (a Profile object passes through the cost model
    the way a file name does)."""
    return dataclasses.replace(target, calibration=profile)


def _with_value(profile: Any, level: str, value: float, runs: Sequence[BenchRun]) -> Any:
    values = {k: dict(v) for k, v in profile.values.items()}
    records = {k: {n: dict(r) for n, r in v.items()} for k, v in profile.records.items()}
    values.setdefault(level, {})[CONSTANT] = value
    records.setdefault(level, {})[CONSTANT] = {
        "rows": len(runs), "sources": ["phasewise bench runs (single sequence)"],
        "method": FIT_METHOD}
    fit = dict(profile.fit)
    fit["bench_overhead"] = f"{CONSTANT} at {level} from {len(runs)} bench run(s)"
    return dataclasses.replace(profile, name=f"{profile.name}+bench", values=values,
                               records=records, fit=fit)
