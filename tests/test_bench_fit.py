"""The host-overhead fit: a single-sequence run's TPOT is one decode step, so the fitted
step overhead must make the simulator reproduce the measured TPOT, at the engine's level
for the device's class."""

from __future__ import annotations

import pytest

from phasewise.errors import InputError
from phasewise.measure.bench_fit import fit_overhead
from phasewise.measure.bench_metrics import BenchRun, RequestRecord, summarize
from phasewise.measure.bench_predict import Target, predict

TARGET = Target(model="smollm2-135m", hardware="amd-epyc-9654", engine="llama.cpp",
                weight_dtype="Q4_1")


def _run(tpot_s: float, clients: int = 1) -> BenchRun:
    """Four requests of 64 + 16 tokens, one after another, 50 ms to the first token."""
    records = [RequestRecord(i, float(i), 64, 16,
                             token_s=tuple(i + 0.05 + tpot_s * k for k in range(16)),
                             chunk_tokens=(1,) * 16) for i in range(4)]
    return BenchRun(summarize(records, load={"kind": "closed", "clients": clients},
                              duration_s=4.0), tuple(records))


def test_the_fitted_overhead_reproduces_the_measured_tpot() -> None:
    fit = fit_overhead([_run(0.010)], TARGET)
    assert fit.level == "engine:llama.cpp/class:cpu"
    [row] = fit.runs
    assert row["measured_s"] == pytest.approx(0.010)
    assert row["predicted_after_s"] == pytest.approx(0.010, rel=1e-3)
    # the overhead grows by what the run's TPOT exceeds the prediction
    assert fit.after_s - fit.before_s == pytest.approx(0.010 - row["predicted_before_s"],
                                                       rel=1e-6)
    assert "step_overhead_s" in fit.toml() and "engine.\"llama.cpp\".class.cpu" in fit.toml()


def test_the_fitted_profile_is_what_predictions_then_use() -> None:
    fit = fit_overhead([_run(0.010), _run(0.012)], TARGET)  # median of the two: 11 ms
    again = predict(_run(0.011), _with(fit.profile))
    assert again.tpot.mean_s == pytest.approx(0.011, rel=1e-3)


def _with(profile: object) -> Target:
    import dataclasses

    return dataclasses.replace(TARGET, calibration=profile)


def test_runs_with_several_requests_in_flight_cannot_be_fitted() -> None:
    records = [RequestRecord(i, 0.0, 8, 4, token_s=(0.1, 0.2, 0.3, 0.4)) for i in range(2)]
    busy = BenchRun(summarize(records, load={"kind": "closed", "clients": 2}, duration_s=1.0),
                    tuple(records))
    with pytest.raises(InputError, match="one request in flight"):
        fit_overhead([busy], TARGET)


def test_a_tpot_below_the_kernels_alone_is_refused() -> None:
    with pytest.raises(InputError, match="below what the kernels"):
        fit_overhead([_run(1e-6)], TARGET)
