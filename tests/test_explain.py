"""`explain`: the phases side by side and the two turning points, against hand calculations."""

import dataclasses
import json
import subprocess
import sys

from phasewise.catalog import load_hardware, load_model
from phasewise.estimate.explain import (
    attention_overtakes_gemms_at,
    decode_compute_bound_batch,
    decode_intensity,
    explain,
    smallest_satisfying,
)
from phasewise.specs import Parallelism, Precision, Workload

LLAMA_8B = load_model("llama-3.1-8b")
H100, H200 = load_hardware("h100-sxm"), load_hardware("h200-sxm")


def test_search_finds_the_first_value_where_a_monotone_predicate_turns_true():
    assert smallest_satisfying(lambda n: n >= 1) == 1
    assert smallest_satisfying(lambda n: n >= 37) == 37
    assert smallest_satisfying(lambda n: n * n >= 10**6) == 1000
    assert smallest_satisfying(lambda n: False, limit=1024) is None


def test_attention_overtakes_llama_8b_gemms_at_53k_prompt_tokens():
    # Per layer, attention does 2·2·32 heads·128·S(S+1)/2 = 8192·S(S+1) FLOPs and the GEMMs
    # 2·S·218,103,808 (qkv 4096×6144, out 4096×4096, up 4096×28672, down 14336×4096), so
    # attention ≥ GEMMs once S + 1 ≥ 2·218,103,808 / 8192 = 53,248 (the LM head on the last
    # token adds 2·4096·128,256 FLOPs once, which moves it from S = 53,247 to 53,248).
    assert attention_overtakes_gemms_at(LLAMA_8B) == 53_248


def test_a_sliding_window_keeps_attention_from_ever_overtaking():
    sliding = dataclasses.replace(LLAMA_8B, layer_types=("sliding",) * 32, sliding_window=4096)
    assert attention_overtakes_gemms_at(sliding) is None


def test_decode_turns_compute_bound_past_the_ridge_with_an_empty_cache():
    # Weights alone would cross at batch = ridge · bytes per weight / 2 FLOPs = ridge for bf16
    # (295 on H100); activation reads and writes of each GEMM push the crossing somewhat later.
    batch = decode_compute_bound_batch(LLAMA_8B, H100, 0)
    ridge = H100.ridge_point("bf16")
    assert ridge <= batch < 1.5 * ridge
    assert decode_intensity(LLAMA_8B, batch, 0, Precision(), Parallelism()) >= ridge
    assert decode_intensity(LLAMA_8B, batch - 1, 0, Precision(), Parallelism()) < ridge


def test_more_bandwidth_at_equal_flops_turns_decode_compute_bound_at_a_smaller_batch():
    # H200: same 989 TFLOP/s as H100, 4.8 vs 3.35 TB/s → ridge 206 vs 295.
    assert decode_compute_bound_batch(LLAMA_8B, H200, 0) < decode_compute_bound_batch(LLAMA_8B, H100, 0)


def test_long_context_gqa_decode_never_turns_compute_bound():
    # At 32k cached tokens each sequence reads 32768 · 131,072 B = 4.3 GB of KV per step for
    # about 2·7.5e9 + 4·32·128·32·32768 ≈ 3.2e10 FLOPs: ~7 FLOP/byte, far below 295.
    assert decode_compute_bound_batch(LLAMA_8B, H100, 32_768) is None
    ex = explain(LLAMA_8B, H100, Workload(32_768, 2, 1), cost="sol")
    assert ex.decode_compute_bound_batch is None
    assert ex.decode_intensity_limit < 10
    assert any("never turns compute-bound" in line for line in ex.summary)


def test_explanation_names_each_phase_its_bound_and_latency():
    ex = explain("llama-3.1-8b", "h100-sxm", Workload(2048, 256, 1), cost="sol")
    assert ex.prefill.bound == "compute" and ex.prefill.sets == "TTFT"
    assert ex.decode.bound == "memory" and ex.decode.sets == "TPOT"
    assert "GEMM" in ex.prefill.operation and "GEMV" in ex.decode.operation
    assert ex.prefill.arithmetic_intensity > ex.prefill.ridge_point > ex.decode.arithmetic_intensity
    assert 0 < ex.decode.kv_bytes_share < 1
    assert ex.attention_overtakes_gemms_at == 53_248


def run(*args):
    return subprocess.run([sys.executable, "-m", "phasewise", *args], capture_output=True,
                          text=True, timeout=120)


def test_explain_command_prints_the_table_and_the_turning_points():
    result = run("explain", "--model", "llama-3.1-8b", "--hardware", "h100-sxm")
    assert result.returncode == 0, result.stderr
    for words in ("prefill", "decode", "GEMM", "GEMV", "TTFT", "TPOT", "ridge", "53,248",
                  "compute-bound"):
        assert words in result.stdout


def test_explain_json_carries_the_batch_sweep(tmp_path):
    result = run("explain", "--batch-sweep", "--batches", "1,64", "--plot",
                 str(tmp_path / "sweep"), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    assert [p["batch_size"] for p in doc["batch_sweep"]["points"]] == [1, 64]
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert "<svg" in (tmp_path / "sweep.html").read_text()


def test_explain_refuses_a_comma_list_with_one_line():
    result = run("explain", "--batch-size", "1,8")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--batch-size" in result.stderr
