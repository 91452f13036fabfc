"""The simulator against the estimate and against queueing laws."""

from __future__ import annotations

import numpy as np
import pytest

import phasewise
from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.serving import Pool, Server, Slo, parse_lengths, simulate, summarize
from phasewise.serving.requests import open_loop
from phasewise.specs import Parallelism, Workload
from test_serving_fakes import trace

ISL, OSL = 1000, 200
# Llama-3.1-8B KV per token: 32 layers × 2 (K, V) × 8 KV heads × 128 dims × 2 bytes.
LLAMA_8B_KV_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2


def lengths(text: str):  # noqa: ANN201
    return parse_lengths(text, "--isl")


def one_request(server: Server, bucket_tokens: int = 1):  # noqa: ANN201
    sim = simulate(server, trace((0.0, ISL, OSL)), bucket_tokens=bucket_tokens)
    return summarize(sim)


def test_one_request_on_an_idle_server_matches_the_estimate_exactly_at_speed_of_light() -> None:
    s = one_request(Server(cost="sol"))
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(ISL, OSL, 1), cost="sol")
    assert s.ttft.mean_s == pytest.approx(est.ttft_s, rel=1e-9)
    # The estimate averages decode over contexts with Simpson's rule, exact for a step
    # time linear in the context; the simulation sums every step.
    assert s.tpot.mean_s == pytest.approx(est.tpot_s, rel=1e-9)


def test_context_buckets_move_tpot_by_less_than_their_documented_bound() -> None:
    s = one_request(Server(cost="sol"), bucket_tokens=64)
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(ISL, OSL, 1), cost="sol")
    # At most half a bucket of context per step, of at least ISL tokens.
    assert s.tpot.mean_s == pytest.approx(est.tpot_s, rel=32 / ISL)


def test_one_request_matches_the_estimate_under_the_default_cost_model() -> None:
    s = one_request(Server())
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(ISL, OSL, 1),
                             cost=DEFAULT_COST_MODEL)
    assert s.ttft.mean_s == pytest.approx(est.ttft_s, rel=1e-9)
    # Simpson's rule over three contexts against the exact sum of 199 steps.
    assert s.tpot.mean_s == pytest.approx(est.tpot_s, rel=0.02)


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp"])
def test_one_request_matches_the_estimate_under_the_same_engine_profile(engine: str) -> None:
    """llama.cpp's 512-token micro-batches and each engine's fitted constants price the
    simulated steps as they price the estimate."""
    s = one_request(Server(engine=engine))
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(ISL, OSL, 1),
                             cost=DEFAULT_COST_MODEL, engine=engine)
    assert s.ttft.mean_s == pytest.approx(est.ttft_s, rel=1e-9)
    assert s.tpot.mean_s == pytest.approx(est.tpot_s, rel=0.02)
    assert s.ttft.mean_s != pytest.approx(one_request(Server()).ttft.mean_s, rel=1e-3)


def test_tensor_parallel_replica_matches_the_tensor_parallel_estimate() -> None:
    s = one_request(Server(cost="sol", pool=Pool("h100-sxm", Parallelism(tp=2))))
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(ISL, OSL, 1),
                             parallelism=Parallelism(tp=2), cost="sol")
    assert s.ttft.mean_s == pytest.approx(est.ttft_s, rel=1e-9)
    assert s.tpot.mean_s == pytest.approx(est.tpot_s, rel=1e-9)
    assert s.devices == 2


def test_disaggregated_request_pays_prefill_on_one_device_decode_on_another_and_the_link() -> None:
    server = Server(cost="sol", scheduler="disaggregated", pool=Pool("h100-sxm"),
                    decode_pool=Pool("h200-sxm"), kv_link="infiniband-ndr-400")
    s = one_request(server)
    on_h100 = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(ISL, OSL, 1), cost="sol")
    on_h200 = phasewise.estimate("llama-3.1-8b", "h200-sxm", Workload(ISL, OSL, 1), cost="sol")
    # NDR 400: 50 GB/s per direction and 5 µs per transfer (catalog/links). The response
    # streams from the decode replica, so the hand-off is part of TTFT.
    transfer_s = 5e-6 + ISL * LLAMA_8B_KV_BYTES_PER_TOKEN / 50e9
    assert s.kv_transfer_mean_s == pytest.approx(transfer_s, rel=1e-9)
    assert s.ttft.mean_s == pytest.approx(on_h100.ttft_s + transfer_s, rel=1e-9)
    assert s.tpot.mean_s == pytest.approx(on_h200.tpot_s, rel=1e-9)


def test_littles_law_holds_in_a_steady_open_loop() -> None:
    # Mean requests in the system (sampled at every step) = arrival rate × mean latency.
    rate = 10.0
    requests = open_loop(3000, lengths("uniform:256:2048"), lengths("uniform:32:512"),
                         np.random.default_rng(11), rate_per_s=rate)
    s = summarize(simulate(Server(cost="sol"), requests))
    assert s.mean_in_system == pytest.approx(s.request_rate_rps * s.e2el.mean_s, rel=0.05)


def sweep(rates: list[float], server: Server, n: int, isl: str, osl: str, slo: Slo | None = None):  # noqa: ANN201
    out = []
    for rate in rates:
        requests = open_loop(n, lengths(isl), lengths(osl), np.random.default_rng(1),
                             rate_per_s=rate)
        out.append(summarize(simulate(server, requests), slo=slo))
    return out


def test_p99_ttft_never_falls_and_throughput_saturates_at_the_estimate_maximum() -> None:
    server = Server(cost="sol")
    runs = sweep([2, 8, 32, 64, 128, 512], server, 600, "1024", "256")
    p99 = [s.ttft.p99_s for s in runs]
    assert p99 == sorted(p99)
    # The estimate's best: all 256 sequences vLLM allows in flight, prefilled then decoded.
    best = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(1024, 256, 256),
                              cost="sol").tokens_per_s
    throughput = [s.output_tokens_per_s for s in runs]
    assert max(throughput) <= best * 1.02
    assert throughput[-1] >= 0.9 * best
    assert throughput[-1] == pytest.approx(throughput[-2], rel=0.02)  # the plateau


def test_disaggregation_wins_goodput_under_a_tight_tpot_slo_and_loses_under_a_loose_one() -> None:
    # DistServe (Zhong et al., OSDI 2024) and Splitwise: with the same two GPUs, separate
    # prefill and decode pools keep prefills from stalling decodes, which only pays when
    # the TPOT target is tight; with a loose one, two colocated replicas serve more.
    rates = [5, 10, 15, 20, 30, 40]
    colocated = Server(cost="sol", pool=Pool("h100-sxm", replicas=2))
    disaggregated = Server(cost="sol", scheduler="disaggregated")
    tight, loose = Slo(ttft_s=0.2, tpot_s=0.007), Slo(ttft_s=0.2, tpot_s=0.05)

    def goodput(server: Server, slo: Slo) -> float:
        """DistServe's goodput: the highest rate at which the SLO attainment holds."""
        runs = sweep(rates, server, 600, "2048", "128", slo)
        return max((rate for rate, s in zip(rates, runs, strict=False) if s.slo.met), default=0.0)

    assert goodput(disaggregated, tight) > goodput(colocated, tight)
    assert goodput(colocated, loose) > goodput(disaggregated, loose)
