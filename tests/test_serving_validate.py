"""Serving rows: read from the bundled layout, replayed through the simulator, scored on
what they measured; rows that cannot be described are skipped with the reason."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from phasewise.cli import app
from phasewise.validate.serving import SERVING_FILE, load_serving, replay, replay_all

LLAMA_C8 = "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1"
KIMI = "2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597"


def _subset(tmp_path: Path, ids: set[str], extra: list[dict] | None = None) -> Path:
    with SERVING_FILE.open() as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames) + ["load", "request_rate", "output_tokens_per_s"]
        rows = [r for r in reader if r["id"] in ids] + (extra or [])
    path = tmp_path / "serving.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header, restval="")
        w.writeheader()
        w.writerows(rows)
    return path


def test_the_bundled_file_holds_every_hopper_run() -> None:
    rows, problems = load_serving()
    # 1,884 runs in the file (its README); a few disaggregated rows record no concurrency
    assert len(rows) + len(problems) == 1884
    assert {r.device for r in rows} == {"h100-sxm", "h200-sxm"}
    assert all("concurrency" in p.reason for p in problems)


def test_a_concurrency_row_is_replayed_as_a_closed_loop(tmp_path: Path) -> None:
    rows, _ = load_serving(_subset(tmp_path, {LLAMA_C8}))
    (row,) = rows
    assert (row.engine, row.concurrency, row.isl, row.osl) == ("trtllm", 8, 1024, 128)
    result = replay(row, prompts_per_client=3)
    errors = result.errors()
    assert set(errors) == {"ttft", "tpot"}
    # Llama-3.1-8B on one H100 at 8 clients: a decode step is a few ms, a prompt tens
    assert 2e-3 < result.tpot_s < 30e-3 and 5e-3 < result.ttft_s < 1.0


def test_a_model_outside_the_catalog_is_skipped_with_the_reason(tmp_path: Path) -> None:
    with SERVING_FILE.open() as f:
        kimi = next(r for r in csv.DictReader(f) if r["id"] == KIMI)
    unknown = {**kimi, "id": "unknown-model", "model_path": "acme/Not-A-Published-Model-7B"}
    rows, _ = load_serving(_subset(tmp_path, set(), [unknown]))
    results, skipped = replay_all(rows)
    assert not results and "Not-A-Published-Model" in skipped[0].reason


def test_rate_and_offline_rows_are_replayed_open(tmp_path: Path) -> None:
    with SERVING_FILE.open() as f:
        base = next(r for r in csv.DictReader(f) if r["id"] == LLAMA_C8)
    rate = {**base, "id": "rate-row", "load": "rate", "request_rate": "4", "batch_size": ""}
    offline = {**base, "id": "offline-row", "load": "mlperf_offline", "batch_size": "",
               "silicon_ttft_ms": "", "silicon_tpot_ms": "", "output_tokens_per_s": "5000"}
    bad = {**base, "id": "bad-row", "load": "mlperf_server", "request_rate": ""}
    rows, problems = load_serving(_subset(tmp_path, set(), [rate, offline, bad]))
    assert [p.record_id for p in problems] == ["bad-row"] and "request_rate" in problems[0].reason
    by_id = {r.record_id: r for r in rows}
    light = replay(by_id["rate-row"])
    # 4 req/s of 1024/128 is far below an H100's capacity: TTFT near one prefill
    assert light.ttft_s < 0.2
    saturated = replay(by_id["offline-row"])
    assert set(saturated.errors()) == {"throughput"} and saturated.output_tokens_per_s > 1000


def test_validate_serving_reports_scores_and_skips(tmp_path: Path) -> None:
    with SERVING_FILE.open() as f:
        kimi = next(r for r in csv.DictReader(f) if r["id"] == KIMI)
    unknown = {**kimi, "id": "unknown-model", "model_path": "acme/Not-A-Published-Model-7B"}
    path = _subset(tmp_path, {LLAMA_C8}, [unknown])
    result = CliRunner().invoke(app, ["validate", "--serving-file", str(path), "--format",
                                      "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["simulated_share"] == pytest.approx(0.5)
    assert np.isfinite(doc["summary"][-1]["tpot_median_abs_error"])
    assert any("Not-A-Published-Model" in s for s in doc["skipped"])
