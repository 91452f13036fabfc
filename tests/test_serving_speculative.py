"""Speculative decoding in the simulator, against hand counts and the estimate's what-if."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasewise.errors import InputError
from phasewise.estimate.speculative import speculative
from phasewise.serving import Pool, Requests, Server, request_metrics, simulate, summarize
from phasewise.serving.metrics import token_times
from phasewise.serving.speculative import Speculation
from phasewise.specs import Workload
from test_serving_fakes import FixedStep, small_h100, trace

D = 0.01
# γ = 4, α = 0.5: (1 − 0.5⁵) / (1 − 0.5) = 1.9375 = 31/16 tokens a round.
HALF = Speculation(tokens=4, accept=0.5, draft_head_fraction=0.05)


def test_tokens_per_round_follow_the_geometric_series() -> None:
    assert HALF.tokens_per_round == pytest.approx(31 / 16, abs=0)


def test_a_round_is_gamma_draft_steps_and_one_verify_step_yielding_the_expected_tokens() -> None:
    # Every pass takes D: the prompt costs the target's prefill and the draft's (2D); the
    # 31 tokens after the first need ⌈31 ÷ 31/16⌉ = 16 rounds of 4 draft steps + 1 verify.
    m = request_metrics(simulate(Server(cost=FixedStep(D), speculation=HALF),
                                 trace((0.0, 100, 32))))
    assert m.ttft_s[0] == pytest.approx(2 * D)
    assert m.e2el_s[0] - m.ttft_s[0] == pytest.approx(16 * 5 * D)
    # Tokens of one round arrive together: 16 rounds give 16 non-zero gaps after the first.
    assert np.count_nonzero(m.itl_s > 1e-12) == 16


@pytest.mark.parametrize("draft", [{"draft_head_fraction": 0.03}, {"draft": "llama-3.2-1b"}])
def test_one_request_matches_the_speculative_estimate(draft: dict) -> None:
    isl, osl, gamma, alpha = 1000, 501, 4, 0.7
    spec = Speculation(gamma, alpha, **draft)
    sim = simulate(Server(cost="sol", speculation=spec),
                   trace((0.0, isl, osl)), bucket_tokens=1)
    est = speculative("llama-3.1-8b", "h100-sxm", Workload(isl, osl, 1), spec_tokens=gamma,
                      spec_accept=alpha, cost="sol", **draft)
    # The simulation runs whole rounds: ⌈(OSL − 1) ÷ E⌉ of them, against (OSL − 1) ÷ E.
    rounds_error = float(spec.tokens_per_round) / (osl - 1)
    assert summarize(sim).tpot.mean_s == pytest.approx(est.at_batch.tpot_s, rel=rounds_error)


def test_speculation_lowers_tpot_at_light_load() -> None:
    requests = Requests(np.full(20, 1000), np.full(20, 200), np.arange(20) * 2.0)
    plain = summarize(simulate(Server(cost="sol"), requests))
    fast = summarize(simulate(Server(cost="sol", speculation=Speculation(
        4, 0.8, draft_head_fraction=0.03)), requests))
    assert fast.tpot.mean_s < 0.6 * plain.tpot.mean_s


def test_the_draft_takes_memory_from_the_kv_cache() -> None:
    plain = simulate(Server(cost=FixedStep(D)), trace((0.0, 10, 2)))
    drafted = simulate(Server(cost=FixedStep(D), speculation=Speculation(
        4, 0.7, draft="llama-3.2-1b")), trace((0.0, 10, 2)))
    assert drafted.capacities["both"].blocks < plain.capacities["both"].blocks


def test_speculation_needs_exactly_one_draft_and_a_valid_acceptance() -> None:
    with pytest.raises(InputError, match="one draft"):
        simulate(Server(cost=FixedStep(D), speculation=Speculation()), trace((0.0, 10, 2)))
    with pytest.raises(InputError, match="--spec-accept"):
        Speculation(4, 1.0, draft_head_fraction=0.05).tokens_per_round  # noqa: B018


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.floats(0, 0.2), st.integers(1, 900), st.integers(1, 400)),
                     min_size=1, max_size=25),
       scheduler=st.sampled_from(["static", "continuous", "chunked", "disaggregated"]),
       gamma=st.integers(1, 6), alpha=st.floats(0.0, 0.95), max_seqs=st.integers(1, 16))
def test_any_speculative_run_gives_every_request_its_tokens_and_frees_all_memory(
        rows: list, scheduler: str, gamma: int, alpha: float, max_seqs: int) -> None:
    server = Server(scheduler=scheduler, cost=FixedStep(D), max_seqs=max_seqs,
                    max_batched_tokens=256 if scheduler == "chunked" else None,
                    pool=Pool(small_h100(20.5)),  # the head's 0.9 GB beside the target
                    speculation=Speculation(gamma, alpha, draft_head_fraction=0.05))
    sim = simulate(server, trace(*sorted(rows)))
    ticks = [np.frombuffer(r.tick_end_s) for r in sim.replicas]
    for seq in sim.requests:
        times = token_times(seq, ticks)
        assert len(times) == seq.osl
        assert times[0] > seq.arrival_s and np.all(np.diff(times) >= 0)
    for r in sim.replicas:
        assert r.free_blocks == r.capacity.blocks
        assert not r.running and not r.prefilling and not r.waiting
