"""Fit and score: measurement rows to scenarios, scenarios to predictions, by source.

Every prediction goes through ``phasewise.estimate`` with a ``Calibrated`` cost model, so
the figure validate reports for a row is the figure ``phasewise estimate`` prints for it.
The fit prices the same ledgers with the same formula (``cost.fit``); a test holds the two
paths to each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from phasewise.cost.calibrated import Calibrated
from phasewise.cost.calibration import Profile, load_profile
from phasewise.cost.fit import FitResult, Observation, fit_profile
from phasewise.errors import InputError
from phasewise.estimate import estimate
from phasewise.ledger import Step, build_ledger
from phasewise.lower import split_prefill
from phasewise.validate.measurements import MeasurementFile, Problem
from phasewise.validate.prediction import Prediction, short_source
from phasewise.validate.scenario import (
    MappingError,
    Scenario,
    predicted_seconds,
    predicted_value,
    scenario_for,
    unscorable,
)

PHASE_KINDS = ("prefill", "decode", "end_to_end")
# As ``estimate`` averages decode: Simpson's rule over the first, middle and last context.
SIMPSON_WEIGHTS = (1 / 6, 4 / 6, 1 / 6)
CEILING_KINDS = ("gemm", "memory_bw")


# What a measurement faster than the speed-of-light floor says: the floor is the ledger's
# FLOPs and bytes at the sheet's peak and bandwidth, so one of those is above the truth.
FLOOR_BEATEN = ("the floor takes the ledger's FLOPs and bytes at the sheet's peak and "
                "bandwidth, so a sheet figure is below what the part reaches (a GPU boosting "
                "above its rated clock), the ledger counts more than the run moved (MoE "
                "routing that touches fewer experts than uniform routing does), or the row "
                "does not describe its run")
# ... and one the model knows: the engine accumulates 16-bit matmuls in fp16, which the part
# runs faster than the sheet's fp32-accumulate figure the floor takes.
FLOOR_BEATEN_FP16_ACCUMULATE = ("the engine accumulates 16-bit matmuls in fp16, which this "
                                "part runs at {factor:g}x the sheet's fp16 rate (its "
                                "fp32-accumulate figure, the one the floor takes)")


@dataclass
class Dataset:
    scenarios: list[Scenario]
    skipped: list[Problem] = field(default_factory=list)
    excluded: list[Problem] = field(default_factory=list)
    unknown_columns: list[str] = field(default_factory=list)
    # rows of a loaded server (a load set), replayed through the simulator, never fitted
    serving: list = field(default_factory=list)  # validate.serving_rows.ServingScenario
    serving_lines: dict[str, tuple[int, str]] = field(default_factory=dict)


def dataset(files: Sequence[MeasurementFile]) -> Dataset:
    """Scenarios for every row that maps; a Problem for every row that does not, for every
    row its file marks excluded, and for every row whose workload the ledger cannot
    describe (``unscorable``): kept out of fits and scores, and said so. Rows of a loaded
    server (``load`` set) become serving scenarios for the simulator, never fitted."""
    from phasewise.validate.serving_rows import serving_scenario_for

    out = Dataset([])
    for file in files:
        out.skipped += [Problem(p.line, p.record_id, f"{_name(file.path)}: {p.reason}")
                        for p in file.problems]
        out.unknown_columns += [f"{_name(file.path)}: {c}" for c in file.unknown_columns]
        for row in file.rows:
            if row.exclude:
                out.excluded.append(Problem(row.line, row.record_id, row.exclude))
                continue
            if row.load:
                try:
                    out.serving.append(serving_scenario_for(row))
                    out.serving_lines[row.record_id] = (row.line, _name(file.path))
                except (MappingError, InputError) as err:
                    out.skipped.append(Problem(row.line, row.record_id,
                                               f"{_name(file.path)}: {err}"))
                continue
            try:
                scenario = scenario_for(row)
                _check_priceable(scenario)
            except (MappingError, InputError) as err:
                out.skipped.append(Problem(row.line, row.record_id, f"{_name(file.path)}: {err}"))
                continue
            if why := unscorable(scenario, row.software_stack):
                out.excluded.append(Problem(row.line, row.record_id, why))
            else:
                out.scenarios.append(scenario)
    return out


def _check_priceable(scenario: Scenario) -> None:
    """Raise here, for this row, the InputError pricing it would raise later inside a fit
    or a score (a format the device has no math for, a layout the model does not allow)."""
    if scenario.kind not in CEILING_KINDS:
        scenario.hardware.peak_flops(scenario.precision.math_format)
        observation(scenario)


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def scenario_steps(scenario: Scenario, ubatch_tokens: int) -> list[tuple[float, Step]]:
    """The weighted forward passes whose times sum to the scenario's measured time, taken
    as ``estimate`` takes them: the prefill step (in the engine's chunks), and decode at
    the first, middle and last context averaged with Simpson's rule."""
    w = scenario.workload
    prefill = [(1.0, s) for s in split_prefill(Step.prefill(w.isl, batch=w.batch_size),
                                               ubatch_tokens)]
    first, last = w.isl, w.isl + max(w.osl - 2, 0)
    decode = [(weight, Step.decode(w.batch_size, c))
              for weight, c in zip(SIMPSON_WEIGHTS, (first, (first + last) // 2, last), strict=False)]
    if scenario.kind == "prefill":
        return prefill
    if scenario.kind == "decode":
        return decode
    return prefill + [((w.osl - 1) * weight, s) for weight, s in decode]


def observation(scenario: Scenario) -> Observation:
    if scenario.kind in CEILING_KINDS:
        return Observation(scenario.record_id, scenario.source, scenario.hardware, None,
                           scenario.measured_s, ceiling=scenario.kind,
                           math_format=scenario.math_format)
    ubatch = scenario.engine.prefill_ubatch_tokens if scenario.engine else 0
    passes = tuple((weight, build_ledger(scenario.model, step, scenario.precision,
                                         scenario.parallelism))
                   for weight, step in scenario_steps(scenario, ubatch))
    return Observation(scenario.record_id, scenario.source, scenario.hardware, scenario.engine,
                       scenario.measured_s, passes)


def fit(scenarios: Sequence[Scenario], *, name: str = "fitted") -> FitResult:
    return fit_profile([observation(s) for s in scenarios], name=name)


def predict(scenario: Scenario, profile: Profile) -> Prediction:
    """The row's expected and floor figures, through ``estimate`` for phase rows."""
    cost = Calibrated.for_device(scenario.hardware, engine=scenario.engine, calibration=profile)
    if scenario.kind in CEILING_KINDS:
        c = cost.constants
        if scenario.kind == "gemm":
            peak = scenario.hardware.peak_flops(scenario.math_format)
            expected_s, floor_s = 1.0 / (peak * c.gemm_fraction), 1.0 / peak
        else:
            bandwidth = scenario.hardware.memory_bandwidth_bytes_per_s
            expected_s, floor_s = 1.0 / (bandwidth * c.bandwidth_fraction), 1.0 / bandwidth
        model = ""
    else:
        est = estimate(scenario.model, scenario.hardware, scenario.workload, scenario.precision,
                       scenario.parallelism, cost=cost)
        expected_s = predicted_seconds(scenario, est)
        floor_s = predicted_seconds(scenario, est, floor=True)
        model = scenario.model.name
    # the speed-up reaches 16-bit matmuls only (the kernels' peak_factor, lower.llama_cpp)
    speedup = cost.traits.gemm_peak_factor if (
        scenario.kind not in CEILING_KINDS and scenario.precision.activations == "fp16") else 1.0
    return Prediction(
        record_id=scenario.record_id, source=scenario.source, phase=scenario.phase,
        hardware=scenario.hardware.name, model=model,
        engine=scenario.engine.name if scenario.engine else "", metric=scenario.metric,
        unit=scenario.unit, measured=scenario.value,
        predicted=predicted_value(scenario, expected_s), floor=predicted_value(scenario, floor_s),
        measured_s=scenario.measured_s, predicted_s=expected_s, floor_s=floor_s,
        fp16_accumulate_speedup=speedup)


def sources(scenarios: Sequence[Scenario]) -> list[str]:
    return list(dict.fromkeys(s.source for s in scenarios))


def match_source(name: str, known: Sequence[str]) -> str:
    """A source by its full name, its short label, or a part of either (case-insensitive)."""
    lowered = name.lower()
    exact = [s for s in known if lowered in (s.lower(), short_source(s).lower())]
    found = exact or [s for s in known if lowered in s.lower()]
    if len(found) != 1:
        listing = "; ".join(short_source(s) for s in known)
        what = "matches several sources" if found else "matches no source"
        raise InputError(f"--holdout-source '{name}' {what}; choose one of: {listing}.")
    return found[0]


def in_sample(scenarios: Sequence[Scenario], profile: Profile | None = None) -> list[Prediction]:
    """Every row scored with ``profile`` (the bundled calibration when None)."""
    chosen = profile or load_profile()
    return [predict(s, chosen) for s in scenarios]


def holdout(scenarios: Sequence[Scenario], source: str) -> tuple[list[Prediction], FitResult]:
    """Refit without ``source``'s rows, then score those rows."""
    training = [s for s in scenarios if s.source != source]
    held = [s for s in scenarios if s.source == source]
    result = fit(training, name=f"without {short_source(source)}")
    return [predict(s, result.profile) for s in held], result


def leave_one_source_out(scenarios: Sequence[Scenario], *,
                         progress: Callable[[int, int, str], None] | None = None
                         ) -> list[Prediction]:
    """Every source of phase measurements held out in turn: each prefill, decode and
    end-to-end row predicted by a fit that never saw its source. Device microbenchmarks
    (best matmul rate, streaming bandwidth) measure the ceilings the engines' efficiencies
    are fractions of; they stay in every fold's fit and are not scored here. ``progress``
    is called before each fold with the folds done, their number and the source."""
    predictions: list[Prediction] = []
    held_out = sources([s for s in scenarios if s.kind in PHASE_KINDS])
    for done, source in enumerate(held_out):
        if progress is not None:
            progress(done, len(held_out), source)
        held = holdout(scenarios, source)[0]
        predictions += [p for p in held if p.phase in PHASE_KINDS]
    return predictions
