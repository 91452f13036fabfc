"""Disaggregated prefill and decode: KV transfer, pool balance and cost, by hand."""

import subprocess
import sys

import pytest

from phasewise.catalog import load_model
from phasewise.errors import InputError
from phasewise.estimate.disagg import custom_link, disaggregate, kv_transfer
from phasewise.specs import Parallelism, Precision, Workload

LLAMA_70B = load_model("llama-3.1-70b")
FIFTY_GB_S = custom_link(50.0)


def test_4k_llama_70b_prompt_crosses_a_50_gb_s_link_in_27_ms():
    # 80 layers × 2 (K and V) × 8 KV heads × 128 × 2 bytes = 327,680 B per token;
    # 4096 tokens = 1,342,177,280 B; at 50 GB/s: 26.8 ms.
    bytes_, seconds = kv_transfer(LLAMA_70B, Precision(), Parallelism(), 4096, FIFTY_GB_S)
    assert bytes_ == 4096 * 327_680
    assert seconds == pytest.approx(0.0268, abs=0.0001)


def test_each_tensor_parallel_rank_sends_its_own_shard():
    bytes_, seconds = kv_transfer(LLAMA_70B, Precision(), Parallelism(tp=4), 4096, FIFTY_GB_S)
    assert bytes_ == 4096 * 327_680 / 4
    assert seconds == pytest.approx(0.0268 / 4, abs=0.0001)


def test_fp8_kv_halves_the_transfer_and_latency_adds_once():
    link = custom_link(50.0, latency_us=10.0)
    _, seconds = kv_transfer(LLAMA_70B, Precision(kv_cache="fp8"), Parallelism(), 4096, link)
    assert seconds == pytest.approx(0.0134 + 10e-6, abs=0.0001)


def _report(**overrides):
    args = dict(prefill_hardware="h100-sxm", decode_hardware="h200-sxm", prefill_pool=8,
                decode_pool=8, prefill_tp=4, decode_tp=4, link=FIFTY_GB_S, cost="sol")
    args.update(overrides)
    return disaggregate("llama-3.1-70b", Workload(4096, 512, 32), **args)


def test_ttft_is_the_prefill_step_plus_the_transfer():
    report = _report()
    colocated_prefill = next(c for c in report.colocated if c.hardware == "h100-sxm").ttft_s
    assert report.ttft_s == pytest.approx(colocated_prefill + report.kv_transfer_s)
    assert report.kv_transfer_s == pytest.approx(4096 * 327_680 / 4 / 50e9)


def test_the_slower_pool_sets_the_rate_and_the_other_idles():
    report = _report()
    pools = {report.prefill.role: report.prefill, report.decode.role: report.decode}
    assert report.sustained_requests_per_s == pytest.approx(
        min(p.requests_per_s for p in pools.values()))
    assert pools[report.bottleneck].utilization == pytest.approx(1.0)
    other = "decode" if report.bottleneck == "prefill" else "prefill"
    assert pools[other].utilization < 1.0


def test_pools_sized_at_the_balanced_ratio_leave_neither_starving():
    # Rates per instance from one report; instances in the balanced ratio sustain the same
    # request rate, so both pools run at full load.
    report = _report()
    per_prefill = report.prefill.requests_per_s / report.prefill.instances
    per_decode = report.decode.requests_per_s / report.decode.instances
    ratio = report.balanced_prefill_to_decode  # prefill devices per decode device (equal TP)
    assert ratio == pytest.approx(per_decode / per_prefill)
    # The best split of 16 devices in TP-4 instances is the balanced one rounded.
    prefill, decode = report.best_split
    assert prefill + decode == 16
    assert abs(prefill / 16 - ratio / (1 + ratio)) <= 4 / 16
    assert report.best_split_requests_per_s == pytest.approx(
        min(prefill // 4 * per_prefill, decode // 4 * per_decode))


def test_cost_per_million_tokens_is_the_hourly_price_over_tokens_per_hour():
    report = _report()
    usd_per_hour = 8 * 2.99 + 8 * 3.99  # catalog list prices, H100 and H200
    tokens_per_hour = report.sustained_requests_per_s * (4096 + 512) * 3600
    assert report.usd_per_million_tokens == pytest.approx(usd_per_hour / tokens_per_hour * 1e6,
                                                          rel=1e-3)
    assert {c.hardware for c in report.colocated} == {"h100-sxm", "h200-sxm"}


def test_colocated_decode_stalls_behind_prefills():
    # Same device and TP as the decode pool, but sharing it with prefills: each decode step
    # waits its turn, TPOT / (1 − share of device time in prefill).
    report = _report()
    h200 = next(c for c in report.colocated if c.hardware == "h200-sxm")
    assert h200.tpot_s > report.tpot_s


@pytest.mark.parametrize("overrides, words", [
    (dict(prefill_pool=0), "--prefill-pool"),
    (dict(decode_pool=6), "multiple of its TP"),
])
def test_impossible_pools_say_what_to_change(overrides, words):
    with pytest.raises(InputError, match=words):
        _report(**overrides)


def test_one_output_token_has_no_decode_to_move():
    with pytest.raises(InputError, match="--osl"):
        disaggregate("llama-3.1-8b", Workload(1024, 1, 1), prefill_hardware="h100-sxm",
                     decode_hardware="h100-sxm", prefill_pool=1, decode_pool=1)


def run(*args):
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=120)


def test_disaggregation_flags_add_the_pool_table():
    result = run("estimate", "-m", "llama-3.1-8b", "--prefill-hardware", "h100-sxm",
                 "--decode-hardware", "h200-sxm", "--prefill-pool", "1", "--decode-pool", "2",
                 "--link-bandwidth", "50", "--link-latency", "5")
    assert result.returncode == 0, result.stderr
    for words in ("Disaggregated", "KV transfer", "balanced ratio", "Colocated"):
        assert words in result.stdout


def test_a_pool_of_zero_is_one_line_and_exit_2():
    result = run("estimate", "--prefill-hardware", "h100-sxm", "--prefill-pool", "0")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--prefill-pool" in result.stderr


def test_a_request_mix_averages_instance_time_per_request():
    prompt_heavy = _report(mix=[(4096, 128, 1.0)])
    chatty = _report(mix=[(512, 2048, 1.0)])
    both = _report(mix=[(4096, 128, 3.0), (512, 2048, 1.0)])
    for pool in ("prefill", "decode"):
        expected = (0.75 * getattr(prompt_heavy, pool).instance_seconds_per_request
                    + 0.25 * getattr(chatty, pool).instance_seconds_per_request)
        assert getattr(both, pool).instance_seconds_per_request == pytest.approx(expected)
    assert [c.share for c in both.classes] == [0.75, 0.25]


def test_prompt_heavier_traffic_needs_more_prefill_devices_per_decode_device():
    assert (_report(mix=[(8192, 128, 1.0)]).balanced_prefill_to_decode
            > _report(mix=[(512, 2048, 1.0)]).balanced_prefill_to_decode)


def test_a_malformed_mix_is_one_line_and_exit_2():
    result = run("estimate", "--prefill-hardware", "h100-sxm", "--mix", "4096:256")
    assert result.returncode == 2 and "ISL:OSL:SHARE" in result.stderr
