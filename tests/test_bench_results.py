"""Reading other tools' result files, and writing bench runs as measurement rows.

The samples in tests/data/bench follow each tool's documented output: vLLM's result keys
(vllm/benchmarks/serve.py), llama-bench's JSON example (tools/llama-bench/README.md) and
GuideLLM's benchmark report schema (guidellm/benchmark/schemas)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from phasewise.errors import InputError
from phasewise.measure.bench_metrics import BenchRun, RequestRecord, summarize
from phasewise.measure.bench_results import (
    document,
    llama_bench_rows,
    measurement_rows,
    read_results,
)
from phasewise.report.output import rows_to_csv
from phasewise.validate.measurements import load_measurements
from phasewise.validate.scenario import scenario_for

DATA = Path(__file__).parent / "data" / "bench"


def test_vllm_summary_keys_are_read_as_seconds() -> None:
    kind, [run] = read_results(DATA / "vllm_summary.json")
    s = run.summary
    assert kind == "vllm" and not run.records
    assert s.load == {"kind": "closed", "clients": 1}  # rate inf under max_concurrency 1
    assert s.completed == 20 and s.duration_s == 10.0
    assert s.ttft.mean_s == pytest.approx(0.040) and s.ttft.percentiles_s["p99"] == pytest.approx(0.045)
    assert s.tpot.median_s == pytest.approx(0.0072)
    assert s.e2el.std_s == pytest.approx(0.005)
    assert s.output_throughput_tps == 128.0


def test_a_detailed_vllm_result_is_recomputed_from_its_requests() -> None:
    # the same two requests as the hand-worked example of test_bench_metrics
    _, [run] = read_results(DATA / "vllm_detailed.json")
    s = run.summary
    assert len(run.records) == 2
    assert s.ttft.mean_s == pytest.approx(0.75)
    assert s.tpot.mean_s == pytest.approx(0.2)
    assert s.itl.count == 4 and s.itl.mean_s == pytest.approx(0.2)
    assert s.e2el.mean_s == pytest.approx(1.15)
    assert s.max_concurrency_seen == 2


def test_guidellm_inter_token_latency_is_read_as_tpot() -> None:
    kind, [run] = read_results(DATA / "guidellm_benchmarks.json")
    s = run.summary
    assert kind == "guidellm"
    assert s.load == {"kind": "closed", "clients": 4}
    assert (s.completed, s.failed) == (20, 1)
    assert s.ttft.mean_s == pytest.approx(0.120) and s.ttft.percentiles_s["p99.9"] == pytest.approx(0.190)
    assert s.tpot.mean_s == pytest.approx(0.020)  # GuideLLM's ITL: (last − first)/(n − 1)
    assert s.itl.count == 0  # GuideLLM reports no pooled gaps
    assert s.e2el.mean_s == pytest.approx(2.5)
    assert s.request_throughput_rps == pytest.approx(2.0)  # 20 requests in 10 s
    assert s.output_throughput_tps == pytest.approx(128.0)


def test_llama_bench_tests_become_pp_and_tg_rows() -> None:
    kind, tests = read_results(DATA / "llama_bench.json")
    assert kind == "llama-bench" and len(tests) == 2
    rows = llama_bench_rows(tests, hardware="rtx-4080", source="s", record_prefix="LB")
    assert [r["metric"] for r in rows] == ["pp512_throughput", "tg128_throughput"]
    assert rows[0]["value"] == 7100.002165 and rows[1]["value"] == 118.881588
    assert rows[0]["model"] == "qwen2 7B" and rows[0]["weight_dtype"] == "Q4_K - Medium"
    assert rows[0]["model_params_b"] == pytest.approx(7.615616512)
    # build 5163 on CUDA, flash attention off, n_ubatch 512 (the file's fields): validate
    # reads the engine from this text as llama.cpp, int8 MXFP4 MMQ (before build 7536)
    # and 512-token micro-batches
    from phasewise.catalog.software_text import engine_from_software

    assert rows[0]["software_stack"] == "llama.cpp llama-bench build 5163, CUDA, -ub 512"
    assert engine_from_software(rows[0]["software_stack"], "cuda") == \
        "llama.cpp+int8-mxfp4+ub512"
    flash = llama_bench_rows([{**tests[0], "flash_attn": True}], hardware="rtx-4080",
                             source="s", record_prefix="LB")
    assert engine_from_software(flash[0]["software_stack"], "cuda") == \
        "llama.cpp+flash-attn+int8-mxfp4+ub512"


def test_jsonl_files_hold_one_result_a_line(tmp_path: Path) -> None:
    lines = [json.dumps(t) for t in json.loads((DATA / "llama_bench.json").read_text())]
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert read_results(path)[0] == "llama-bench"


def test_an_unknown_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="not a result file"):
        read_results(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_results(path)


def _one_client_run() -> BenchRun:
    records = [RequestRecord(i, float(i), 32, 4, token_s=(i + 0.1, i + 0.2, i + 0.3, i + 0.4),
                             chunk_tokens=(1,) * 4) for i in range(3)]
    return BenchRun(summarize(records, load={"kind": "closed", "clients": 1}, duration_s=3.0),
                    tuple(records))


def test_bench_rows_are_read_and_mapped_by_validate(tmp_path: Path) -> None:
    rows = measurement_rows([_one_client_run()], hardware="h100-sxm", model="smollm2-135m",
                            weight_dtype="Q4_1", software="llama.cpp server",
                            source="phasewise bench test", record_prefix="B")
    path = tmp_path / "rows.csv"
    path.write_text(rows_to_csv(rows))
    read = load_measurements(path)
    assert not read.problems and not read.unknown_columns
    by_metric = {m.metric: m for m in read.rows}
    assert by_metric["ttft"].value == pytest.approx(100.0)  # 0.1 s in ms
    assert by_metric["tpot"].value == pytest.approx(100.0)  # (0.4 − 0.1)/3
    assert by_metric["ttft"].input_len == 32 and by_metric["ttft"].output_len == 4
    scenario = scenario_for(by_metric["tpot"])
    assert scenario.kind == "decode" and scenario.engine.fitted_name == "llama.cpp"
    assert scenario.measured_s == pytest.approx(0.1)
    assert not by_metric["ttft"].exclude


def test_runs_with_several_requests_in_flight_are_written_excluded() -> None:
    records = [RequestRecord(i, 0.0, 8, 2, token_s=(0.5, 0.6)) for i in range(2)]
    run = BenchRun(summarize(records, load={"kind": "closed", "clients": 2}, duration_s=1.0),
                   tuple(records))
    rows = measurement_rows([run], hardware="h100-sxm", model="m", weight_dtype="bf16",
                            software="vllm", source="s", record_prefix="B")
    assert rows and all("2 requests at once" in r["exclude"] for r in rows)
    assert {r["batch_or_concurrency"] for r in rows} == {2}


def test_the_saved_document_reads_back(tmp_path: Path) -> None:
    run = _one_client_run()
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document([run], endpoint={"url": "http://127.0.0.1:1"},
                                        plan={})))
    kind, [again] = read_results(path)
    assert kind == "phasewise"
    assert again.summary == run.summary and again.records == run.records


def test_cli_reads_a_vllm_result_and_predicts_it(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    cmd = [sys.executable, "-m", "phasewise", "bench", "--read", str(DATA / "vllm_summary.json"),
           "--predict", "--model", "smollm2-135m", "--hardware", "h100-sxm", "--engine", "vllm",
           "--measurements-out", str(out), "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    rows = {(r["metric"], r["statistic"]): r for r in doc["runs"][0]["prediction"]}
    assert rows[("ttft", "mean")]["measured"] == pytest.approx(0.040)
    assert rows[("ttft", "mean")]["predicted"] > 0
    assert load_measurements(out).rows


def test_cli_bad_inputs_exit_2_with_one_line() -> None:
    for args in (["--url", "http://127.0.0.1:1", "--rate", "1", "--clients", "2"],
                 ["--read", str(DATA / "vllm_summary.json"), "--predict"],
                 ["--url", "http://127.0.0.1:1", "--percentiles", "150"]):
        done = subprocess.run([sys.executable, "-m", "phasewise", "bench", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
