"""`phasewise simulate` as a user meets it: outputs, determinism, sweeps and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE_TRACE = Path(__file__).resolve().parents[1] / "examples" / "trace.csv"
SMALL = ("--num-requests", "60", "--rate", "8", "--isl", "uniform:200:800", "--osl",
         "normal:60:20", "--seed", "3")


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "phasewise", "simulate", *args],
                            capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_the_same_inputs_give_byte_identical_documents_and_files(tmp_path: Path) -> None:
    outputs = []
    for attempt in ("a", "b"):
        requests, trace = tmp_path / f"{attempt}.jsonl", tmp_path / f"{attempt}.json"
        stdout = run(*SMALL, "--scheduler", "chunked", "--format", "json", "--requests-out",
                     str(requests), "--trace-out", str(trace)).stdout
        outputs.append((stdout, requests.read_bytes(), trace.read_bytes()))
    assert outputs[0] == outputs[1]


def test_json_document_carries_inputs_latencies_and_slo(tmp_path: Path) -> None:
    doc = json.loads(run(*SMALL, "--format", "json", "--ttft", "500ms", "--tpot", "0.05s").stdout)
    assert doc["schema_version"] == 1 and doc["tool_version"]
    assert doc["inputs"]["model"] == "llama-3.1-8b" and doc["inputs"]["scheduler"] == "continuous"
    assert doc["inputs"]["workload"]["rate_rps"] == 8.0 and doc["inputs"]["workload"]["seed"] == 3
    assert doc["requests"] == 60
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert {"mean_s", "p50_s", "p90_s", "p99_s"} <= set(doc[metric])
    assert doc["slo"]["ttft_s"] == 0.5 and doc["slo"]["tpot_s"] == 0.05
    assert 0.0 <= doc["slo"]["attainment"] <= 1.0


def test_per_request_lines_and_the_chrome_trace(tmp_path: Path) -> None:
    requests, trace = tmp_path / "requests.jsonl", tmp_path / "steps.json"
    run(*SMALL, "--requests-out", str(requests), "--trace-out", str(trace))
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(rows) == 60 and [r["id"] for r in rows] == list(range(60))
    assert {"arrival_s", "ttft_s", "tpot_s", "e2el_s", "preemptions", "replica"} <= set(rows[0])
    events = json.loads(trace.read_text())["traceEvents"]
    steps = [e for e in events if e["ph"] == "X"]
    assert steps and all({"ts", "dur", "pid", "tid", "name"} <= set(e) for e in steps)
    assert any(e["name"].startswith("prefill") for e in steps)
    assert any(e["name"].startswith("decode") for e in steps)


def test_plots_are_written_as_png_and_html(tmp_path: Path) -> None:
    run(*SMALL, "--plot", str(tmp_path / "plots"))
    for stem in ("latency", "load"):
        assert (tmp_path / "plots" / f"{stem}.png").stat().st_size > 1000
        assert "<svg" in (tmp_path / "plots" / f"{stem}.html").read_text()


def test_a_sweep_prints_one_row_per_run_and_names_the_best_load() -> None:
    out = run("--num-requests", "40", "--rate", "2,50", "--scheduler", "continuous,chunked",
              "--ttft", "300ms", "--format", "table").stdout
    assert out.count("│ continuous") == 2 and out.count("│ chunked") == 2
    assert "Highest load meeting TTFT ≤ 300 ms" in out
    csv = run("--num-requests", "40", "--rate", "2,50", "--format", "csv").stdout
    assert len(csv.strip().splitlines()) == 3 and csv.startswith("scheduler,rate_rps") and "engine,calibration" in csv


def test_slos_no_run_meets_are_reported_as_such() -> None:
    out = run("--num-requests", "40", "--rate", "2,4", "--ttft", "1ms").stdout
    assert "No configuration in the sweep meets TTFT ≤ 1 ms" in out
    assert "below the idle-server TTFT" in out
    single = run("--num-requests", "40", "--rate", "2", "--tpot", "0.1ms").stdout
    assert "NOT met" in single and "below the idle-server TPOT" in single


def test_closed_loop_trace_replay_and_disaggregated_pools_run() -> None:
    closed = json.loads(run("--num-requests", "40", "--clients", "4", "--format", "json").stdout)
    assert closed["inputs"]["workload"]["clients"] == 4
    replay = json.loads(run("--trace", str(EXAMPLE_TRACE), "--format", "json").stdout)
    assert replay["requests"] == 12 and replay["prefix_cached_tokens"] > 0
    split = json.loads(run(*SMALL, "--scheduler", "disaggregated", "--decode-hardware",
                           "h200-sxm", "--format", "json").stdout)
    roles = {p["role"]: p["hardware"] for p in split["inputs"]["pools"]}
    assert roles == {"prefill": "h100-sxm", "decode": "h200-sxm"}
    assert split["devices"] == 2 and split["kv_transfer_mean_s"] > 0


def test_speculative_decoding_flags_reach_the_simulation() -> None:
    doc = json.loads(run(*SMALL, "--draft-head", "0.03", "--spec-tokens", "3", "--spec-accept",
                         "0.8", "--format", "json").stdout)
    assert doc["inputs"]["speculation"].startswith("head 0.03, γ=3, α=0.8")
    plain = json.loads(run(*SMALL, "--format", "json").stdout)
    assert doc["tpot"]["mean_s"] < plain["tpot"]["mean_s"]


def test_the_engine_profile_reaches_the_simulation_and_its_document() -> None:
    doc = json.loads(run(*SMALL, "--engine", "llama.cpp", "--format", "json").stdout)
    plain = json.loads(run(*SMALL, "--format", "json").stdout)
    assert (doc["inputs"]["engine"], plain["inputs"]["engine"]) == ("llama.cpp", "generic")
    assert doc["ttft"]["mean_s"] != plain["ttft"]["mean_s"]


@pytest.mark.parametrize("args, needle", [
    (("--scheduler", "continous"), "Did you mean continuous"),
    (("--load-balancer", "random"), "unknown load balancer"),
    (("--rate", "4", "--clients", "8"), "give one of them"),
    (("--rate", "-1"), "--rate"),
    (("--isl", "gauss:1:2"), "--isl"),
    (("--trace", "/nonexistent/trace.csv"), "no such file"),
    (("--ttft", "fast"), "--ttft"),
    (("--num-requests", "2000000", "--osl", "2000"), "over the"),
    (("--model", "llama-3.1-70b"), "does not fit"),
    (("--max-num-batched-tokens", "512",), "below the longest request"),
    (("--scheduler", "chunked", "--max-num-batched-tokens", "64"), "below --max-num-seqs"),
    (("--rate", "2,4", "--requests-out", "x.jsonl"), "single run"),
    (("--draft-head", "0.03", "--spec-accept", "1.5"), "--spec-accept"),
    (("--draft", "llama-3.1-70b"), "not smaller than the target"),
    (("--engine", "vlm"), "Did you mean vllm"),
    (("--calibration", "/nonexistent/profile.toml"), "does not exist"),
])
def test_bad_input_ends_with_one_line_and_exit_code_2(args: tuple, needle: str) -> None:
    result = run("--num-requests", "10", *args, check=False) if "--num-requests" not in args \
        else run(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_bad_trace_line_reaches_the_user(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1,10,5\n0.5,10,5\n")
    result = run("--trace", str(path), check=False)
    assert result.returncode == 2 and "line 4" in result.stderr and "sort" in result.stderr


def test_simulate_never_imports_torch() -> None:
    code = ("import sys\nfrom phasewise.cli import main\n"
            "try:\n    main(['simulate', '--num-requests', '5', '--format', 'json'])\n"
            "except SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
