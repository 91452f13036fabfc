"""One validation run: which fit scores which rows, and the document it leaves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from phasewise.cost.calibration import load_profile, profile_to_toml
from phasewise.errors import InputError
from phasewise.files import write_atomic
from phasewise.validate.measurements import MeasurementFile, Problem
from phasewise.validate.run import (
    FLOOR_BEATEN,
    FLOOR_BEATEN_FP16_ACCUMULATE,
    Prediction,
    dataset,
    fit,
    holdout,
    in_sample,
    match_source,
    short_source,
    sources,
)
from phasewise.validate.run import leave_one_source_out as every_source_held_out
from phasewise.validate.score import Score, prediction_rows, score, score_rows
from phasewise.validate.trace import RowTrace, find_scenarios, trace
from phasewise.version import __version__

SCHEMA_VERSION = 1


@dataclass
class ValidationOutcome:
    mode: str
    predictions: list[Prediction]
    scores: list[Score]
    skipped: list[Problem] = field(default_factory=list)
    excluded: list[Problem] = field(default_factory=list)
    unknown_columns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """What was left out and why, for stderr: never silent."""
        lines = list(self.notes)
        if self.unknown_columns:
            lines.append(f"ignored unknown column(s): {', '.join(self.unknown_columns)}")
        if self.excluded:
            lines.append(f"excluded {len(self.excluded)} row(s) their file marks for exclusion or "
                         "whose workload the ledger cannot describe (the JSON document lists "
                         "each):")
            lines += grouped_problems(self.excluded)
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} row(s) that could not be read or mapped:")
            lines += grouped_problems(self.skipped)
        beaten = self.faster_than_floor()
        if beaten:
            lines.append(f"{len(beaten)} row(s) measured faster than the speed-of-light floor "
                         f"({FLOOR_BEATEN}):")
            lines += [f"  {p.record_id} ({p.hardware}, {p.model or p.phase}): floor "
                      f"{p.floor_error:+.1%} of the measured time"
                      + (": " + FLOOR_BEATEN_FP16_ACCUMULATE.format(
                          factor=p.fp16_accumulate_speedup)
                         if p.fp16_accumulate_speedup > 1 else "") for p in beaten]
        return lines

    def faster_than_floor(self) -> list[Prediction]:
        """The rows measured faster than their speed-of-light floor, furthest first."""
        return sorted((p for p in self.predictions if p.beats_floor),
                      key=lambda p: p.floor_error, reverse=True)

    def document(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "tool_version": __version__, "mode": self.mode,
            "error_definition": "predicted time / measured time - 1 (throughputs read as times)",
            "scores": score_rows(self.scores, as_text=False),
            "predictions": prediction_rows(self.predictions),
            "excluded": [_problem(p) for p in self.excluded],
            "skipped": [_problem(p) for p in self.skipped],
            "faster_than_floor": [p.record_id for p in self.faster_than_floor()],
            "unknown_columns": self.unknown_columns,
        }


# Record ids a summary line names before it says how many more share the reason.
IDS_SHOWN = 4


def grouped_problems(problems: Sequence[Problem]) -> list[str]:
    """One line per reason, in first-seen order: the row when it is alone, else the count
    and the first few record ids (a file's own exclusions often share one reason)."""
    groups: dict[str, list[Problem]] = {}
    for p in problems:
        groups.setdefault(p.reason, []).append(p)
    lines = []
    for reason, group in groups.items():
        if len(group) == 1:
            lines.append(f"  {group[0]}")
            continue
        ids = [p.record_id or f"line {p.line}" for p in group]
        more = f" and {len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else ""
        lines.append(f"  {len(ids)} rows ({', '.join(ids[:IDS_SHOWN])}{more}): {reason}")
    return lines


def _problem(p: Problem) -> dict:
    return {"line": p.line, "record_id": p.record_id, "reason": p.reason}


def run_validation(files: Sequence[MeasurementFile], *, holdout_source: str | None = None,
                   leave_one_source_out: bool = False, refit: bool = False,
                   calibration: str | None = None,
                   write_calibration: str | Path | None = None,
                   progress: Callable[[int, int, str], None] | None = None
                   ) -> ValidationOutcome:
    """Score the rows of ``files`` in one of four ways: with the bundled (or a given)
    calibration, refitted in-sample, with one source held out, or every source in turn
    (``progress`` hears of each fold)."""
    data = dataset(files)
    scenarios = data.scenarios
    notes = []
    if write_calibration is not None:
        result = fit(scenarios, name="default")
        result.profile.fit.update(_fit_record(scenarios, result))
        write_atomic(write_calibration, profile_to_toml(result.profile))
        notes.append(f"wrote the profile fitted to {len(scenarios)} rows to {write_calibration}")
    if leave_one_source_out:
        mode = "leave-one-source-out"
        predictions = every_source_held_out(scenarios, progress=progress)
    elif holdout_source:
        source = match_source(holdout_source, sources(scenarios))
        mode = f"fit without {short_source(source)}, scored on it"
        predictions = holdout(scenarios, source)[0]
    elif refit:
        mode = "in-sample refit"
        predictions = in_sample(scenarios, fit(scenarios).profile)
    else:
        profile = load_profile(calibration)
        mode = f"calibration '{profile.name}'" + (" (in-sample for the rows it was fitted to)"
                                                   if not calibration else "")
        predictions = in_sample(scenarios, profile)
    predictions = predictions + _serving(data, calibration, notes)
    return ValidationOutcome(mode, predictions, score(predictions), data.skipped, data.excluded,
                             data.unknown_columns, notes)


def _serving(data, calibration: str | None, notes: list[str]) -> list[Prediction]:  # noqa: ANN001
    """The serving rows replayed through the simulator with the bundled (or the given)
    calibration in every mode: no fit sees them, so they are held out whatever is fitted."""
    if not data.serving:
        return []
    from phasewise.validate.serving_rows import predict_all

    served, failed = predict_all(data.serving, calibration=calibration,
                                 lines=data.serving_lines)
    data.skipped += failed
    notes.append(f"{len(served)} serving row(s) (a concurrency, a request rate, MLPerf "
                 "Offline/Server or max throughput) replayed through the simulator with the "
                 f"{'given' if calibration else 'bundled'} calibration; no fit includes them, "
                 "so they are held out in every mode")
    return served


def _not_scored(ids: Sequence[str], excluded: Sequence[Problem],
                skipped: Sequence[Problem]) -> None:
    """An InputError saying why a row asked for is not scored, if one is excluded or
    skipped (its reason; a record id nothing has is left to ``find_scenarios``)."""
    for kind, problems in (("excluded", excluded), ("skipped", skipped)):
        by_id = {p.record_id.lower(): p for p in problems if p.record_id}
        for i in ids:
            if (p := by_id.get(i.lower())) is not None:
                raise InputError(f"--why: {p.record_id} is {kind}, not scored: {p.reason}")


def explain_rows(files: Sequence[MeasurementFile], ids: Sequence[str], *,
                 holdout_source: str | None = None, leave_one_source_out: bool = False,
                 refit: bool = False, calibration: str | None = None) -> list[RowTrace]:
    """``ids`` explained under the fit the mode chooses: the bundled (or a given) profile,
    an in-sample refit, the fit without ``holdout_source``, or, leaving each source out,
    the fit without the row's own source (what the leave-one-source-out table scores)."""
    data = dataset(files)
    scenarios = data.scenarios
    _not_scored(ids, data.excluded, data.skipped)
    served = {s.record_id.lower() for s in data.serving}
    if replayed := [i for i in ids if i.lower() in served]:
        raise InputError(f"--why takes an estimate apart; {', '.join(replayed)} is a serving "
                         "row, replayed through the simulator: `phasewise validate --rows` "
                         "gives its figures and `phasewise simulate` runs its load.")
    chosen = find_scenarios(scenarios, ids)
    if leave_one_source_out or holdout_source:
        held = (match_source(holdout_source, sources(scenarios)) if holdout_source else None)
        fits: dict[str, object] = {}
        traces = []
        for s in chosen:
            source = held or s.source
            if source not in fits:
                fits[source] = holdout(scenarios, source)[1].profile
            traces.append(trace(s, fits[source], in_memory=True))
        return traces
    if refit:
        profile = fit(scenarios, name="in-sample refit").profile
        return [trace(s, profile, in_memory=True) for s in chosen]
    return [trace(s, load_profile(calibration), calibration=calibration) for s in chosen]


def _fit_record(scenarios, result) -> dict:  # noqa: ANN001
    import numpy as np

    return {"name": "default",
            "method": "Levenberg-Marquardt on ln(predicted/measured time), ridge toward each "
                      "constant's parent level, restarted with the matrix-vector operation "
                      "count raised; the lowest objective kept (cost/fit.py)",
            "rows": len(scenarios),
            "sources": sorted({s.source for s in scenarios}),
            "rms_log_residual": round(float(np.sqrt(np.mean(result.log_residuals ** 2))), 4),
            "iterations": result.iterations}
