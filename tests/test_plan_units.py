"""The planner's pieces from hand calculations: the steady-state batch, class percentiles,
Pareto fronts, replica search, SLO texts and the search space."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewise.catalog import load_hardware
from phasewise.errors import InputError
from phasewise.plan.inputs import target
from phasewise.plan.profile import DecodePoint, Profile
from phasewise.plan.queueing import class_percentile, decode_batch, pool_state, violation_share
from phasewise.plan.report_rows import pareto
from phasewise.plan.screen import _smallest
from phasewise.plan.space import (
    PoolShape,
    RequestClass,
    SearchSpace,
    Traffic,
    kv_formats,
    weight_formats,
)
from phasewise.specs import Parallelism, Precision


def _profile(a: float, c: float, *, packed: float = 0.0, single: float = 0.0) -> Profile:
    """A fake shape whose decode step is exactly a + c·b seconds."""
    shape = PoolShape(load_hardware("h100-sxm"), Parallelism(), Precision())
    points = tuple(DecodePoint(b, a + c * b, "memory", 0.0) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256))
    return Profile(shape, True, "", {2048: (single,)}, {2048: (packed,)}, "compute", points, (),
                   1.0, {(2048, 256, False): 10**9})


def test_decode_batch_solves_littles_law_for_an_affine_step():
    # b = k(a + c b)  =>  b = k a / (1 - k c); k = 100, a = 10 ms, c = 0.5 ms: b = 1 / 0.95.
    b = decode_batch(_profile(0.010, 0.0005), False, 100.0)
    assert b == pytest.approx(100 * 0.010 / (1 - 100 * 0.0005))


def test_decode_that_cannot_keep_up_has_no_batch():
    # k c = 2 * ... >= 1 on every piece: each added sequence adds more work than time.
    assert decode_batch(_profile(0.010, 0.002), False, 600.0) is None


def test_pool_state_stretches_tpot_by_the_prefill_share():
    # λ = 2/s, 101 output tokens (100 decode steps), P = 0.1 s: ρ = 0.2;
    # k = 2·100/0.8 = 250, step = 4 ms + 0.1 ms·b: b = 250·0.004/(1 − 0.025) = 1.02564…
    # TPOT = step(b) / (1 − ρ); TTFT = single + ρP/(2(1 − ρ)) + stretched step / 2.
    profile = _profile(0.004, 0.0001, packed=0.1, single=0.1)
    state = pool_state(profile, (RequestClass(1000, 101, 1.0),), 2.0, chunk=2048, max_seqs=256,
                       speculating=False)
    b = 250 * 0.004 / (1 - 250 * 0.0001)
    step = (0.004 + 0.0001 * b) / 0.8
    assert state.batch == pytest.approx(b)
    assert state.tpot_s == pytest.approx(step)
    assert state.ttft_s[0] == pytest.approx(0.1 + 0.2 * 0.1 / (2 * 0.8) + step / 2)


def test_prefill_over_the_share_limit_is_unstable():
    profile = _profile(0.004, 0.0001, packed=0.5, single=0.5)
    state = pool_state(profile, (RequestClass(1000, 101, 1.0),), 2.0, chunk=2048, max_seqs=256,
                       speculating=False)
    assert not state.stable and "prefill" in state.reason


def test_class_percentile_and_violation_share():
    values, shares = [5.0, 1.0], [0.25, 0.75]
    assert class_percentile(values, shares, 50) == 1.0  # 75 % of requests take 1
    assert class_percentile(values, shares, 90) == 5.0
    assert violation_share(values, shares, 2.0) == 0.25


def test_pareto_keeps_points_nothing_beats_on_both_axes():
    points = [(1, 5, 0), (2, 4, 1), (2, 3, 2), (3, 1, 3), (0.5, 0.5, 4)]
    assert [i for _, _, i in pareto(points, True, True)] == [3, 1, 0]
    assert [i for _, _, i in pareto(points, False, False)] == [4]


def test_smallest_finds_the_threshold_of_a_monotone_test():
    for threshold in (1, 2, 7, 64, 1000):
        assert _smallest(lambda n, t=threshold: n >= t, 1, 4096) == threshold
    assert _smallest(lambda n: n >= 5000, 1, 4096) is None


@pytest.mark.parametrize("text,limit,pct", [("200ms", 0.2, 90.0), ("1.5s", 1.5, 90.0),
                                            ("50", 0.05, 90.0), ("2s@p99", 2.0, 99.0),
                                            ("30ms@95", 0.03, 95.0)])
def test_slo_texts(text, limit, pct):
    t = target("ttft", text, 90.0)
    assert t.limit_s == pytest.approx(limit) and t.percentile == pct


@pytest.mark.parametrize("text", ["fast", "-2s", "2s@p0", "2s@p101"])
def test_bad_slo_texts_are_input_errors(text):
    with pytest.raises(InputError):
        target("ttft", text, 90.0)


def test_formats_follow_what_the_device_multiplies():
    a100, h100 = load_hardware("a100-80gb-sxm"), load_hardware("h100-sxm")
    assert [p.weights for p in weight_formats(a100, "bf16", None)] == ["bf16"]  # no fp8 math
    assert [p.weights for p in weight_formats(h100, "bf16", None)] == ["bf16", "fp8"]
    assert kv_formats(a100, ("bf16", "fp8"), "bf16") == ["bf16"]
    assert kv_formats(h100, ("bf16", "fp8"), "bf16") == ["bf16", "fp8"]


def test_mean_decode_context_weights_each_class_by_its_decode_steps():
    # classes (8192, 256) and (1024, 1024) at half each: steps 255 and 1023;
    # held context 8192 + 128 and 1024 + 512.
    t = Traffic((RequestClass(8192, 256, 0.5), RequestClass(1024, 1024, 0.5)), 9000)
    expected = (255 * (8192 + 128) + 1023 * (1024 + 512)) / (255 + 1023)
    assert t.decode_context == round(expected)


def test_an_empty_device_list_is_an_input_error():
    with pytest.raises(InputError):
        SearchSpace(())


@settings(max_examples=60, deadline=None)
@given(a=st.floats(1e-4, 5e-2), c=st.floats(1e-6, 1e-3), packed=st.floats(1e-4, 0.05),
       low=st.floats(0.01, 5.0), more=st.floats(1.0, 3.0))
def test_more_load_never_predicts_a_faster_replica(a, c, packed, low, more):
    profile = _profile(a, c, packed=packed, single=packed)
    classes = (RequestClass(1000, 101, 1.0),)
    states = [pool_state(profile, classes, rate, chunk=2048, max_seqs=256, speculating=False)
              for rate in (low, low * more)]
    if all(s.stable for s in states):
        light, heavy = states
        assert heavy.tpot_s >= light.tpot_s * (1 - 1e-12)
        assert heavy.ttft_s[0] >= light.ttft_s[0] * (1 - 1e-12)
        assert heavy.batch >= light.batch * (1 - 1e-12)
    elif states[0].stable is False:
        assert not states[1].stable  # a load that breaks a replica breaks it at more load
