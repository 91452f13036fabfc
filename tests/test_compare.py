"""`compare`: devices ranked per phase and per dollar, against datasheet ratios."""

import dataclasses
import json
import subprocess
import sys

import pytest

from phasewise.catalog import load_hardware
from phasewise.estimate.compare import compare
from phasewise.specs import Parallelism, Workload

# On-demand list prices per GPU-hour pinned here so the test does not move with the catalog:
# H100 SXM $2.99 and H200 SXM $3.99 (Lambda, 2025-06), L40S $1.861 (AWS g6e.xlarge, us-east-1).
# MI300X is compared on speed only: it is given no price.
PRICES = {"h100-sxm": 2.99, "h200-sxm": 3.99, "l40s": 1.861}


def _devices():
    return [dataclasses.replace(load_hardware(name), price_usd_per_hour=PRICES.get(name))
            for name in ("h100-sxm", "h200-sxm", "mi300x", "l40s")]


def _by_name(comparison):
    return {r.hardware: r for r in comparison.results}


def test_h200_decodes_faster_than_h100_by_their_bandwidth_ratio_and_prefills_alike():
    rows = _by_name(compare("llama-3.1-8b", Workload(2048, 256, 1),
                            hardware=["h100-sxm", "h200-sxm"], cost="sol"))
    h100, h200 = rows["h100-sxm"], rows["h200-sxm"]
    # 4.8 TB/s against 3.35 TB/s; both 989.4 dense bf16 TFLOP/s.
    assert h100.tpot_s / h200.tpot_s == pytest.approx(4.8 / 3.35, rel=0.02)
    assert h100.ttft_s / h200.ttft_s == pytest.approx(1.0, abs=0.03)


def test_prompt_heavy_and_generation_heavy_work_pick_different_devices():
    # A prompt-heavy request spends its device time in compute-bound prefill, so it goes to
    # the lowest price per FLOP/s; a generation-heavy one spends it in bandwidth-bound
    # decode, so it goes to the lowest price per byte/s. H200's premium over H100 (1.33×)
    # buys 1.43× the bandwidth and no more FLOP/s: H100 wins the first, H200 the second.
    devices = _devices()
    prompt_heavy = compare("llama-3.1-8b", Workload(8192, 64, 8), hardware=devices, cost="sol")
    generation_heavy = compare("llama-3.1-8b", Workload(256, 2048, 64), hardware=devices,
                               cost="sol")
    priced = [d for d in devices if d.price_usd_per_hour]
    per_flops = min(priced, key=lambda d: d.price_usd_per_hour / d.peak_flops("bf16")).name
    per_byte = min(priced, key=lambda d: d.price_usd_per_hour / d.memory_bandwidth_bytes_per_s).name
    assert (per_flops, per_byte) == ("h100-sxm", "h200-sxm")
    assert prompt_heavy.winners["cheapest request"] == per_flops
    assert generation_heavy.winners["cheapest request"] == per_byte
    assert prompt_heavy.results[0].hardware == "h100-sxm"
    assert generation_heavy.results[0].hardware == "h200-sxm"
    # On speed alone MI300X (1,307 TFLOP/s, 5.3 TB/s) leads both phases; L40S trails both.
    for comparison in (prompt_heavy, generation_heavy):
        assert comparison.winners["prefill: lowest TTFT"] == "mi300x"
        assert comparison.winners["decode: lowest TPOT"] == "mi300x"
        assert max(comparison.results, key=lambda r: r.tpot_s).hardware == "l40s"


def test_cost_per_token_charges_each_phase_its_device_time():
    row = _by_name(compare("llama-3.1-8b", Workload(2048, 256, 4), hardware=_devices(),
                            cost="sol"))["h100-sxm"]
    per_second = 2.99 / 3600
    assert row.usd_per_million_input_tokens == pytest.approx(per_second * row.ttft_s / (4 * 2048) * 1e6)
    assert row.usd_per_million_output_tokens == pytest.approx(per_second * row.tpot_s / 4 * 1e6)
    request_s = row.ttft_s + 255 * row.tpot_s
    assert row.usd_per_thousand_requests == pytest.approx(per_second * request_s / 4 * 1000, rel=1e-3)


def test_devices_without_a_price_rank_after_priced_ones():
    ranked = compare("llama-3.1-8b", Workload(2048, 256, 1), hardware=_devices()).results
    assert ranked[-1].hardware == "mi300x" and ranked[-1].usd_per_thousand_requests is None


def test_by_default_every_catalog_device_that_fits_is_ranked_and_the_rest_say_why():
    # Llama-3.1-70B in bf16 needs 141 GB of weights: no 80 GB device holds it alone.
    result = compare("llama-3.1-70b", Workload(2048, 256, 1))
    ranked = {r.hardware for r in result.results}
    assert "h100-sxm" not in ranked and "mi300x" in ranked
    assert "does not fit" in result.skipped["h100-sxm"]
    assert all(r.fits for r in result.results)


def test_tensor_parallel_beyond_the_link_domain_is_not_ranked():
    result = compare("llama-3.1-8b", hardware=["h100-sxm"],
                     parallelisms=[Parallelism(tp=8), Parallelism(tp=16)])
    assert [r.tp for r in result.results] == [8]
    assert "8 devices" in result.skipped["h100-sxm TP16"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=120)


def test_compare_command_ranks_devices_and_names_winners():
    result = run("compare", "-H", "h100-sxm,h200-sxm,l40s", "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {r["hardware"] for r in doc["results"]} == {"h100-sxm", "h200-sxm", "l40s"}
    assert doc["winners"]["decode: lowest TPOT"] == "h200-sxm"
    table = run("compare", "-H", "h100-sxm,h200-sxm", "--price", "h100-sxm=1.0")
    assert table.returncode == 0 and "$1.000" in table.stdout


def test_compare_unknown_rank_criterion_is_one_line():
    result = run("compare", "-H", "h100-sxm", "--rank-by", "speed")
    assert result.returncode == 2 and "--rank-by" in result.stderr


def test_a_device_that_fits_only_at_a_larger_tp_says_the_smallest_that_fits():
    # Llama-3.1-70B in bf16 is 70.55 B × 2 B = 141.1 GB of weights. On an 80 GB H100 with the
    # 10% runtime reserve (8 GB) and an 8,192-token context (327,680 B of KV per token over
    # 80 layers): TP2 holds 70.55 + 8 + 1.34 = 79.9 GB before activations, more than 80 GB
    # once they are added; TP4 holds 35.3 + 8 + 0.67 = 44 GB.
    from phasewise.estimate.compare import compare
    from phasewise.specs import Workload

    result = compare("llama-3.1-70b", Workload(isl=8192, osl=256), hardware=["h100-sxm"])
    assert "fits from TP4 (--tp 4)" in result.skipped["h100-sxm"]
