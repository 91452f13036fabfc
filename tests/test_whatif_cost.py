"""Cost per million tokens from hourly prices and energy per token from TDP, by hand."""

import pytest

import phasewise
from phasewise.catalog import load_hardware
from phasewise.errors import InputError
from phasewise.estimate.cost_energy import (
    joules_per_token_upper_bound,
    usd_per_million_tokens,
    with_price,
)
from phasewise.specs import Parallelism, Workload

H100 = load_hardware("h100-sxm")


def test_a_dollar_an_hour_for_one_second_per_token_is_277_dollars_per_million():
    # $1/h · 1 s / 3600 s/h = $0.000278 per token → $277.78 per million.
    assert usd_per_million_tokens(1.0, 1, 1.0, 1) == pytest.approx(1e6 / 3600)
    assert usd_per_million_tokens(None, 1, 1.0, 1) is None


def test_energy_upper_bound_is_tdp_times_time_over_tokens():
    # 700 W for 10 ms shared by 8 tokens: 7 J / 8 = 0.875 J per token.
    assert joules_per_token_upper_bound(700, 1, 0.010, 8) == pytest.approx(0.875)


def test_each_phase_pays_for_its_own_device_time():
    device = with_price(H100, 3.6)  # $0.001 per device-second
    est = phasewise.estimate("llama-3.1-8b", device, Workload(2048, 128, 4),
                             parallelism=Parallelism(tp=2))
    ce = est.cost_energy
    # Two devices; prefill serves 4·2048 prompt tokens, a decode step serves 4 tokens.
    assert ce.usd_per_hour == pytest.approx(7.2)
    assert ce.usd_per_million_input_tokens == pytest.approx(2 * 0.001 * est.ttft_s / 8192 * 1e6)
    assert ce.usd_per_million_output_tokens == pytest.approx(2 * 0.001 * est.tpot_s / 4 * 1e6)
    assert ce.joules_per_output_token_upper_bound == pytest.approx(2 * 700 * est.tpot_s / 4)
    assert "upper bound" in ce.energy_basis


def test_negative_price_is_refused():
    with pytest.raises(InputError, match="--price"):
        with_price(H100, -1.0)
