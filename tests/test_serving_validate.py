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
        header = list(reader.fieldnames) + ["load", "request_rate", "output_tokens_per_s",
                                            "random_range_ratio"]
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


# ---------------------------------------------------------------- layouts and the benchmark's load

DISAGG_C576 = "dsr1_h200_trtllm_fp8_disagg_1024x1024_c576_cfg303"  # decode 9 workers × TP8, batch 64
DISAGG_C512_DP = "dsr1_h200_trtllm_fp8_disagg_8192x1024_c512_cfg334"  # decode 1 worker × DP8, batch 64
# the same run of the 512-client DP row as the dated file reports it: its layout cut to "tp8 ep8"
DISAGG_C512_DATED = "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_disagg_8192x1024_c512_tp8_0_ep8_0_650"


def test_a_disaggregated_batch_is_per_attention_rank() -> None:
    rows, _ = load_serving()
    by_id = {r.record_id: r for r in rows}
    tp = by_id[DISAGG_C576]
    prefill, decode = tp.pools
    # 9 decode replicas of TP8, 64 sequences each: 9 × 64 = 576 clients, the row's concurrency
    assert (decode.workers, decode.tp, decode.attention_dp, decode.batch) == (9, 8, 1, 64)
    assert decode.replica_seqs * decode.workers == tp.concurrency == 576
    dp = by_id[DISAGG_C512_DP]
    # one decode replica of 8 attention-DP ranks, 64 sequences a rank: 8 × 64 = 512
    assert dp.pools[1].replica_seqs == 512 == dp.concurrency
    # the prefill pool: 3 replicas of DP8, one prompt a rank
    assert (dp.pools[0].workers, dp.pools[0].replica_seqs) == (3, 8)


def test_a_server_takes_each_pools_own_batch_limit() -> None:
    from phasewise.validate.serving import server_for

    rows, _ = load_serving()
    row = next(r for r in rows if r.record_id == DISAGG_C512_DP)
    server = server_for(row)
    assert (server.max_seqs, server.prefill_max_seqs) == (512, 8)
    assert (server.pool.replicas, server.decode_pool.replicas) == (3, 1)
    # TensorRT-LLM's max_num_tokens (8192, llm_args.py) is each DP rank's: 8 ranks, 8 budgets
    assert server.max_batched_tokens == 8 * 8192


def test_a_row_without_workers_takes_the_layout_of_its_recorded_twin() -> None:
    rows, _ = load_serving()
    by_id = {r.record_id: r for r in rows}
    # the dated file reports the dump's run (same TTFT and TPOT) with the label "tp8 ep8"
    assert by_id[DISAGG_C512_DATED].pools == by_id[DISAGG_C512_DP].pools


def test_inferencemax_rows_draw_lengths_with_its_range_ratio(tmp_path: Path) -> None:
    from phasewise.validate.serving import DEFAULT_RANGE_RATIO, benchmark_lengths

    rows, _ = load_serving()
    by_id = {r.record_id: r for r in rows}
    inferencemax, undocumented = by_id[DISAGG_C512_DP], by_id[LLAMA_C8]
    # InferenceMAX's client: --random-range-ratio 0.8; a source naming no client: the default
    assert (inferencemax.range_ratio, undocumented.range_ratio) == (0.8, DEFAULT_RANGE_RATIO)
    with SERVING_FILE.open() as f:
        base = next(r for r in csv.DictReader(f) if r["id"] == LLAMA_C8)
    (fixed,), _ = load_serving(_subset(tmp_path, set(), [{**base, "random_range_ratio": "1"}]))
    assert fixed.range_ratio == 1.0
    isl, osl = benchmark_lengths(inferencemax, 20_000)
    # uniform on the integers [⌊0.8 · 8192⌋, 8192] = [6553, 8192]: mean 7372.5
    assert isl.min() >= 6553 and isl.max() <= 8192 and abs(isl.mean() - 7372.5) < 15
    assert osl.min() >= 819 and osl.max() <= 1024
    isl, osl = benchmark_lengths(fixed, 10)
    assert set(isl) == {1024} and set(osl) == {128}


def test_aggregated_rows_with_a_batch_below_the_concurrency_run_several_replicas(tmp_path: Path) -> None:
    with SERVING_FILE.open() as f:
        base = next(r for r in csv.DictReader(f) if r["id"] == LLAMA_C8)
    wide = {**base, "id": "four-replicas", "batch_size": "48",
            "silicon_data_source": base["silicon_data_source"].replace("silicon_concurrency=8",
                                                                        "silicon_concurrency=192")}
    rows, _ = load_serving(_subset(tmp_path, set(), [wide]))
    (row,) = rows
    # 192 clients on replicas of 48 sequences: four replicas
    assert row.concurrency == 192 and row.pools[0].workers == 4


def test_a_prefill_pool_of_one_sequence_prefills_one_prompt_at_a_time() -> None:
    from phasewise.serving import ClosedLoop, Pool, Server, request_metrics, simulate
    from phasewise.serving.requests import Requests

    requests = Requests(np.full(4, 1024, dtype=np.int64), np.full(4, 2, dtype=np.int64))

    def ttfts(prefill_seqs: int | None) -> np.ndarray:
        server = Server(model="llama-3.1-8b", pool=Pool("h100-sxm"), scheduler="disaggregated",
                        max_seqs=64, prefill_max_seqs=prefill_seqs)
        sim = simulate(server, requests, closed_loop=ClosedLoop(4))
        return np.sort(request_metrics(sim).ttft_s)

    one, batched = ttfts(1), ttfts(None)
    # one at a time, the k-th prompt waits for k − 1 whole prefills before its own: TTFT
    # grows by a prefill each; batched, all four come out of one step together and differ
    # only by their KV transfers, which take the link one after another: 1024 tokens ×
    # 131,072 B (32 layers × 2 × 8 KV heads × 128 × 2 B) over 50 GB/s + 5 µs = 2.69 ms
    transfer_s = 1024 * 131_072 / 50e9 + 5e-6
    assert np.allclose(np.diff(batched), transfer_s, rtol=0.02)
    gaps = np.diff(one)
    assert np.allclose(gaps, gaps[0], rtol=0.05) and gaps[0] > 5 * transfer_s
    assert one[-1] > 3 * gaps[0]


def test_a_row_without_workers_and_no_twin_keeps_its_label() -> None:
    rows, _ = load_serving()
    by_id = {r.record_id: r for r in rows}
    # 512 clients as well, but another run (TTFT 19.0 s, not 4.0 s): nothing to borrow
    row = by_id["2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_disagg_8192x1024_c512_tp8_0_ep8_0_676"]
    assert [(p.workers, p.tp, p.batch) for p in row.pools] == [(1, 8, None), (1, 8, None)]


def test_trtllm_runs_deepseek_with_an_fp8_kv_cache() -> None:
    from phasewise.validate.serving import server_for

    rows, _ = load_serving()
    by_id = {r.record_id: r for r in rows}
    # TensorRT-LLM's DeepSeek-R1 recipes set kv_cache_config dtype fp8; SGLang keeps bf16
    assert server_for(by_id[DISAGG_C512_DP]).precision.kv_cache == "fp8"
    sglang = next(r for r in rows if r.engine == "sglang" and "DeepSeek" in r.model)
    assert server_for(sglang).precision.kv_cache == "bf16"  # the checkpoint declares none


def test_a_decode_pool_without_workers_is_the_fewest_that_hold_the_load() -> None:
    from phasewise.catalog import load_hardware
    from phasewise.serving.kv_cache import ADMISSION_WATERMARK, kv_capacity
    from phasewise.validate.scenario import resolve_model
    from phasewise.validate.serving import server_for

    rows, _ = load_serving()
    row = next(r for r in rows if r.record_id.startswith("2026_03_25_deepseek_r1_h200_sxm_trtllm")
               and r.mode == "disagg" and r.concurrency == 1024 and not r.pools[-1].batch)
    server = server_for(row)
    # TensorRT-LLM's defaults (llm_args.py): max_num_tokens 8192, max_batch_size 2048,
    # free_gpu_memory_fraction 0.9 of what the weights leave
    cap = kv_capacity(resolve_model(row.model), load_hardware(row.device), server.precision,
                      server.decode_pool.parallelism, max_batched_tokens=8192, max_seqs=2048,
                      memory_fraction=0.9, of_free=True)
    usable = cap.tokens * (1 - ADMISSION_WATERMARK)
    need = 1024 * (1024 + 1024)  # every client's prompt and answer in KV at once
    n = server.decode_pool.replicas
    assert (n - 1) * usable < need <= n * usable


def test_inferencemax_trtllm_llama_70b_launches_as_its_script() -> None:
    from phasewise.validate.serving import server_for

    rows, _ = load_serving()
    llama = [r for r in rows if r.engine == "trtllm" and r.model == "meta-llama/Llama-3.1-70B"
             and r.hardware == "h200_sxm" and r.source.startswith(("db-dump/", "source_file=20"))]

    def preset(isl: int, osl: int, tp: int):  # noqa: ANN202
        row = next(r for r in llama if (r.isl, r.osl, r.pools[-1].tp) == (isl, osl, tp))
        return server_for(row).preset

    # benchmarks/70b_fp8_h200_trt_slurm.sh: --max_num_tokens 16384, an FP8 KV cache, no
    # block reuse and graphs padded up to 1,024 on every run; batch waiting (20 iterations,
    # 0.9 of the budget) for 1k/1k below TP 8 only
    row = next(r for r in llama if (r.isl, r.osl, r.pools[-1].tp) == (1024, 8192, 8))
    server = server_for(row)
    assert server.precision.kv_cache == "fp8" and not server.preset.prefix_caching
    assert server.preset.padded_batch(5) == 8 and server.preset.padded_batch(129) == 256
    waits = preset(1024, 1024, 2)
    assert (waits.batch_wait_iters, waits.batch_wait_tokens_ratio) == (20, 0.9)
    assert waits.max_num_batched_tokens == 16384
    for isl, osl, tp in ((1024, 1024, 8), (1024, 8192, 2), (8192, 1024, 4)):
        other = preset(isl, osl, tp)
        assert not other.batch_waits and other.max_num_batched_tokens == 16384
    # the engine's own default elsewhere: off, max_num_tokens 8192
    gap = next(r for r in rows if r.engine == "trtllm" and "gap-analysis" in r.source)
    assert not server_for(gap).preset.batch_waits
    assert server_for(gap).preset.max_num_batched_tokens == 8192
