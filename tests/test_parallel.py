"""Tensor parallelism: weights split per device, collectives priced, where TP stops paying."""

import subprocess
import sys

import pytest

import phasewise
from phasewise.catalog import load_hardware, load_model
from phasewise.estimate.parallel import tp_scaling
from phasewise.ledger import Step, build_ledger
from phasewise.specs import Parallelism, Workload

LLAMA_8B = load_model("llama-3.1-8b")
H100 = load_hardware("h100-sxm")


def test_tp2_holds_and_reads_half_the_weights_per_device():
    one = phasewise.estimate("llama-3.1-70b", "h200-sxm", Workload(2048, 256, 1))
    two = phasewise.estimate("llama-3.1-70b", "h200-sxm", Workload(2048, 256, 1),
                             parallelism=Parallelism(tp=2))
    assert two.memory.weights_bytes == pytest.approx(one.memory.weights_bytes / 2)
    # The decode step reads every weight but the embedding table; all of it splits in two.
    assert two.decode.bytes["weights"] == pytest.approx(one.decode.bytes["weights"] / 2, rel=1e-3)


def test_decode_allreduce_bytes_by_hand():
    # TP=2, batch 1: each all-reduce sends 2(p−1)/p of 1 token × 4096 × 2 B = 8,192 B; two per
    # layer (after attention and after the MLP) over 32 layers.
    ledger = build_ledger(LLAMA_8B, Step.decode(1, 1024), parallelism=Parallelism(tp=2))
    allreduce = sum(op.network for op in ledger.select("tp.allreduce"))
    assert allreduce == pytest.approx(64 * 8192)


def test_expert_parallel_all_to_all_bytes_by_hand():
    # Mixtral-8x7B, EP8 over TP1: attention runs data-parallel, 64 decode tokens / 8 = 8 per
    # device; each sends its 8 tokens × top-2 × 4096 × 2 B to the other 7/8 of the experts
    # and gets them back (dispatch + combine): 2 · 8·2·4096·2·7/8 = 229,376 B per layer.
    ledger = build_ledger(load_model("mixtral-8x7b"), Step.decode(64, 1024),
                          parallelism=Parallelism(tp=1, ep=8))
    assert sum(op.network for op in ledger.select("ep.alltoall")) == pytest.approx(32 * 229_376)


def test_pipeline_stages_send_the_hidden_states_once_per_boundary():
    # PP2 prefill of 1024 tokens: one boundary carries 1024 × 4096 × 2 B = 8 MiB; each stage
    # holds half the weights.
    ledger = build_ledger(LLAMA_8B, Step.prefill(1024), parallelism=Parallelism(pp=2))
    assert sum(op.network for op in ledger.select("pp.send")) == 1024 * 4096 * 2
    one = phasewise.estimate(LLAMA_8B, H100, Workload(1024, 2, 1))
    two = phasewise.estimate(LLAMA_8B, H100, Workload(1024, 2, 1), parallelism=Parallelism(pp=2))
    assert two.memory.weights_bytes == pytest.approx(one.memory.weights_bytes / 2)


def test_tp_stops_paying_for_a_small_model_but_not_for_a_large_one():
    # Llama-3.2-1B reads 2.5 GB per decode step (0.74 ms on H100); at TP4 the 4 latency
    # rounds per all-reduce × 2 per layer × 16 layers × 3 µs cost more than the weight reads
    # they save.
    small = tp_scaling("llama-3.2-1b", "h100-sxm", Workload(2048, 256, 1), cost="sol")
    assert small.tp_stops_paying_at is not None and small.tp_stops_paying_at <= 8
    assert small.best_tp_for_tpot < 8
    assert small.points[-1].decode_network_share > small.points[1].decode_network_share > 0
    # Llama-3.1-70B reads 141 GB per step: TP8 still helps.
    large = tp_scaling("llama-3.1-70b", "h100-sxm", Workload(2048, 256, 1), cost="sol")
    assert large.tp_stops_paying_at is None and large.best_tp_for_tpot == 8
    assert [p.fits for p in large.points] == [False, True, True, True]


def test_tp_degrees_the_heads_do_not_allow_are_skipped_with_the_reason():
    result = tp_scaling("llama-3.1-8b", "h100-sxm", tp_degrees=[1, 2, 3])
    assert [p.tp for p in result.points] == [1, 2]
    assert "--tp 3" in result.skipped["TP3"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=120)


def test_tp_sweep_on_one_device_shows_the_scaling_table():
    result = run("compare", "-m", "llama-3.2-1b", "-H", "h100-sxm", "--tp", "1,2,4,8",
                 "--cost", "sol")
    assert result.returncode == 0, result.stderr
    assert "TP stops paying" in result.stdout and "collectives" in result.stdout


def test_tp_not_dividing_the_heads_is_one_line_and_exit_2():
    result = run("estimate", "--tp", "3")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--tp 3" in result.stderr
