"""Speed of light and the estimate, against hand calculations."""

import pytest

import phasewise
from phasewise.catalog import load_hardware
from phasewise.cost import SpeedOfLight
from phasewise.ledger import Op, Step, build_ledger
from phasewise.specs import Parallelism, Precision, Workload

H100 = load_hardware("h100-sxm")


def test_speed_of_light_takes_the_slower_of_compute_and_memory():
    sol = SpeedOfLight()
    gemm = Op("x", "gemm", "", 1, flops=989.4e12, weights=3.35e12 / 2)
    timing = sol.op_time(gemm, H100, "bf16")
    assert timing.time_s == pytest.approx(1.0, rel=0.01) and timing.bound == "compute"
    gemv = Op("y", "gemm", "", 1, flops=1e9, weights=3.35e12)
    assert sol.op_time(gemv, H100, "bf16").bound == "memory"


def test_collectives_take_bandwidth_plus_latency_per_round():
    allreduce = Op("tp.allreduce", "communication", "", 1, 0.0, network=450e9 * 1e-3, hops=2)
    link = H100.interconnect
    expected = 1e-3 * 450e9 / link.bandwidth_bytes_per_s + 2 * link.latency_s
    assert SpeedOfLight().op_time(allreduce, H100, "bf16").time_s == pytest.approx(expected)


def test_llama_8b_decode_on_h100_is_its_bytes_over_bandwidth():
    # batch 1: the step reads ~16.06e9 bytes of weights (less the embedding table) plus the
    # KV cache; FLOPs are tiny, so TPOT is bytes / 3.35 TB/s.
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(2048, 2, 1), cost="sol")
    ledger = build_ledger(phasewise.catalog.load_model("llama-3.1-8b"), Step.decode(1, 2048))
    assert est.tpot_s == pytest.approx(ledger.memory_bytes / 3.35e12, rel=0.01)
    assert est.tpot_s == pytest.approx((15.01e9 + 2048 * 131_072) / 3.35e12, rel=0.01)


def test_llama_8b_prefill_on_h100_is_flops_over_peak():
    # Matmuls: 2 · 2048 tokens · 6.979e9 linear params + attention, at 989.4 TFLOP/s.
    # Memory-bound extras at 3.35 TB/s: the LM head's 128256·4096 bf16 weights for one
    # token; RMSNorms (65 × 2048·4096 read + written), SiLU·gate (32 × 3 × 2048·14336) and
    # the embedding rows (2048·4096 read + written), all 2 bytes per element.
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(2048, 2, 1), cost="sol")
    gemm_flops = 2 * 2048 * 6.979e9
    attention = 32 * 4 * 32 * 128 * (2048 * 2049 // 2)
    elementwise_bytes = 2 * (65 * 2 * 2048 * 4096 + 32 * 3 * 2048 * 14336 + 2 * 2048 * 4096)
    head_bytes = 2 * 128256 * 4096
    expected = (gemm_flops + attention) / 989.4e12 + (elementwise_bytes + head_bytes) / 3.35e12
    assert est.ttft_s == pytest.approx(expected, rel=0.01)
    assert est.prefill.bound == "compute" and est.decode.bound == "memory"


def test_decode_is_averaged_over_the_growing_context():
    short = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(1024, 2, 1), cost="sol")
    long = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(1024, 2049, 1), cost="sol")
    # the average decode step sits at the middle context: 1024 + 1023.5 more tokens of KV
    extra = 1023.5 * 131_072 / 3.35e12
    assert long.tpot_s - short.tpot_s == pytest.approx(extra, rel=0.01)


def test_memory_footprint_and_fit():
    est = phasewise.estimate("llama-3.1-70b", "h100-sxm", Workload(2048, 256, 1), cost="sol")
    assert not est.memory.fits
    assert est.memory.weights_bytes == pytest.approx(70.554e9 * 2, rel=0.001)
    assert est.memory.shortfall_bytes == pytest.approx(est.memory.total_bytes - 80e9)
    tp2 = phasewise.estimate("llama-3.1-70b", "h100-sxm", Workload(2048, 256, 1),
                             parallelism=Parallelism(tp=2), cost="sol")
    assert tp2.memory.weights_bytes == pytest.approx(est.memory.weights_bytes / 2, rel=0.001)


def test_largest_batch_is_free_memory_over_kv_per_sequence():
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(2048, 256, 1), cost="sol")
    m = est.memory
    free = m.capacity_bytes - m.weights_bytes - m.activations_bytes - m.reserve_bytes
    assert m.max_batch_size == int(free // (2303 * 131_072))


def test_fp8_weights_and_activations_run_at_the_fp8_peak():
    bf16 = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(8192, 2, 1), cost="sol")
    fp8 = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(8192, 2, 1),
                             Precision("fp8", "fp8", "fp8"), cost="sol")
    assert fp8.hardware.peak_flops_per_s == pytest.approx(2 * bf16.hardware.peak_flops_per_s,
                                                          rel=1e-3)
    assert fp8.ttft_s < 0.7 * bf16.ttft_s


def test_throughput_identities():
    est = phasewise.estimate("llama-3.1-8b", "h100-sxm", Workload(512, 128, 8), cost="sol")
    assert est.e2el_s == pytest.approx(est.ttft_s + 127 * est.tpot_s)
    assert est.tokens_per_s == pytest.approx(8 * 128 / est.e2el_s)
    assert est.tokens_per_s_per_user == pytest.approx(1 / est.tpot_s)


def test_detail_lists_each_calibrated_constant_with_the_level_it_came_from(phasewise_cli,
                                                                           monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # wide enough that no level name folds
    from phasewise.cost.calibrated import Calibrated
    from phasewise.cost.calibration import parameter_defs

    estimate = phasewise.estimate
    est = estimate("llama-3-8b", "rtx-4090", precision=Precision("Q4_K_M", "fp16", "fp16"),
                   detail=True, engine="llama.cpp")
    used = {c.name: c for c in est.constants}
    assert list(used) == list(parameter_defs())  # every constant, in the file's order
    resolved = Calibrated.for_device(load_hardware("rtx-4090"), engine="llama.cpp").constants
    assert all(used[n].value == getattr(resolved, n) for n in used)
    assert used["gemm_fraction"].level == "device:rtx-4090"  # its own matmul ceilings
    assert used["kernel_overhead_s"].level.startswith("engine:llama.cpp")
    # No bundled measurement names an RTX A4000: it takes its class's fitted matmul rate,
    # and its architecture's streaming rate (Ampere GA10x, as the RTX 3090 and A6000).
    bare = estimate("llama-3-8b", "rtx-a4000", detail=True, engine="vllm")
    levels = {c.name: c.level for c in bare.constants}
    assert levels["gemm_fraction"] == "class:workstation_gpu"
    assert levels["bandwidth_fraction"] == "arch:nvidia-ampere-ga10x"
    assert estimate("llama-3-8b", "rtx-4090", engine="llama.cpp").constants is None
    text = phasewise_cli("estimate", "-m", "llama-3-8b", "-H", "rtx-a4000", "--engine", "vllm",
                         "--detail").stdout
    assert "Calibrated constants" in text and "class:workstation_gpu" in text
    sol = estimate("llama-3-8b", "rtx-4090", cost="sol", detail=True)
    assert sol.constants is None  # speed of light has no fitted constants
