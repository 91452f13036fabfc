"""What-if variants (precision, KV compression, price) and the batch sweep."""

import json
import subprocess
import sys

import pytest

from phasewise.errors import InputError
from phasewise.estimate.sweep import batch_sweep, default_batches
from phasewise.estimate.whatif import parse_variant, relative_change, what_if
from phasewise.specs import Parallelism, Precision, Workload

LLAMA_70B_ON_H200 = ("llama-3.1-70b", "h200-sxm", Workload(8192, 512, 16), Precision(),
                     Parallelism(tp=4))
SOL = {"cost": "sol"}  # hand calculations are at the speed of light


def _by_label(result):
    return {r.label: r for r in result.results}


def test_fp8_kv_and_half_kept_cache_each_about_double_the_batch_that_fits():
    # KV per sequence halves both ways (1 byte per element, or half the tokens held), and
    # the memory left after weights is shared among sequences, so the largest batch ~doubles.
    result = _by_label(what_if(*LLAMA_70B_ON_H200,
                               [parse_variant("kv-dtype=fp8"), parse_variant("kv-keep=0.5")], **SOL))
    base = result["baseline"].max_batch_size
    for label in ("kv-dtype=fp8", "kv-keep=0.5"):
        assert result[label].max_batch_size in (2 * base, 2 * base + 1)
        assert result[label].tpot_s < result["baseline"].tpot_s
        assert result[label].ttft_s == pytest.approx(result["baseline"].ttft_s, rel=1e-3)


def test_fp8_weights_and_activations_halve_a_compute_bound_prefill():
    # Hopper's fp8 peak is twice its bf16 peak (1,979 vs 989 TFLOP/s).
    result = _by_label(what_if(*LLAMA_70B_ON_H200, [parse_variant("weight-dtype=fp8,act-dtype=fp8")],
                               **SOL))
    variant = result["weight-dtype=fp8, act-dtype=fp8"]
    assert variant.ttft_s == pytest.approx(result["baseline"].ttft_s / 2, rel=0.02)
    assert "TTFT −50%" in variant.effects


def test_a_price_change_moves_cost_and_nothing_else():
    result = _by_label(what_if(*LLAMA_70B_ON_H200, [parse_variant("price=1.995")], **SOL))
    base, cheap = result["baseline"], result["price=1.995"]
    assert cheap.tpot_s == base.tpot_s and cheap.max_batch_size == base.max_batch_size
    # The catalog's H200 is $3.99/h: half the price, half the cost per token.
    assert cheap.usd_per_million_output_tokens == pytest.approx(base.usd_per_million_output_tokens / 2)


def test_variants_are_written_key_equals_value():
    assert parse_variant("kv-dtype=fp8, --tp=2") == {"kv-dtype": "fp8", "tp": "2"}
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_variant("kv-dtype")
    with pytest.raises(InputError, match="unknown key"):
        parse_variant("kv-dtyp=fp8")


def test_relative_change_is_against_the_baseline():
    assert relative_change(0.75, 1.0) == pytest.approx(-0.25)
    assert relative_change(None, 1.0) is None


def test_default_sweep_doubles_past_the_memory_cap():
    assert default_batches(184, None) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert default_batches(0, None) == [1, 2]


def test_batch_sweep_trades_speed_per_user_for_throughput_per_device():
    sweep = batch_sweep("llama-3.1-8b", "h100-sxm", Workload(512, 128, 1),
                        batches=[1, 8, 64, 256, 1024], **SOL)
    points = sweep.points
    intensity = [p.decode_intensity for p in points]
    assert intensity == sorted(intensity)  # rises with batch
    assert [p.tokens_per_s_per_device for p in points] == sorted(p.tokens_per_s_per_device for p in points)
    per_user = [p.tokens_per_s_per_user for p in points]
    assert per_user == sorted(per_user, reverse=True)
    # Batch 1 reads 15.01 GB of weights per token (all but the embedding table, of which it
    # reads one row) and ~575 cached tokens × 131,072 B of KV: ~221 tokens/s on 3.35 TB/s.
    assert points[0].tokens_per_s_per_user == pytest.approx(3.35e12 / (15.01e9 + 575 * 131_072),
                                                            rel=0.01)
    # Memory caps the batch: sizes past the cap do not fit, sizes below it do.
    assert all(p.fits == (p.batch_size <= sweep.max_batch_size) for p in points)


def run(*args):
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=120)


def test_estimate_what_if_document_holds_baseline_and_variants():
    result = run("estimate", "--what-if", "kv-dtype=fp8", "--what-if", "kv-keep=0.25",
                 "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ttft_s"] > 0 and doc["cost_energy"]["energy_basis"].startswith("upper bound")
    labels = [r["label"] for r in doc["what_if"]["results"]]
    assert labels == ["baseline", "kv-dtype=fp8", "kv-keep=0.25"]


def test_estimate_table_shows_cost_and_energy_as_an_upper_bound():
    result = run("estimate", "--kv-keep", "0.5", "--price", "2.0")
    assert result.returncode == 0, result.stderr
    assert "$ per million input tokens" in result.stdout and "upper bound" in result.stdout
    assert "$2.000/h" in result.stdout


@pytest.mark.parametrize("args, words", [
    (("--kv-keep", "1.5"), "--kv-keep"),
    (("--what-if", "kv-dtype"), "KEY=VALUE"),
    (("--weight-dtype", "fp8", "--act-dtype", "fp8", "--hardware", "a100-80gb-sxm"), "fp8"),
    (("--price", "-1"), "--price"),
])
def test_bad_what_if_input_is_one_line_and_exit_2(args, words):
    result = run("estimate", *args)
    assert result.returncode == 2, result.stdout
    assert result.stderr.count("\n") == 1 and words in result.stderr
