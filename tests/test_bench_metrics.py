"""Serving metrics of `phasewise bench` on recorded token times worked out by hand.

The example: request 0 is sent at 1.0 s and its four tokens arrive at 1.5, 1.6, 1.8 and
2.1 s; request 1 is sent at 1.2 s and its two tokens arrive at 2.2 and 2.4 s; request 2
fails; request 3 times out. The run lasts 2.0 s. By vLLM's definitions:
TTFT = 0.5 and 1.0 s; E2EL = 1.1 and 1.2 s; ITLs = 0.1, 0.2, 0.3 and 0.2 s;
TPOT = (1.1 − 0.5)/3 = 0.2 s and (1.2 − 1.0)/1 = 0.2 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from phasewise.errors import InputError
from phasewise.measure.bench import (
    Endpoint,
    Load,
    Plan,
    Request,
    Shape,
    _Stream,
    headers,
    parse_base_url,
    payload,
    prompt_words,
    read_event,
    requests_for,
)
from phasewise.measure.bench_metrics import RequestRecord, Slos, is_good, stats, summarize


def _records() -> list[RequestRecord]:
    return [
        RequestRecord(0, 1.0, 10, 4, token_s=(1.5, 1.6, 1.8, 2.1), chunk_tokens=(1, 1, 1, 1)),
        RequestRecord(1, 1.2, 20, 2, token_s=(2.2, 2.4), chunk_tokens=(1, 1)),
        RequestRecord(2, 1.3, 10, 4, error="HTTP 500: boom"),
        RequestRecord(3, 1.4, 10, 4, token_s=(1.9,), timed_out=True, error="timed out"),
    ]


def test_per_request_latencies_follow_vllm_definitions() -> None:
    first = _records()[0]
    assert first.ttft_s == pytest.approx(0.5)
    assert first.e2el_s == pytest.approx(1.1)
    assert first.itl_s == pytest.approx([0.1, 0.2, 0.3])
    assert first.tpot_s == pytest.approx(0.2)


def test_itls_sum_to_the_decode_time_and_tpot_is_their_mean_per_token() -> None:
    for record in _records()[:2]:
        assert record.itl_s.sum() == pytest.approx(record.e2el_s - record.ttft_s)
        assert record.tpot_s * (record.output_tokens - 1) == pytest.approx(record.itl_s.sum())


def test_summary_counts_failures_apart_and_keeps_them_out_of_latencies() -> None:
    s = summarize(_records(), load={"kind": "closed", "clients": 2}, duration_s=2.0)
    assert (s.sent, s.completed, s.failed, s.timed_out) == (4, 2, 1, 1)
    assert s.ttft.mean_s == pytest.approx(0.75)
    assert s.ttft.std_s == pytest.approx(0.25)  # population std of 0.5 and 1.0
    assert s.e2el.mean_s == pytest.approx(1.15)
    assert s.tpot.mean_s == pytest.approx(0.2)
    assert s.itl.count == 4 and s.itl.mean_s == pytest.approx(0.2)
    # numpy's linear percentile of 0.1, 0.2, 0.2, 0.3 at 90: 0.2 + 0.7 × 0.1
    assert s.itl.percentiles_s["p90"] == pytest.approx(0.27)


def test_throughputs_divide_completed_work_by_the_run_duration() -> None:
    s = summarize(_records(), load={}, duration_s=2.0)
    assert s.total_input_tokens == 30 and s.total_output_tokens == 6
    assert s.request_throughput_rps == pytest.approx(1.0)
    assert s.output_throughput_tps == pytest.approx(3.0)
    assert s.total_token_throughput_tps == pytest.approx(18.0)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    s = summarize(_records(), load={}, duration_s=2.0, slos=Slos(ttft_s=0.6))
    assert s.request_goodput_rps == pytest.approx(0.5)
    both = summarize(_records(), load={}, duration_s=2.0, slos=Slos(ttft_s=2.0, tpot_s=0.19))
    assert both.request_goodput_rps == 0.0
    assert summarize(_records(), load={}, duration_s=2.0).request_goodput_rps is None


def test_a_one_token_answer_has_no_tpot_and_counts_tpot_zero_for_goodput() -> None:
    one = RequestRecord(0, 0.0, 5, 1, token_s=(0.3,), chunk_tokens=(1,))
    assert one.tpot_s is None
    assert is_good(one, Slos(tpot_s=1e-9))


def test_peak_concurrency_sweeps_the_request_intervals() -> None:
    s = summarize(_records(), load={}, duration_s=2.0)
    assert s.max_concurrency_seen == 2  # [1.0, 2.1) and [1.2, 2.4) overlap
    apart = [RequestRecord(0, 0.0, 1, 1, token_s=(1.0,)), RequestRecord(1, 1.0, 1, 1, token_s=(2.0,))]
    assert summarize(apart, load={}, duration_s=2.0).max_concurrency_seen == 1


def test_the_server_usage_count_wins_and_a_short_answer_is_a_length_mismatch() -> None:
    short = RequestRecord(0, 0.0, 10, 4, token_s=(0.1, 0.2, 0.3), chunk_tokens=(1, 1, 1),
                          usage_prompt_tokens=10, usage_completion_tokens=3)
    s = summarize([short], load={}, duration_s=1.0)
    assert s.length_mismatches == 1 and s.counts_from == "usage"
    assert short.tpot_s == pytest.approx(0.1)


def test_stats_of_nothing_are_zero_not_nan() -> None:
    empty = stats([])
    assert empty.count == 0 and empty.mean_s == 0.0
    assert not any(math.isnan(v) for v in empty.percentiles_s.values())


# ---------------------------------------------------------------- the stream parser


def test_chat_role_chunk_is_not_a_token_and_usage_is_read() -> None:
    got = _Stream()
    lines = ['data: {"choices":[{"delta":{"role":"assistant"}}]}', "",
             ": keep-alive",
             'data: {"choices":[{"delta":{"content":"Hi"}}]}',
             'data: {"choices":[{"delta":{"content":" there"},"finish_reason":"length"}]}',
             'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}']
    for t, line in enumerate(lines):
        assert read_event(line, "chat", float(t), got) is False
    assert read_event("data: [DONE]", "chat", 9.0, got) is True
    assert got.token_s == [3.0, 4.0]
    assert (got.prompt_tokens, got.completion_tokens, got.finish_reason) == (7, 2, "length")


def test_completion_chunks_carry_text() -> None:
    got = _Stream()
    read_event('data: {"choices":[{"text":"a","index":0}]}', "completions", 0.5, got)
    read_event('data: {"choices":[{"text":"","finish_reason":"length"}]}', "completions", 0.7, got)
    assert got.token_s == [0.5] and got.finish_reason == "length"


# ---------------------------------------------------------------- requests and safety


def test_constant_arrivals_are_spaced_by_the_inverse_rate() -> None:
    requests = requests_for(Load(rate_rps=4.0, arrival="constant"), Plan(num_requests=3,
                                                                          isl="16", osl="8"))
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 0.25, 0.5])
    assert {(r.input_tokens, r.output_tokens) for r in requests} == {(16, 8)}


def test_closed_loop_and_infinite_rate_send_at_once() -> None:
    for load in (Load(clients=2), Load(rate_rps=math.inf)):
        assert {r.arrival_s for r in requests_for(load, Plan(num_requests=4))} == {0.0}


def test_prompt_words_leave_room_for_what_the_server_adds() -> None:
    assert prompt_words(Request(0, 0.0, 128, 8), Shape(1, True)) == 127
    with pytest.raises(InputError):
        prompt_words(Request(0, 0.0, 3, 8), Shape(3, True))


def test_the_url_may_not_carry_credentials_or_an_endpoint() -> None:
    assert parse_base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    for bad in ("http://user:key@127.0.0.1:8000", "127.0.0.1:8000",
                "http://127.0.0.1:8000/v1/completions"):
        with pytest.raises(InputError):
            parse_base_url(bad)


def test_the_api_key_comes_from_the_named_variable_only(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = Endpoint("http://127.0.0.1:8000", api_key_env="BENCH_TEST_KEY")
    monkeypatch.delenv("BENCH_TEST_KEY", raising=False)
    assert headers(endpoint) == {}
    monkeypatch.setenv("BENCH_TEST_KEY", "sk-test")
    assert headers(endpoint) == {"Authorization": "Bearer sk-test"}


def test_payload_holds_the_answer_length() -> None:
    body = payload(Endpoint("http://h:1"), "m", "the of", 7)
    assert body["max_tokens"] == body["min_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    chat = payload(Endpoint("http://h:1", api="chat", hold_length=False), "m", "x", 3)
    assert chat["messages"] == [{"role": "user", "content": "x"}] and "min_tokens" not in chat
    assert np.isfinite(body["temperature"])
