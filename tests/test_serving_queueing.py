"""Queueing checked by hand: every step takes D seconds (a fake cost model), so token times
follow from the scheduler's rules alone."""

from __future__ import annotations

import numpy as np
import pytest

from phasewise.serving import ClosedLoop, Pool, Server, request_metrics, simulate, summarize
from phasewise.serving.requests import Requests, poisson_arrivals
from test_serving_fakes import FixedStep, trace

D = 0.01  # seconds per step


def served(scheduler: str, requests: Requests, **server):  # noqa: ANN003, ANN201
    sim = simulate(Server(scheduler=scheduler, cost=FixedStep(D), **server), requests)
    return request_metrics(sim)


@pytest.mark.parametrize("scheduler", ["static", "continuous", "chunked"])
def test_one_request_takes_one_prefill_step_then_one_step_per_token(scheduler: str) -> None:
    m = served(scheduler, trace((1.0, 100, 5)))
    assert m.ttft_s[0] == pytest.approx(D)
    assert m.tpot_s[0] == pytest.approx(D)
    assert m.e2el_s[0] == pytest.approx(5 * D)
    assert np.allclose(m.itl_s, D)


def test_requests_arriving_together_share_one_prefill_step() -> None:
    m = served("continuous", trace((0.0, 100, 3), (0.0, 100, 3), (0.0, 100, 3)))
    assert np.allclose(m.ttft_s, D) and np.allclose(m.e2el_s, 3 * D)


def test_continuous_batching_stalls_decodes_for_a_new_prompt() -> None:
    # A arrives at 0 (5 tokens); B at 1.5 D, during A's first decode step. Prefill first:
    # at 2D B's prefill runs alone, so A's tokens come at D, 2D, (stall) 4D, 5D, 6D.
    m = served("continuous", trace((0.0, 100, 5), (1.5 * D, 100, 5)))
    assert m.e2el_s[0] == pytest.approx(6 * D)
    assert m.ttft_s[1] == pytest.approx(3 * D - 1.5 * D)
    assert m.e2el_s[1] == pytest.approx(7 * D - 1.5 * D)
    assert m.itl_s.max() == pytest.approx(2 * D)  # A's stalled gap


def test_chunked_prefill_runs_the_new_prompt_beside_the_decodes() -> None:
    # Same arrivals: at 2D one mixed step decodes A and prefills B, so A never stalls.
    m = served("chunked", trace((0.0, 100, 5), (1.5 * D, 100, 5)))
    assert m.e2el_s[0] == pytest.approx(5 * D)
    assert m.ttft_s[1] == pytest.approx(1.5 * D)
    assert np.allclose(m.itl_s, D)


def test_chunked_prefill_splits_a_long_prompt_over_steps_by_the_budget() -> None:
    # 5,000 prompt tokens under a 2,048-token budget: chunks of 2,048, 2,048 and 904.
    m = served("chunked", trace((0.0, 5000, 2)), max_batched_tokens=2048)
    assert m.ttft_s[0] == pytest.approx(3 * D)


def test_static_batching_makes_a_new_request_wait_for_the_whole_batch() -> None:
    # A's batch runs from 0 to 5D; B (arriving at 1.5 D) is prefilled from 5D to 6D.
    m = served("static", trace((0.0, 100, 5), (1.5 * D, 100, 5)))
    assert m.ttft_s[1] == pytest.approx(6 * D - 1.5 * D)
    assert m.e2el_s[1] == pytest.approx(10 * D - 1.5 * D)


def test_max_num_seqs_holds_requests_in_the_queue() -> None:
    # One sequence at a time: the second request waits for the first to finish (3 steps).
    m = served("continuous", trace((0.0, 100, 3), (0.0, 100, 3)), max_seqs=1)
    assert m.ttft_s.tolist() == pytest.approx([D, 4 * D])


def test_mean_wait_of_an_m_d_1_queue() -> None:
    # One-token answers served one at a time are an M/D/1 queue: with utilisation
    # ρ = λD the mean wait is ρD / (2(1 − ρ)) (Pollaczek–Khinchine), TTFT = wait + D.
    rho, n = 0.5, 20_000
    rng = np.random.default_rng(7)
    requests = Requests(np.full(n, 64), np.ones(n, dtype=int),
                        poisson_arrivals(rho / D, n, rng))
    m = served("continuous", requests, max_seqs=1)
    expected = D + rho * D / (2 * (1 - rho))
    assert m.ttft_s.mean() == pytest.approx(expected, rel=0.04)


def test_closed_loop_throughput_is_clients_over_mean_latency() -> None:
    # Interactive response-time law with no think time: X = N / R.
    clients, n = 8, 800
    rng = np.random.default_rng(3)
    lengths = Requests(rng.integers(50, 500, n), rng.integers(2, 40, n))
    sim = simulate(Server(cost=FixedStep(D)), lengths, closed_loop=ClosedLoop(clients))
    s = summarize(sim)
    assert s.requests_per_s == pytest.approx(clients / s.e2el.mean_s, rel=0.03)


def test_closed_loop_keeps_each_client_to_one_request_in_flight() -> None:
    n = 30
    requests = Requests(np.full(n, 100), np.full(n, 4))
    sim = simulate(Server(cost=FixedStep(D)), requests, closed_loop=ClosedLoop(3, think_time_s=D))
    by_client: dict[int, list] = {}
    for seq in sim.requests:
        by_client.setdefault(seq.client, []).append(seq)
    assert sorted(by_client) == [0, 1, 2]
    for seqs in by_client.values():
        for before, after in zip(seqs, seqs[1:], strict=False):
            assert after.arrival_s == pytest.approx(before.done_s + D)


def test_round_robin_alternates_replicas_and_least_outstanding_fills_the_idle_one() -> None:
    rows = [(0.0, 100, 50), (0.0, 100, 2), (0.05, 100, 2), (0.1, 100, 2)]
    rr = served("continuous", trace(*rows), pool=Pool(replicas=2),
                load_balancer="round-robin").replica
    assert rr.tolist() == [0, 1, 0, 1]
    sim = simulate(Server(cost=FixedStep(D), pool=Pool(replicas=2),
                          load_balancer="least-outstanding"), trace(*rows))
    # Request 0 (50 tokens) keeps replica 0 busy; the short ones all go to replica 1.
    assert [s.replica for s in sim.requests] == [0, 1, 1, 1]


def test_round_robin_name_reaches_the_balancer() -> None:
    sim = simulate(Server(cost=FixedStep(D), pool=Pool(replicas=3), load_balancer="round-robin"),
                   trace(*[(0.0, 10, 2)] * 6))
    assert [s.replica for s in sim.requests] == [0, 1, 2, 0, 1, 2]
