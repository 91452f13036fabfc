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


def test_calibrate_from_serving_runs_writes_the_fitted_overhead(tmp_path) -> None:
    """`phasewise calibrate --from` takes a bench result file and writes the same fit."""
    import io
    import tomllib
    from contextlib import redirect_stdout

    from phasewise.cli import main
    from phasewise.measure.bench_results import document
    from phasewise.report.output import to_json

    runs = [_run(0.010), _run(0.012)]
    saved = tmp_path / "runs.json"
    saved.write_text(to_json(document(runs, endpoint={"url": "http://127.0.0.1:8080"},
                                      plan={"isl": "64", "osl": "16"})))
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            main(["calibrate", "--from", str(saved), "--engine", "llama.cpp", "--hardware",
                  "amd-epyc-9654", "--model", "smollm2-135m", "--weight-dtype", "Q4_1",
                  "--out-dir", str(tmp_path), "--format", "json"])
    except SystemExit as done:
        assert done.code in (0, None)
    expected = fit_overhead(runs, TARGET)
    written = tomllib.loads((tmp_path / "calibration.toml").read_text())
    value = written["engine"]["llama.cpp"]["class"]["cpu"]["step_overhead_s"]
    value = value["value"] if isinstance(value, dict) else value
    assert value == pytest.approx(expected.after_s, rel=1e-6)


def test_calibrate_from_serving_runs_needs_the_engine(tmp_path, capsys) -> None:
    from phasewise.cli import main
    from phasewise.measure.bench_results import document
    from phasewise.report.output import to_json

    saved = tmp_path / "runs.json"
    saved.write_text(to_json(document([_run(0.010)], endpoint={}, plan={})))
    with pytest.raises(SystemExit) as done:
        main(["calibrate", "--from", str(saved), "--out-dir", str(tmp_path)])
    assert done.value.code == 2 and "--engine" in capsys.readouterr().err
