"""One scored row: what was measured, what phasewise expects for it and the speed-of-light
floor, shared by the single-stream scoring (``validate.run``) and the serving replays
(``validate.serving_rows``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prediction:
    """One row: what was measured, what phasewise expects, and the speed-of-light floor."""

    record_id: str
    source: str
    phase: str
    hardware: str
    model: str
    engine: str
    metric: str
    unit: str
    measured: float
    predicted: float
    floor: float
    measured_s: float
    predicted_s: float
    floor_s: float
    # the engine's fp16-accumulate speed-up on this device for the row's 16-bit matmuls
    # (lower.engines.Traits.gemm_peak_factor; 1 where none applies): the floor takes the sheet's
    # fp32-accumulate rate, so a row can beat it by up to this factor
    fp16_accumulate_speedup: float = 1.0

    @property
    def error(self) -> float:
        """Predicted over measured time, minus one (positive: expected slower)."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def floor_error(self) -> float:
        return self.floor_s / self.measured_s - 1.0

    @property
    def beats_floor(self) -> bool:
        """Measured faster than the speed-of-light floor (``FLOOR_BEATEN`` says what that
        can mean)."""
        return self.floor_s > self.measured_s


def short_source(source: str) -> str:
    """'Splitwise / SplitwiseSim profiling database (...)' -> 'Splitwise'."""
    for cut in (" (", ": ", " / ", " README", " performance overview"):
        source = source.split(cut)[0]
    return source.strip()
