"""Speculative decoding against its closed form and the bandwidth arithmetic of batch 1."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasewise.errors import InputError
from phasewise.estimate.speculative import expected_tokens_per_round, speculative
from phasewise.specs import Parallelism, Workload

WORKLOAD = Workload(2048, 256, 1)


@given(st.floats(min_value=0.0, max_value=0.99), st.integers(min_value=1, max_value=16))
def test_expected_tokens_is_the_geometric_series_of_acceptance(alpha, gamma):
    # Token k+1 of the round survives only if the k drafts before it were all accepted:
    # E = Σ_{k=0..γ} α^k (Leviathan et al. 2023, eq. 1, in closed form).
    assert expected_tokens_per_round(alpha, gamma) == pytest.approx(
        sum(alpha**k for k in range(gamma + 1)))


def test_expected_tokens_known_values():
    assert expected_tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)  # 3.3616
    assert expected_tokens_per_round(0.0, 4) == 1.0


def test_batch_1_speedup_is_tokens_per_round_over_the_round_cost_in_bytes():
    # At batch 1 every step is bandwidth-bound: a step costs the bytes it reads. Llama-3.1-70B
    # reads 69.5 B params × 2 B (all but its untied embedding table) = 139 GB; Llama-3.2-1B
    # reads its 1.24 B params × 2 B = 2.47 GB (tied: the LM head is the table). The verify
    # step reads the same weights as a plain step, so
    # speed-up ≈ E / (1 + γ · 2.47 / 139) = 3.3616 / 1.071 = 3.14.
    report = speculative("llama-3.1-70b", "h200-sxm", WORKLOAD, draft="llama-3.2-1b",
                         spec_tokens=4, spec_accept=0.8, cost="sol")
    at1 = report.at_batch
    assert at1.verify_s == pytest.approx(at1.tpot_baseline_s, rel=0.02)
    assert at1.speedup == pytest.approx(3.3616 / (1 + 4 * 2.47 / 139), rel=0.03)
    assert at1.tpot_s == pytest.approx(at1.round_s / 3.3616)


def test_speedup_shrinks_as_the_batch_turns_decode_compute_bound():
    # Short contexts: decode turns compute-bound near batch 360 (see test_explain), and
    # there a verify step of γ+1 = 5 tokens costs ~5 plain steps for 2.77 expected tokens.
    report = speculative("llama-3.1-8b", "h100-sxm", Workload(128, 128, 1), draft="llama-3.2-1b",
                         spec_tokens=4, spec_accept=0.7, batches=(1, 16, 256, 1024), cost="sol")
    speedups = [p.speedup for p in report.points]
    assert speedups == sorted(speedups, reverse=True)
    assert [p.verify_bound for p in report.points] == ["memory", "memory", "compute", "compute"]
    assert speedups[0] > 1.5 and speedups[-1] < 1


def test_at_long_context_the_kv_reads_keep_the_verify_step_cheap():
    # At 2k cached tokens the KV cache, read once per verify step for all γ+1 tokens, holds
    # decode memory-bound at any batch, so speculation still pays at batch 1024.
    report = speculative("llama-3.1-8b", "h100-sxm", WORKLOAD, draft="llama-3.2-1b",
                         spec_tokens=4, spec_accept=0.7, batches=(1, 1024), cost="sol")
    assert [p.verify_bound for p in report.points] == ["memory", "memory"]
    assert report.points[-1].speedup > 1


def test_the_draft_takes_memory_from_the_batch():
    report = speculative("llama-3.1-8b", "h100-sxm", WORKLOAD, draft="llama-3.2-1b",
                         cost="sol")
    assert report.draft_weights_bytes == pytest.approx(2.47e9, rel=0.01)
    assert report.max_batch_size_with_draft < report.max_batch_size_baseline


def test_a_head_draft_is_a_slice_of_the_target_sharing_its_embeddings():
    # One layer of Llama-3.1-8B: 218.1 M matmul weights + two norms, 2 bytes each.
    report = speculative("llama-3.1-8b", "h100-sxm", WORKLOAD, draft_head_fraction=1 / 32,
                         cost="sol")
    assert report.draft_kind == "head" and "1 layer" in report.draft
    assert report.draft_weights_bytes == pytest.approx((218_103_808 + 2 * 4096 + 4096) * 2, rel=1e-3)
    assert report.at_batch.speedup > 1


def test_a_tensor_parallel_target_shares_its_split_with_the_draft():
    report = speculative("llama-3.1-70b", "h200-sxm", WORKLOAD, parallelism=Parallelism(tp=2),
                         draft="llama-3.2-1b")
    assert report.draft_weights_bytes == pytest.approx(2.47e9 / 2, rel=0.01)


@pytest.mark.parametrize("kwargs, words", [
    (dict(draft="llama-3.2-1b", spec_accept=1.0), "--spec-accept"),
    (dict(draft="llama-3.2-1b", spec_accept=-0.1), "--spec-accept"),
    (dict(draft="llama-3.2-1b", spec_tokens=0), "--spec-tokens"),
    (dict(draft="llama-3.1-70b"), "not smaller"),
    (dict(), "one draft"),
    (dict(draft_head_fraction=1.0), "--draft-head"),
])
def test_impossible_speculation_says_what_to_change(kwargs, words):
    with pytest.raises(InputError, match=words):
        speculative("llama-3.1-8b", "h100-sxm", WORKLOAD, **kwargs)


def run(*args):
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=120)


def test_speculative_flags_add_the_table():
    result = run("estimate", "--draft", "llama-3.2-1b", "--spec-tokens", "3", "--spec-accept", "0.6")
    assert result.returncode == 0, result.stderr
    assert "Speculative decoding" in result.stdout and "speed-up" in result.stdout


def test_acceptance_of_one_is_refused_with_one_line():
    result = run("estimate", "--draft", "llama-3.2-1b", "--spec-accept", "1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "[0, 1)" in result.stderr
