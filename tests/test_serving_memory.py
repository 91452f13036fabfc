"""The paged KV cache: capacity, admission, preemption by recomputation, prefix caching,
and invariants that hold for any run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasewise.catalog import load_model
from phasewise.errors import InputError
from phasewise.serving import Pool, Requests, Server, request_metrics, simulate, summarize
from phasewise.serving.kv_cache import kv_capacity
from phasewise.serving.metrics import step_table, token_times
from phasewise.serving.simulator import check_held_memory
from phasewise.specs import Parallelism, Precision
from test_serving_fakes import FixedStep, small_h100, trace

D = 0.01
LLAMA_8B_KV_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2  # layers × (K, V) × KV heads × dims × bf16


def test_kv_capacity_is_memory_left_after_weights_activations_and_reserve() -> None:
    from phasewise.catalog import load_hardware

    cap = kv_capacity(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision(),
                      Parallelism(), block_tokens=16, max_batched_tokens=2048, max_seqs=256)
    # 80 GB − 8.03 B params × 2 bytes − 10% reserve − activations (well under 1 GB).
    room = 80e9 - 8.03e9 * 2 - 8e9
    assert cap.bytes_per_token == LLAMA_8B_KV_BYTES_PER_TOKEN
    assert cap.kv_bytes == pytest.approx(room, rel=0.02)
    assert cap.blocks == int((80e9 - cap.weights_bytes - cap.activations_bytes
                              - cap.reserve_bytes) // (16 * LLAMA_8B_KV_BYTES_PER_TOKEN))


def test_a_model_that_does_not_fit_is_refused_before_the_run() -> None:
    with pytest.raises(InputError, match="does not fit"):
        simulate(Server(model="llama-3.1-70b", cost=FixedStep(D)), trace((0.0, 10, 2)))


def test_a_request_longer_than_the_cache_is_named_before_the_run() -> None:
    rows = [(0.0, 100, 2), (0.1, 20_000, 10)]
    with pytest.raises(InputError, match="request 1 needs"):
        simulate(Server(cost=FixedStep(D), pool=Pool(small_h100(22.0))), trace(*rows))


def test_a_run_over_the_memory_budget_is_refused_before_it_starts() -> None:
    n = 1_000_000
    requests = Requests(np.full(n, 1000), np.full(n, 1000), np.arange(n, dtype=float))
    with pytest.raises(InputError, match="over the .* budget"):
        check_held_memory(requests, 4 * 2**30)


def crowded(n: int = 40, isl: int = 600, osl: int = 300) -> Requests:
    """More long sequences at once than a 19 GB H100 holds (about 7,000 tokens)."""
    return Requests(np.full(n, isl), np.full(n, osl), np.zeros(n))


@pytest.mark.parametrize("scheduler", ["continuous", "chunked", "static"])
def test_a_full_cache_preempts_and_every_request_still_gets_all_its_tokens(scheduler: str) -> None:
    sim = simulate(Server(scheduler=scheduler, cost=FixedStep(D), pool=Pool(small_h100())),
                   crowded())
    m = request_metrics(sim)
    assert summarize(sim).preemptions > 0
    assert m.preemptions.sum() == sum(r.preemptions for r in sim.replicas)
    ticks = [np.frombuffer(r.tick_end_s) for r in sim.replicas]
    assert all(len(token_times(s, ticks)) == s.osl for s in sim.requests)
    assert all(r.free_blocks == r.capacity.blocks for r in sim.replicas)


def test_admission_leaves_the_watermark_free() -> None:
    sim = simulate(Server(cost=FixedStep(D), pool=Pool(small_h100())), crowded(osl=2))
    replica = sim.replicas[0]
    admitted_peak = step_table(replica)["kv_blocks_used"].max()
    assert admitted_peak <= replica.capacity.blocks - replica.capacity.watermark_blocks


def test_a_prefix_hit_rate_skips_that_share_of_the_prompt() -> None:
    from phasewise.catalog import load_hardware
    from phasewise.cost import SpeedOfLight
    from phasewise.ledger import Step, build_ledger

    isl = 2000
    requests = Requests(np.array([isl]), np.array([2]), np.array([0.0]),
                        prefix_tokens=np.array([isl // 2]))
    sim = simulate(Server(cost="sol"), requests, bucket_tokens=1)
    ledger = build_ledger(load_model("llama-3.1-8b"), Step.prefill(isl // 2, cached_tokens=isl // 2))
    expected = SpeedOfLight().step_time(ledger, load_hardware("h100-sxm")).total.time_s
    assert request_metrics(sim).ttft_s[0] == pytest.approx(expected, rel=1e-9)
    assert summarize(sim).prefix_cached_tokens == isl // 2


def test_a_shared_prefix_in_a_trace_is_computed_once_per_replica() -> None:
    requests = Requests(np.array([2000, 2000, 2000]), np.array([2, 2, 2]),
                        np.array([0.0, 1.0, 2.0]), prefix_tokens=np.array([1500, 1500, 1500]),
                        prefix_id=np.array([7, 7, 7]))
    one = request_metrics(simulate(Server(cost="sol"), requests))
    assert one.ttft_s[1] < 0.5 * one.ttft_s[0]  # 500 new tokens instead of 2,000
    assert one.ttft_s[2] == pytest.approx(one.ttft_s[1])
    two = request_metrics(simulate(Server(cost="sol", pool=Pool(replicas=2),
                                          load_balancer="round-robin"), requests))
    assert two.ttft_s[1] == pytest.approx(two.ttft_s[0])  # replica 1 has not seen the prefix
    assert two.ttft_s[2] < 0.5 * two.ttft_s[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.floats(0, 0.2), st.integers(1, 900), st.integers(1, 400)),
                     min_size=1, max_size=25),
       scheduler=st.sampled_from(["static", "continuous", "chunked", "disaggregated"]),
       max_seqs=st.integers(1, 16), replicas=st.integers(1, 2),
       budget=st.sampled_from([None, 16, 64]))
def test_any_run_gives_every_request_its_tokens_in_order_and_frees_all_memory(
        rows: list, scheduler: str, max_seqs: int, replicas: int, budget: int | None) -> None:
    rows = sorted(rows)
    chunked = scheduler == "chunked"
    server = Server(scheduler=scheduler, cost=FixedStep(D), max_seqs=max_seqs,
                    max_batched_tokens=max(budget, max_seqs) if chunked and budget else None,
                    pool=Pool(small_h100(), replicas=replicas))
    sim = simulate(server, trace(*rows))
    ticks = [np.frombuffer(r.tick_end_s) for r in sim.replicas]
    assert [s.id for s in sim.requests] == list(range(len(rows)))
    for seq in sim.requests:
        times = token_times(seq, ticks)
        assert len(times) == seq.osl
        assert times[0] > seq.arrival_s
        assert np.all(np.diff(times) > 0)
    for r in sim.replicas:
        assert r.free_blocks == r.capacity.blocks
        assert not r.running and not r.prefilling and not r.waiting and not r.busy
