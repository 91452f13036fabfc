"""Accuracy by source and phase: count, median and p90 absolute error, median signed bias.

Errors are on time (``predicted / measured − 1``): +20% means phasewise expects the
phase to take 20% longer than measured; a throughput figure is read as its time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from phasewise.validate.prediction import Prediction, short_source

PHASE_ORDER = ("prefill", "decode", "end_to_end", "serving", "gemm", "memory_bw")
ALL_SOURCES = "all"


@dataclass(frozen=True, slots=True)
class Score:
    source: str
    phase: str
    count: int
    median_abs_error: float
    p90_abs_error: float
    median_bias: float
    sol_median_abs_error: float
    sol_p90_abs_error: float
    sol_median_bias: float


def _stats(errors: Sequence[float]) -> tuple[float, float, float]:
    values = np.asarray(errors, float)
    absolute = np.abs(values)
    return (float(np.median(absolute)), float(np.percentile(absolute, 90)),
            float(np.median(values)))


def score(predictions: Iterable[Prediction]) -> list[Score]:
    """One score per (source, phase), then one per phase over every source."""
    groups: dict[tuple[str, str], list[Prediction]] = {}
    for p in predictions:
        groups.setdefault((short_source(p.source), p.phase), []).append(p)
        groups.setdefault((ALL_SOURCES, p.phase), []).append(p)
    scores = []
    for (source, phase), rows in groups.items():
        scores.append(Score(source, phase, len(rows), *_stats([p.error for p in rows]),
                            *_stats([p.floor_error for p in rows])))
    return sorted(scores, key=lambda s: (s.source == ALL_SOURCES, _phase_rank(s.phase),
                                         s.source))


def _phase_rank(phase: str) -> int:
    return PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _signed(value: float) -> str:
    return f"{value * 100:+.1f}%"


def score_rows(scores: Iterable[Score], *, as_text: bool = True) -> list[dict]:
    """Table rows; percentages as text for tables, fractions for csv/json."""
    rows = []
    for s in scores:
        if as_text:
            rows.append({
                "source": s.source, "phase": s.phase, "n": s.count,
                "median abs err": _pct(s.median_abs_error), "p90 abs err": _pct(s.p90_abs_error),
                "median bias": _signed(s.median_bias),
                "SOL median abs err": _pct(s.sol_median_abs_error),
                "SOL p90 abs err": _pct(s.sol_p90_abs_error),
                "SOL median bias": _signed(s.sol_median_bias)})
        else:
            rows.append(asdict(s))
    return rows


def prediction_rows(predictions: Iterable[Prediction]) -> list[dict]:
    return [{"record_id": p.record_id, "source": short_source(p.source), "phase": p.phase,
             "hardware": p.hardware, "model": p.model, "engine": p.engine, "metric": p.metric,
             "unit": p.unit, "measured": p.measured, "predicted": p.predicted, "sol": p.floor,
             "error": p.error, "sol_error": p.floor_error} for p in predictions]
