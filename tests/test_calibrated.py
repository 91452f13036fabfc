"""The calibrated cost model: its formula by hand, its profiles as data, and its fit."""

import dataclasses
import math
import tomllib

import pytest

from phasewise import estimate
from phasewise.catalog import hardware_names, load_hardware, load_model
from phasewise.catalog.software_text import engine_from_software
from phasewise.cost.calibrated import Calibrated, op_features, priced_parts, split_prefill
from phasewise.cost.calibration import (
    Constants,
    Profile,
    constants_for,
    level_keys,
    load_profile,
    parameter_defs,
    profile_from_document,
    profile_to_toml,
    resolve_engine,
    traits_for,
)
from phasewise.cost.fit import Observation, _Problem, fit_profile
from phasewise.cost.registry import cost_model_for
from phasewise.errors import InputError
from phasewise.ledger import Op, Step, build_ledger
from phasewise.specs import Parallelism, Precision, Workload

ROUND = dict(gemm_fraction=0.8, bandwidth_fraction=0.9, bytes_half=1e5, gemm_efficiency=0.5,
             gemm_intensity_half=0.25, attention_efficiency=0.4, attention_bandwidth=1.0,
             bandwidth_efficiency=0.5,
             dequant_bandwidth=0.8, dequant_compute=0.5, matvec_alu_ops=4.0,
             kernel_overhead_s=1e-5,
             step_overhead_s=1e-4, parallel_step_overhead_s=5e-4, link_latency_factor=2.0,
             link_efficiency=0.5)


def _stated(engine, text, backend=""):
    """``engine`` as a measurement row describing its software as ``text`` states it."""
    return resolve_engine(engine_from_software(text, backend, engine.fitted_name))


def test_gemm_time_by_hand():
    """A 4096-token GEMM of 4096×4096 bf16 on an H100 SXM (989.4 TFLOP/s, 3.35 TB/s)."""
    h100 = load_hardware("h100-sxm")
    m = n = k = 4096
    op = Op("mlp.up", "gemm", "x", 1, 2.0 * m * n * k, weights=n * k * 2.0,
            activations=(m * k + m * n) * 2.0, m=m, n=n, k=k)
    c = Constants(**ROUND)
    compute_s, memory_s, serial_s, network_s, overhead_s = priced_parts(
        op_features(op, h100, "bf16"), c)
    ridge = 989.4e12 * 0.8 / (3.35e12 * 0.9)  # the ridge the device reaches (best rates)
    shape = m / (m + 0.25 * ridge)  # a bf16 GEMM does m FLOPs per weight byte
    assert compute_s == pytest.approx(2 * m * n * k / (989.4e12 * 0.8 * 0.5 * shape), rel=1e-9)
    assert memory_s == pytest.approx((3 * 4096 * 4096 * 2 + 1e5) / (3.35e12 * 0.9 * 0.5), rel=1e-9)
    assert serial_s == network_s == 0.0 and overhead_s == pytest.approx(1e-5)
    timing = Calibrated(c).op_time(op, h100, "bf16")
    assert timing.time_s == pytest.approx(max(compute_s, memory_s) + 1e-5)
    assert timing.bound == "compute"


def test_block_quantized_weights_pay_the_dequant_factors_and_native_fp8_does_not():
    rtx = load_hardware("rtx-4090")
    model = load_model("llama-3-8b")
    c = Constants(**ROUND)
    gguf = build_ledger(model, Step.decode(1, 10), Precision("Q4_K_M", "fp16", "fp16"))
    fp16 = build_ledger(model, Step.decode(1, 10), Precision("fp16", "fp16", "fp16"))
    up_q4 = next(op for op in gguf.ops if op.name == "mlp.up")
    up_16 = next(op for op in fp16.ops if op.name == "mlp.up")
    q4_memory = priced_parts(op_features(up_q4, rtx, "fp16"), c).memory_s
    f16_memory = priced_parts(op_features(up_16, rtx, "fp16"), c).memory_s
    # the same kernel, fewer bytes, at 0.8 of the bandwidth
    bw = 1008e9 * 0.9 * 0.5
    assert q4_memory == pytest.approx((up_q4.memory_bytes + up_q4.calls * 1e5) / (bw * 0.8))
    assert f16_memory == pytest.approx((up_16.memory_bytes + up_16.calls * 1e5) / bw)
    h100 = load_hardware("h100-sxm")
    fp8 = build_ledger(model, Step.decode(1, 10), Precision("fp8", "fp8", "fp16"))
    up_8 = next(op for op in fp8.ops if op.name == "mlp.up")
    assert op_features(up_8, h100, "fp8").dequantized == 0.0
    assert op_features(up_q4, rtx, "fp16").dequantized == 1.0


def test_one_token_gemms_are_bandwidth_bound_in_every_weight_format_and_device():
    """Below the ridge point a GEMM is limited by the bytes it reads, whatever the device's
    peak and however few bits its weights take (the shape term counts FLOPs per weight byte,
    and its half point sits at the ridge the device reaches, so a one-token GEMM's compute
    term is gemm_intensity_half x its weight bytes at the achievable streaming rate, over
    the engine's GEMM efficiency: 0.3 / (0.5 x 0.5) = 1.2 against 1 / (0.5 x 0.8) = 2.5
    for a block-quantized weight here, 0.3 / 0.5 = 0.6 against 2 for a 16-bit one)."""
    model = load_model("llama-3-8b")
    c = Constants(**{**ROUND, "gemm_intensity_half": 0.3})
    for fmt in ("fp16", "Q4_K_M", "Q8_0"):
        ledger = build_ledger(model, Step.decode(1, 10), Precision(fmt, "fp16", "fp16"))
        up = next(op for op in ledger.ops if op.name == "mlp.up")
        for device in ("m1", "rtx-4090", "h100-sxm"):
            parts = priced_parts(op_features(up, load_hardware(device), "fp16"), c)
            compute_s, memory_s = parts.compute_s, parts.memory_s
            assert compute_s < memory_s, (fmt, device)


def _prefill_op(name, precision, tokens=512, model="llama-3-8b"):
    ledger = build_ledger(load_model(model), Step.prefill(tokens), precision)
    return next(op for op in ledger.ops if op.name == name)


def test_llama_cpp_on_geforce_runs_fp16_gemms_at_the_fp16_accumulate_rate():
    """ggml's CUDA backend multiplies in fp16 with CUBLAS_COMPUTE_16F; a GeForce RTX 4090
    does that at 330.3 dense TFLOP/s, twice the sheet's fp32-accumulate 165.2."""
    rtx, c = load_hardware("rtx-4090"), Constants(**ROUND)
    up = _prefill_op("mlp.up", Precision("fp16", "fp16", "fp16"))
    llama = Calibrated.for_device(rtx, engine="llama.cpp").traits
    generic = Calibrated.for_device(rtx).traits
    assert (llama.gemm_peak_factor, generic.gemm_peak_factor) == (2.0, 1.0)
    ridge = 165.2e12 * 2.0 * 0.8 / (1008e9 * 0.9)  # reached at the fp16-accumulate rate
    shape = 512 / (512 + 0.25 * ridge)  # fp16 weights: 512 FLOPs per weight byte at m = 512
    expected = up.flops / (165.2e12 * 2.0 * 0.8 * 0.5 * shape)
    assert priced_parts(op_features(up, rtx, "fp16", llama), c).compute_s == \
        pytest.approx(expected, rel=1e-9)
    # a data-centre part runs both accumulations at one rate
    assert Calibrated.for_device(load_hardware("a100-80gb-sxm"),
                                 engine="llama.cpp").traits.gemm_peak_factor == 1.0


def test_llama_cpp_cuda_prefill_dequantized_weights_to_fp16_before_mid_2024():
    """Before llama.cpp PR #8075, over 32 tokens ggml-cuda converted Q4_K_M weights (4.89
    bits) to an fp16 buffer in a kernel of its own, then multiplied the fp16 copy; Metal
    dequantizes inside the GEMM, and so do today's MMQ kernels."""
    c = Constants(**ROUND)
    q4 = Precision("Q4_K_M", "fp16", "fp16")
    up = _prefill_op("mlp.up", q4)  # 32 calls of 4096 x 28672 weights
    weights = 4096 * 28672 * 32
    assert up.weights == pytest.approx(weights * 4.89 / 8)
    rtx = load_hardware("rtx-4090")
    traits = Calibrated.for_device(rtx, engine="llama.cpp+cublas-fp16").traits
    f = op_features(up, rtx, "fp16", traits)
    assert f.dequantized == 0.0 and f.kernels == 64
    assert f.serial_bytes == pytest.approx(weights * (4.89 / 8 + 2))  # read Q4_K_M, write fp16
    assert f.memory_bytes == pytest.approx(up.activations + 2 * weights)  # the GEMM reads fp16
    streaming = 1008e9 * 0.9 * 0.5
    assert priced_parts(f, c).serial_s == pytest.approx(weights * (4.89 / 8 + 2) / streaming)
    metal = op_features(up, load_hardware("m2-ultra"), "fp16",
                        Calibrated.for_device(load_hardware("m2-ultra"), engine="llama.cpp").traits)
    assert metal.dequantized == 1.0 and metal.serial_bytes == 0.0
    small = op_features(_prefill_op("mlp.up", q4, tokens=32), rtx, "fp16", traits)
    assert small.dequantized == 1.0 and small.serial_bytes == 0.0  # MMQ up to 32 tokens
    mmq = Calibrated.for_device(rtx, engine="llama.cpp").traits
    assert op_features(up, rtx, "fp16", mmq).dequantized == 1.0


def test_a_description_of_the_software_selects_the_engine_variant():
    llama = resolve_engine("llama.cpp")
    cases = {("llama.cpp (May 2024) llama-bench, CUDA", "cuda"):
                 "llama.cpp+cublas-fp16+int8-mxfp4",
             ("llama.cpp llama-bench build 6db2b41a (1988), CUDA backend", "cuda"):
                 "llama.cpp+cublas-fp16+int8-mxfp4",
             ("llama.cpp llama-bench build 233d773d0 (6413), CUDA backend, -fa 1", "cuda"):
                 "llama.cpp+flash-attn+int8-mxfp4",
             ("llama.cpp llama-bench build 11fb327bf (7941), CUDA backend, -fa 1", "cuda"):
                 "llama.cpp+flash-attn",
             ("llama.cpp llama-server, CUDA backend (-fa 1 -np 32)", "cuda"):
                 "llama.cpp+flash-attn",
             ("llama.cpp llama-bench (master, 2023-09-09), Metal backend", "metal"):
                 "llama.cpp+metal-mm-small-batch",
             ("llama.cpp llama-bench build d5cb8684 (3891), ROCm/HIP backend", "hip"):
                 "llama.cpp"}
    for (text, backend), name in cases.items():
        assert _stated(llama, text, backend).name == name, text
    chosen = resolve_engine("llama.cpp+flash-attn")
    assert chosen.fitted_name == "llama.cpp" and chosen.applied == ("flash-attn",)
    with pytest.raises(InputError, match="cublas-fp16"):
        resolve_engine("llama.cpp+fast")


def test_mxfp4_experts_run_on_blackwell_fp4_tensor_cores_in_builds_after_pr_17906():
    """llama.cpp PR #17906 (merged 2025-12-24, b7536) multiplies MXFP4 weights in MMQ with
    the block-scaled m16n8k64 FP4 MMA of CC 12.x Blackwell, "2x throughput compared to int8
    tensor cores": the DGX Spark's sheet has 500 dense FP4 TFLOPS against 250 INT8, the RTX
    5090's 1676 against 838. Older builds, other devices, other formats and the
    matrix-vector kernels of a few tokens are priced as before."""
    llama = resolve_engine("llama.cpp")
    new = _stated(llama, "llama-bench build 11fb327bf (7941), CUDA backend", "cuda")
    old = _stated(llama, "llama-bench build 2f68ce7cf (6918), CUDA backend", "cuda")
    assert (new.name, old.name) == ("llama.cpp", "llama.cpp+int8-mxfp4")
    assert _stated(llama, "build (7535)", "cuda").name == "llama.cpp+int8-mxfp4"
    assert _stated(llama, "build (7536)", "cuda").name == "llama.cpp"
    mxfp4, q8 = Precision("MXFP4 MoE", "fp16", "fp16"), Precision("Q8_0", "fp16", "fp16")
    experts = _prefill_op("moe.experts", mxfp4, tokens=2048, model="gpt-oss-120b")
    assert experts.block_format == "MXFP4"
    assert _prefill_op("moe.experts", q8, tokens=2048, model="qwen3-30b-a3b").block_format == ""
    assert _prefill_op("attn.qkv", mxfp4, tokens=2048, model="gpt-oss-120b").block_format == ""

    def factor(device, engine, op):
        hardware = load_hardware(device)
        traits = Calibrated.for_device(hardware, engine=engine).traits
        return op_features(op, hardware, "fp16", traits).peak_factor

    assert factor("dgx-spark", new, experts) == pytest.approx(500.0 / 250.0)
    assert factor("dgx-spark", old, experts) == 1.0
    # a GeForce RTX 5090 also accumulates fp16 at twice its sheet's rate ([architecture])
    assert factor("rtx-5090", new, experts) == pytest.approx(2.0 * 1676.0 / 838.0)
    assert factor("rtx-4090", new, experts) == factor("rtx-4090", old, experts) == 2.0
    assert factor("b200", new, experts) == 1.0  # sm_100: llama.cpp builds no FP4 path for it
    one_token = next(op for op in build_ledger(load_model("gpt-oss-120b"), Step.decode(1, 512),
                                               mxfp4).ops if op.name == "moe.experts")
    assert one_token.block_format == "MXFP4" and factor("dgx-spark", new, one_token) == 1.0
    assert factor("dgx-spark", new, _prefill_op("moe.experts", q8, tokens=2048,
                                                model="qwen3-30b-a3b")) == 1.0
    assert factor("dgx-spark", resolve_engine("vllm"), experts) == 1.0


def test_unfused_attention_moves_every_score_through_memory_at_the_gemm_rate():
    """llama-bench runs without flash attention: kq spans every cell of the KV cache and the
    causal rest is masked, so a 512-token prompt computes 512 x 512 scores per head and
    layer (the ledger counts the 512 · 513 / 2 causal pairs); each is written, soft-maxed
    and read back in F32 (16 bytes); on CUDA the fp16 staging copies of batched cuBLAS add
    8 (24 bytes). Its two matmuls run at the engine's GEMM rate over all those scores;
    fused engines move no scores and run at the attention rate over the causal pairs."""
    score = _prefill_op("attn.score", Precision("fp16", "fp16", "fp16"))
    causal = 32 * 32 * (512 * 513 / 2)  # layers x heads x causal pairs
    scores = 32 * 32 * 512 * 512  # layers x heads x (queries x cache cells)
    assert score.flops == pytest.approx(4 * 128 * causal)
    for device, engine, per_score in (("m2-ultra", "llama.cpp", 16), ("rtx-4090", "llama.cpp", 24),
                                      ("rtx-4090", "vllm", 0), ("rtx-4090", None, 0)):
        hardware = load_hardware(device)
        traits = Calibrated.for_device(hardware, engine=engine).traits
        assert op_features(score, hardware, "fp16", traits).serial_bytes == \
            pytest.approx(per_score * scores), (device, engine)
    m2, c = load_hardware("m2-ultra"), Constants(**ROUND)
    unfused = op_features(score, m2, "fp16", Calibrated.for_device(m2, engine="llama.cpp").traits)
    fused = op_features(score, m2, "fp16", Calibrated.for_device(m2, engine="vllm").traits)
    assert priced_parts(unfused, c).compute_s == pytest.approx(4 * 128 * scores
                                                               / (27.2e12 * 0.8 * 0.5))
    assert priced_parts(fused, c).compute_s == pytest.approx(score.flops / (27.2e12 * 0.8 * 0.4))
    assert priced_parts(unfused, c).serial_s == pytest.approx(16 * scores / (800e9 * 0.9 * 0.5))


def test_unfused_attention_over_a_unified_cache_scores_every_sequence_s_cells():
    """The ledger's attention op carries the KV cells its pass holds: a 512-token micro-batch
    after 1,536 cached tokens holds 2,048 (scores 512 x 2048 where the causal pairs are
    512 x 1536 + 512 · 513 / 2); batched decode of 8 sequences at 512 cached tokens holds
    8 x 513 cells, and each new token is scored against all of them (llama.cpp's unified
    cache masks the other sequences'), 8 times the causal count; one sequence's decode
    scores exactly its pairs."""
    model, rtx = load_model("llama-3-8b"), load_hardware("rtx-4090")
    llama = Calibrated.for_device(rtx, engine="llama.cpp").traits
    precision = Precision("Q4_K_M", "fp16", "fp16")
    last_chunk = split_prefill(Step.prefill(2048), 512)[3]  # 512 new after 1,536 cached
    cases = ((last_chunk, 512 * 2048, 512 * 1536 + 512 * 513 / 2),
             (Step.decode(8, 512), 8 * 8 * 513, 8 * 513),
             (Step.decode(1, 512), 513, 513))
    for step, cells, causal in cases:
        score = next(op for op in build_ledger(model, step, precision).ops
                     if op.name == "attn.score")
        assert score.flops == pytest.approx(4 * 128 * 32 * 32 * causal)
        f = op_features(score, rtx, "fp16", llama)
        assert f.serial_bytes == pytest.approx(24 * 32 * 32 * cells)
    # a sliding-window layer's cache holds its window (Gemma 3 4B: 1,024) and the new token
    gemma = build_ledger(load_model("gemma-3-4b"), Step.decode(1, 4096), precision).ops
    assert sorted(op.keys for op in gemma if op.name == "attn.score") == [1024 + 1, 4096 + 1]


def test_a_long_prompt_is_split_into_micro_batches_that_sum_to_the_whole():
    chunks = split_prefill(Step.prefill(4096), 512)
    assert len(chunks) == 8
    assert [c.groups[0].cached_tokens for c in chunks] == [512 * i for i in range(8)]
    assert sum(c.new_tokens for c in chunks) == 4096
    assert [c.logit_tokens for c in chunks] == [0] * 7 + [1]
    assert split_prefill(Step.prefill(512), 512) == (Step.prefill(512),)
    assert split_prefill(Step.decode(4, 100), 512) == (Step.decode(4, 100),)


def test_llama_cpp_prefill_costs_the_sum_of_its_micro_batches():
    model, rtx = load_model("llama-3-8b"), load_hardware("rtx-4090")
    precision = Precision("Q4_K_M", "fp16", "fp16")
    cost = Calibrated.for_device(rtx, engine="llama.cpp")
    assert cost.traits.prefill_ubatch_tokens == 512
    est = estimate(model, rtx, Workload(2048, 1, 1), precision, cost=cost)
    chunks = [build_ledger(model, s, precision) for s in split_prefill(Step.prefill(2048), 512)]
    assert est.ttft_s == pytest.approx(sum(cost.step_time(c, rtx).total.time_s for c in chunks))


def test_engines_resolve_by_alias_and_unknown_ones_list_the_known():
    assert resolve_engine("TensorRT-LLM").name == "trtllm"
    assert resolve_engine(None).name == "generic"
    with pytest.raises(InputError, match="llama.cpp"):
        resolve_engine("llamacp")
    with pytest.raises(InputError, match="calibrated"):
        cost_model_for("calibrate", load_hardware("h100-sxm"))


@pytest.mark.parametrize("written, engine", [
    ("mlx-lm", "mlx"), ("text-generation-inference", "tgi"), ("ExLlamaV2", "exllama"),
    ("TurboMind", "lmdeploy"), ("DeepSpeed-FastGen", "deepspeed"),
])
def test_engines_without_measurements_are_named_and_priced_at_the_global_level(written,
                                                                                engine):
    chosen = resolve_engine(written)
    assert chosen.name == engine
    profile = load_profile()
    assert engine not in {key.removeprefix("engine:").split("/")[0]
                          for key in profile.values if key.startswith("engine:")}
    for device in ("h100-sxm", "m2-ultra"):
        hardware = load_hardware(device)
        assert constants_for(profile, hardware, chosen) == \
            constants_for(profile, hardware, resolve_engine("generic"))


def test_the_most_specific_level_wins_then_its_parents_then_the_prior():
    profile = Profile("t", values={"global": {"gemm_fraction": 0.5, "kernel_overhead_s": 3e-6},
                                   "class:datacenter_gpu": {"gemm_fraction": 0.6},
                                   "device:h100-sxm": {"gemm_fraction": 0.7},
                                   "engine:vllm": {"kernel_overhead_s": 2e-6},
                                   "engine:vllm/class:apple_gpu": {"kernel_overhead_s": 9e-6}})
    vllm, generic = resolve_engine("vllm"), resolve_engine("generic")
    h100, a100, m2 = (load_hardware(n) for n in ("h100-sxm", "a100-80gb-sxm", "m2-ultra"))
    assert constants_for(profile, h100, generic).gemm_fraction == 0.7
    assert constants_for(profile, a100, generic).gemm_fraction == 0.6
    assert constants_for(profile, m2, generic).gemm_fraction == 0.5
    assert constants_for(profile, h100, vllm).kernel_overhead_s == 2e-6
    assert constants_for(profile, m2, vllm).kernel_overhead_s == 9e-6
    assert constants_for(profile, h100, generic).kernel_overhead_s == 3e-6
    prior = parameter_defs()["bandwidth_fraction"].prior
    assert constants_for(profile, h100, generic).bandwidth_fraction == prior


def test_a_profile_survives_being_written_and_read_back():
    profile = load_profile()
    again = profile_from_document(tomllib.loads(profile_to_toml(profile)), "x")
    for key, values in profile.values.items():
        for name, value in values.items():
            assert again.values[key][name] == pytest.approx(value, rel=1e-5)


def test_every_bundled_constant_says_what_it_was_fitted_to():
    profile = load_profile()
    assert profile.fit["rows"] > 100 and profile.fit["sources"]
    for key, records in profile.records.items():
        for name, record in records.items():
            assert {"rows", "sources", "rms_log_residual"} <= set(record), (key, name)
            assert record["rows"] == 0 or record["sources"], (key, name)


def test_a_calibration_file_with_an_unknown_constant_is_refused_by_name(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[global]\ngemm_fractoin = { value = 0.7 }\n")
    with pytest.raises(InputError, match="gemm_fractoin.*gemm_fraction"):
        load_profile(str(path))


# --- the fit -----------------------------------------------------------------------------

TRUE = {"gemm_fraction": 0.62, "bandwidth_fraction": 0.83, "gemm_efficiency": 0.7,
        "bandwidth_efficiency": 0.9, "kernel_overhead_s": 8e-6, "step_overhead_s": 6e-4}


def _synthetic(hardware_names, engine, weights="bf16", true=TRUE):
    """Measurements made by a calibrated model with the TRUE constants at class level."""
    truth = Profile("truth", values={"global": dict(true)})
    observations = []
    cases = [("llama-3-8b", Step.prefill(n)) for n in (256, 1024, 4096)] + \
            [("llama-3-8b", Step.decode(b, 512)) for b in (1, 8, 64)] + \
            [("qwen2.5-0.5b", Step.decode(1, 128)), ("qwen2.5-0.5b", Step.prefill(2048)),
             ("llama-2-13b", Step.decode(1, 128)), ("llama-2-13b", Step.prefill(512))]
    for name in hardware_names:
        device = load_hardware(name)
        cost = Calibrated.for_device(device, engine=engine, calibration=truth)
        for i, (model, step) in enumerate(cases):
            ledger = build_ledger(load_model(model), step, Precision(weights, "bf16", "bf16"))
            seconds = cost.step_time(ledger, device).total.time_s
            observations.append(Observation(f"{name}-{i}", "synthetic", device,
                                            resolve_engine(engine), seconds, ((1.0, ledger),)))
    return observations


def test_the_fit_recovers_known_efficiencies_from_synthetic_measurements():
    observations = _synthetic(["h100-sxm", "a100-80gb-sxm", "l40s"], "vllm")
    result = fit_profile(observations)
    assert max(abs(r) for r in result.log_residuals) < 0.02
    h100 = load_hardware("h100-sxm")
    got = Calibrated.for_device(h100, engine="vllm", calibration=result.profile).constants
    # a device's ceiling and the engine's share of it act as one product
    assert got.gemm_fraction * got.gemm_efficiency == pytest.approx(0.62 * 0.7, rel=0.05)
    assert got.bandwidth_fraction * got.bandwidth_efficiency == pytest.approx(0.83 * 0.9, rel=0.05)
    # fixed costs (per step, per kernel, per small transfer) trade off against each other;
    # what they add up to is pinned: a step the fit never saw comes out right
    truth = Calibrated.for_device(h100, engine="vllm",
                                  calibration=Profile("truth", values={"global": dict(TRUE)}))
    fitted = Calibrated(got)
    for step in (Step.decode(1, 2048), Step.decode(16, 64), Step.prefill(300)):
        ledger = build_ledger(load_model("llama-3.1-8b"), step, Precision("bf16", "bf16", "bf16"))
        assert fitted.step_time(ledger, h100).total.time_s == pytest.approx(
            truth.step_time(ledger, h100).total.time_s, rel=0.03)


def test_the_fit_recovers_the_matrix_vector_kernels_operations_per_flop():
    """llama.cpp's batch-1 to 8-token GEMMs on block-quantized weights run on the vector
    ALUs; on an A100 (19.5 TFLOP/s fp32 against 2.04 TB/s) 6 operations per FLOP outlast
    the Q8_0 weights' streaming at 8 tokens a step (8 x 2 x 6 / 19.5e12 = 4.9 ps a weight
    against 1.06 bytes at under 2 TB/s, < 0.8 ps), so rows made with 6 give 6 back; the
    fit starts from its prior, 5."""
    true = {**TRUE, "matvec_alu_ops": 6.0}
    result = fit_profile(_synthetic(["a100-80gb-sxm", "rtx-4090"], "llama.cpp", "Q8_0", true))
    assert max(abs(r) for r in result.log_residuals) < 0.02
    a100 = load_hardware("a100-80gb-sxm")
    got = Calibrated.for_device(a100, engine="llama.cpp", calibration=result.profile)
    assert got.constants.matvec_alu_ops == pytest.approx(6.0, rel=0.05)


def test_the_fit_restarts_to_reach_matrix_vector_kernels_its_prior_leaves_memory_bound():
    """At the prior, 5 operations per FLOP, an A100's one-token Q8_0 products are bound by
    their bytes (2 x 5 / 19.5e12 = 0.51 ps a weight against 1.06 bytes at about 1.5 TB/s,
    0.7 ps), so the count gets no gradient from them; rows made with 20 (2.05 ps a weight)
    can only be explained by it from a start where the ALU side binds. Without the
    restart the fit reads them as slow block-format streaming instead."""
    true = {**TRUE, "matvec_alu_ops": 20.0}
    truth = Profile("truth", values={"global": dict(true)})
    device = load_hardware("a100-80gb-sxm")
    cost = Calibrated.for_device(device, engine="llama.cpp", calibration=truth)
    observations = []
    for weights in ("Q8_0", "bf16"):
        for model in ("llama-3-8b", "qwen2.5-0.5b", "llama-2-13b"):
            for context in (128, 2048):
                ledger = build_ledger(load_model(model), Step.decode(1, context),
                                      Precision(weights, "bf16", "bf16"))
                observations.append(Observation(
                    f"{weights}-{model}-{context}", "synthetic", device,
                    resolve_engine("llama.cpp"), cost.step_time(ledger, device).total.time_s,
                    ((1.0, ledger),)))
    result = fit_profile(observations)
    assert max(abs(r) for r in result.log_residuals) < 0.02
    got = Calibrated.for_device(device, engine="llama.cpp", calibration=result.profile)
    assert got.constants.matvec_alu_ops == pytest.approx(20.0, rel=0.1)


def test_a_microbenchmark_sets_the_device_ceiling_and_phase_rows_the_engine_share():
    """A best-matmul row says the device reaches 0.62 of its peak; the phase rows then say
    how much of that the engine gets (0.7), not a trade between the two."""
    h100 = load_hardware("h100-sxm")
    ceiling = Observation("mamf", "micro", h100, None, 1.0 / (989.4e12 * 0.62), ceiling="gemm",
                          math_format="bf16")
    result = fit_profile(_synthetic(["h100-sxm"], "vllm") + [ceiling])
    got = Calibrated.for_device(h100, engine="vllm", calibration=result.profile).constants
    assert got.gemm_fraction == pytest.approx(0.62, rel=0.02)
    assert got.gemm_efficiency == pytest.approx(0.7, rel=0.05)


def test_a_few_rows_far_off_the_model_do_not_drag_the_rest():
    """The fit's Huber loss: two rows measured 4x slower than the model that made the
    others (a setting it does not describe) stay visibly off (a squared loss splits the
    difference: they end ~2.3x off and drag other rows 1.8x off) and the rest stay within
    30%."""
    observations = _synthetic(["h100-sxm", "a100-80gb-sxm"], "vllm")
    slowed = [dataclasses.replace(o, measured_s=4 * o.measured_s) for o in observations[:2]]
    result = fit_profile(slowed + observations[2:])
    assert max(abs(result.log_residuals[2:])) < math.log(1.3)
    assert min(abs(result.log_residuals[:2])) > math.log(2.5)


def test_engines_with_their_own_all_reduce_pay_its_rounds_on_a_peer_link():
    """vLLM's one-stage custom all-reduce: start barrier, one read of every peer, end
    barrier, 3 rounds per call whatever the device count; NCCL's tree (the ledger): 2·log2 8
    = 6. On PCIe-only machines vLLM falls back to NCCL."""
    ledger = build_ledger(load_model("llama-2-70b"), Step.decode(1, 512),
                          Precision("fp16", "fp16", "fp16"), Parallelism(8))
    allreduce = next(op for op in ledger.ops if op.name == "tp.allreduce")
    assert allreduce.hops == 6 * allreduce.calls
    for device, engine, rounds in (("h100-sxm", "vllm", 3), ("h100-sxm", "trtllm", 3),
                                   ("h100-sxm", None, 6), ("l40s", "vllm", 6)):
        hardware = load_hardware(device)
        traits = Calibrated.for_device(hardware, engine=engine).traits
        assert op_features(allreduce, hardware, "fp16", traits).hops == \
            rounds * allreduce.calls, (device, engine)


def test_a_step_on_several_devices_pays_the_parallel_step_overhead_once():
    """The engine's workers synchronise once a forward pass: a TP2 step adds
    parallel_step_overhead_s (5e-4 here) to the step overhead (1e-4); a one-device step not."""
    h100, model = load_hardware("h100-sxm"), load_model("llama-3-8b")
    cost = Calibrated(Constants(**ROUND))
    precision = Precision("bf16", "bf16", "bf16")
    for tp, fixed in ((1, 1e-4), (2, 1e-4 + 5e-4)):
        ledger = build_ledger(model, Step.decode(1, 100), precision, Parallelism(tp))
        timing = cost.step_time(ledger, h100)
        ops = sum(t.time_s for _, t in timing.ops)
        assert timing.total.time_s - ops == pytest.approx(fixed), tp


def test_a_device_no_measurement_mentions_gets_its_class_values():
    result = fit_profile(_synthetic(["h100-sxm", "a100-80gb-sxm"], "vllm"))
    profile = result.profile
    unseen = load_hardware("h200-sxm")  # datacenter_gpu, in no observation
    assert "device:h200-sxm" not in profile.values
    got = Calibrated.for_device(unseen, engine="vllm", calibration=profile).constants
    assert got.gemm_fraction == profile.values["class:datacenter_gpu"]["gemm_fraction"]
    # its streaming rate: Hopper's, which the H100's rows inform
    assert got.bandwidth_fraction == profile.values["arch:nvidia-hopper"]["bandwidth_fraction"]
    lone = load_hardware("gh200")  # no architecture group (LPDDR5X beside the GPU): the class
    got = Calibrated.for_device(lone, engine="vllm", calibration=profile).constants
    assert got.bandwidth_fraction == profile.values["class:datacenter_gpu"]["bandwidth_fraction"]
    apple = load_hardware("m2-ultra")  # a class with no observation: the global values
    got = Calibrated.for_device(apple, engine="vllm", calibration=profile).constants
    assert got.bandwidth_fraction == profile.values["global"]["bandwidth_fraction"]
    # an engine with no observations: the pooled (global) values
    got = Calibrated.for_device(unseen, engine="sglang", calibration=profile).constants
    assert got.kernel_overhead_s == profile.values["global"]["kernel_overhead_s"]


def test_calibrated_is_never_faster_than_the_speed_of_light():
    for hardware in ("h100-sxm", "rtx-4090", "m2-ultra"):
        for workload in (Workload(128, 2, 1), Workload(4096, 64, 32)):
            est = estimate("llama-3-8b", hardware, workload, Precision("fp16", "fp16", "fp16"),
                           cost="calibrated")
            assert est.prefill.time_s >= est.prefill.sol_time_s
            assert est.decode.time_s >= est.decode.sol_time_s


def test_a_stated_micro_batch_replaces_llama_cpp_default():
    # llama-bench's -ub / llama-batched-bench's n_ubatch set the prompt micro-batch; the
    # engine's default (512, llama.cpp PR #6017) holds otherwise, and engines that run a
    # prompt whole are not split by it.
    llama = resolve_engine("llama.cpp")
    assert llama.prefill_ubatch_tokens == 512
    assert _stated(llama, "llama-bench build 2f68ce7cf, -ub 2048").prefill_ubatch_tokens == 2048
    assert _stated(llama, "n_batch 2048, n_ubatch 1024").prefill_ubatch_tokens == 1024
    assert _stated(resolve_engine("vllm"), "-ub 2048").prefill_ubatch_tokens == 0
    stated = _stated(llama, "llama-bench, -fa 1, -ub 2048")
    assert stated.name == "llama.cpp+flash-attn+ub2048" and resolve_engine(stated.name) == stated


def test_decode_attention_streams_the_kv_cache_at_its_own_share_of_the_bandwidth():
    """The attention op's memory time divides by attention_bandwidth as well; a GEMM's does
    not (one token after 2,048 of Llama-3-8B in bf16 on an H100)."""
    h100 = load_hardware("h100-sxm")
    ledger = build_ledger(load_model("llama-3-8b"), Step.decode(1, 2048),
                          Precision("bf16", "bf16", "bf16"))
    attention = next(op for op in ledger.ops if op.kind == "attention")
    up = next(op for op in ledger.ops if op.name == "mlp.up")
    half = Constants(**{**ROUND, "attention_bandwidth": 0.5})
    whole = Constants(**ROUND)
    stream = 3.35e12 * 0.9 * 0.5  # bandwidth · fraction · efficiency
    expected = (attention.memory_bytes + attention.calls * 1e5) / stream
    assert priced_parts(op_features(attention, h100, "bf16"), whole).memory_s == \
        pytest.approx(expected)
    assert priced_parts(op_features(attention, h100, "bf16"), half).memory_s == \
        pytest.approx(2 * expected)
    assert priced_parts(op_features(up, h100, "bf16"), half).memory_s == \
        priced_parts(op_features(up, h100, "bf16"), whole).memory_s


def test_llama_cpp_picks_its_moe_tile_against_the_whole_micro_batch():
    """mul_mat_q_case: widths 8..128 (steps of 16 from 48), the first with the fewest
    tiles for all the pass's tokens."""
    from phasewise.lower.llama_cpp import moe_tile_padding, moe_tile_width

    assert [moe_tile_width(t, 128) for t in (8, 16, 32, 50, 128, 200, 512)] == \
        [8, 16, 32, 64, 128, 112, 128]
    # 512 tokens, 8 of 128 experts each: 32 tokens an expert, one 128-wide tile each (the
    # chance of more than 128 is nil; of none, e^-32): 128 columns for 32, four times over
    assert moe_tile_padding(512, 32.0, 128) == pytest.approx(4.0, rel=1e-9)
    # a 2048-token pass: 128 an expert on average, Poisson; ⌈x/128⌉ is 1 for x ≤ 128 and 2
    # above (x > 256 is nil): 1 + P(X > 128) = 1 + 0.4765 by the Poisson tail
    assert moe_tile_padding(2048, 128.0, 128) == pytest.approx(1.4765, abs=2e-3)


def test_llama_cpp_cuda_moe_prompts_compute_their_empty_tile_columns():
    """Qwen3-30B-A3B (128 experts, top 8), a 512-token prompt on an RTX 4090: the routed
    expert GEMM is priced at four times its FLOPs under llama.cpp's CUDA backend and at
    its FLOPs under the generic engine; decode (one token) runs as matrix-vector products."""
    rtx = load_hardware("rtx-4090")
    model = load_model("qwen3-30b-a3b")
    precision = Precision("Q4_K_M", "fp16", "fp16")
    prompt = build_ledger(model, Step.prefill(512), precision)
    experts = next(op for op in prompt.ops if op.name == "moe.experts")
    assert experts.expert_load == pytest.approx(512 * 8 / 128)
    cuda = traits_for(resolve_engine("llama.cpp"), rtx)
    assert (cuda.kernels.moe_tile_tokens, cuda.kernels.moe_tile_above_tokens) == (128, 8)
    assert op_features(experts, rtx, "fp16", cuda).flops == pytest.approx(4 * experts.flops,
                                                                        rel=1e-6)
    assert op_features(experts, rtx, "fp16").flops == experts.flops
    metal = traits_for(resolve_engine("llama.cpp"), load_hardware("m2-max"))
    assert metal.kernels.moe_tile_tokens == 0
    step = build_ledger(model, Step.decode(1, 100), precision)
    one = next(op for op in step.ops if op.name == "moe.experts")
    assert op_features(one, rtx, "fp16", cuda).flops == one.flops


def test_llama_cpp_metal_multiplies_small_batches_in_whole_32_token_tiles():
    """kernel_mul_mm covers ⌈m/32⌉ tiles of 32 tokens: a 4-token prompt computes 32 tokens'
    FLOPs; above 8 tokens since PR #10491, above 1 token before it; 512 tokens fill 16."""
    m2 = load_hardware("m2")
    model = load_model("llama-2-7b")
    precision = Precision("Q4_0", "fp16", "fp16")
    new = traits_for(resolve_engine("llama.cpp"), m2)
    old = traits_for(_stated(resolve_engine("llama.cpp"),
                               "llama.cpp llama-bench (master, 2023-10-07), Metal backend",
                               "metal"), m2)
    assert (new.kernels.gemm_tile_tokens, new.kernels.gemm_tile_above_tokens) == (32, 8)
    assert (old.kernels.gemm_tile_tokens, old.kernels.gemm_tile_above_tokens) == (32, 1)
    for tokens, old_factor, new_factor in ((4, 8.0, 1.0), (10, 3.2, 3.2), (512, 1.0, 1.0)):
        up = next(op for op in build_ledger(model, Step.prefill(tokens), precision).ops
                  if op.name == "mlp.up")
        assert op_features(up, m2, "fp16", old).flops == pytest.approx(old_factor * up.flops)
        assert op_features(up, m2, "fp16", new).flops == pytest.approx(new_factor * up.flops)
    # a CUDA code path is not named for a Metal run, nor a Metal one for a CUDA run
    assert "cublas-fp16" not in _stated(resolve_engine("llama.cpp"),
                                          "llama-bench build 1988, Metal", "metal").name
    assert "metal" not in _stated(resolve_engine("llama.cpp"),
                                    "llama-bench (May 2024), CUDA backend", "cuda").name


def test_routed_experts_in_a_block_format_pay_the_dequant_factors_like_dense_gemms():
    """A MoE GEMM's weight bytes cover every expert it touches: its bytes per weight are
    its weight bytes over FLOPs ÷ 2m, not over one expert's n × k. Q4_K_M takes 4.89 bits a
    weight (4.58 GiB for Llama 3 8B's 8.03 B weights, as llama-bench prints the file)."""
    from phasewise.lower.generic import weight_elements

    model = load_model("qwen3-30b-a3b")
    rtx = load_hardware("rtx-4090")
    for step in (Step.decode(1, 100), Step.decode(32, 100), Step.prefill(512)):
        ledger = build_ledger(model, step, Precision("Q4_K_M", "fp16", "fp16"))
        experts = next(op for op in ledger.ops if op.name == "moe.experts")
        q4_k_m_bytes = 4.58 * 2**30 / 8.03e9  # per weight
        assert experts.weights / weight_elements(experts) == pytest.approx(q4_k_m_bytes, rel=0.01)
        assert op_features(experts, rtx, "fp16").dequantized == 1.0
        fp16 = build_ledger(model, step, Precision("fp16", "fp16", "fp16"))
        dense = next(op for op in fp16.ops if op.name == "moe.experts")
        assert op_features(dense, rtx, "fp16").dequantized == 0.0


def test_llama_cpp_metal_reads_weights_again_for_later_tokens_of_small_batches():
    """kernel_mul_mv_ext takes r1ptg tokens a threadgroup (2 -> 2, 3 and 6 -> 3, 4, 7 and
    8 -> 4, 5 -> 5): 6 to 8 tokens read a dense GEMM's weights twice, up to 5 once; over 8
    tokens the 32-token tiles read them once. Below 32 tokens kernel_mul_mv_id reads each
    routed expert once per token sent to it: 16 tokens of Qwen3-30B-A3B (128 experts, top
    8) touch 128·(1 − (120/128)^16) = 82.42 experts with 128 (token, expert) pairs, so the
    expert weights are read 128 / 82.42 = 1.553 times on average."""
    from phasewise.lower.llama_cpp import weight_passes

    m2 = load_hardware("m2-max")
    rtx = load_hardware("rtx-4090")
    metal = traits_for(resolve_engine("llama.cpp"), m2)
    cuda = traits_for(resolve_engine("llama.cpp"), rtx)
    old = traits_for(_stated(resolve_engine("llama.cpp"),
                               "llama.cpp llama-bench (master, 2023-10-07), Metal backend",
                               "metal"), m2)
    dense = load_model("qwen2.5-7b")
    precision = Precision("Q8_0", "fp16", "fp16")
    for batch, passes in ((1, 1), (2, 1), (4, 1), (5, 1), (6, 2), (7, 2), (8, 2), (9, 1),
                          (32, 1)):
        up = next(op for op in build_ledger(dense, Step.decode(batch, 512), precision).ops
                  if op.name == "mlp.up")
        assert weight_passes(up, metal.kernels) == passes
        assert op_features(up, m2, "fp16", metal).memory_bytes == pytest.approx(
            up.memory_bytes + (passes - 1) * up.weights)
        assert weight_passes(up, cuda.kernels) == 1
        assert weight_passes(up, old.kernels) == 1  # before PR #10491: 32-token tiles from 2 tokens
    moe = load_model("qwen3-30b-a3b")
    for batch, passes in ((1, 1.0), (16, 128 / 82.42), (32, 1.0)):
        experts = next(op for op in build_ledger(moe, Step.decode(batch, 512), precision).ops
                       if op.name == "moe.experts")
        assert weight_passes(experts, metal.kernels) == pytest.approx(passes, rel=1e-3)
        assert weight_passes(experts, cuda.kernels) == 1.0


def test_llama_cpp_matrix_vector_kernels_run_on_the_vector_alus():
    """Up to MMVQ_MAX_BATCH_SIZE = 8 tokens ggml-cuda multiplies block-quantized weights
    with mul_mat_vec_q on the SM's integer and FP32 pipes, no tensor cores: one token of
    Llama 3 8B Q4_K_M's mlp.up (gate and up, 4096 x 2 x 14336 per layer, 32 layers, 2 FLOPs
    a weight) on an A100 SXM costs 2 x 4096 x 28672 x 32 x 4 operations at its 19.5 TFLOP/s
    fp32 vector rate, whatever the GEMM constants. t tokens in the kernel's one pass share
    the unpacking, 3/4 of a token's work (engines.toml matvec_unpack_share): 4 x (1/4 +
    3/4 / t) operations per FLOP, 1.375 at 8 tokens. 9 tokens run MMQ, priced by the shape
    term."""
    a100 = load_hardware("a100-80gb-sxm")
    llama = Calibrated.for_device(a100, engine="llama.cpp").traits
    assert llama.kernels.matvec_max_tokens == 8
    precision = Precision("Q4_K_M", "fp16", "fp16")
    model = load_model("llama-3-8b")
    c = Constants(**ROUND)
    other = Constants(**{**ROUND, "gemm_efficiency": 0.1, "gemm_fraction": 0.1,
                         "gemm_intensity_half": 3.0, "dequant_compute": 0.1})
    for tokens, matvec in ((1, True), (8, True), (9, False)):
        up = next(op for op in build_ledger(model, Step.decode(tokens, 10), precision).ops
                  if op.name == "mlp.up")
        f = op_features(up, a100, "fp16", llama)
        assert f.matvec == (1.0 if matvec else 0.0)
        if matvec:
            alu_s = 2.0 * 4096 * 28672 * 32 * tokens * 4.0 * (0.25 + 0.75 / tokens) / 19.5e12
            assert priced_parts(f, c).compute_s == pytest.approx(alu_s, rel=1e-9)
            assert priced_parts(f, other).compute_s == pytest.approx(alu_s, rel=1e-9)
    # 16-bit weights: one operation per FLOP (a fused multiply-add counts 2 of each)
    f16 = next(op for op in build_ledger(model, Step.decode(1, 10),
                                         Precision("fp16", "fp16", "fp16")).ops
               if op.name == "mlp.up")
    assert priced_parts(op_features(f16, a100, "fp16", llama), c).compute_s == \
        pytest.approx(2.0 * 4096 * 28672 * 32 / 19.5e12, rel=1e-9)
    # the generic engine runs every GEMM as a GEMM
    up = next(op for op in build_ledger(model, Step.decode(1, 10), precision).ops
              if op.name == "mlp.up")
    assert op_features(up, a100, "fp16", Calibrated.for_device(a100).traits).matvec == 0.0


def test_cuda_and_hip_matrix_vector_kernels_run_at_the_integer_rate():
    """mul_mat_vec_q unpacks and multiplies in 32-bit integer instructions (dp4a), so its
    ALU work runs at the device's INT32 rate: an RTX 3090's is 17.8 TOPS, half its 35.6
    TFLOP/s FP32 figure (GA102 whitepaper: 64 of an SM's 128 FP32 lanes run INT32); an
    RX 7900 XTX's 30.7, half the 61.4 its sheet counts with VOPD dual issue; an A100's
    19.5, its FP32 figure (64 INT32 and 64 FP32 lanes an SM). One token of Llama 3 8B
    Q4_K_M's mlp.up (2 x 4096 x 28672 x 32 FLOPs) at 4 operations per FLOP. 16-bit weights
    go through the float kernel at the FP32 rate, and Metal's kernels multiply in float."""
    model = load_model("llama-3-8b")
    c = Constants(**ROUND)
    flops = 2.0 * 4096 * 28672 * 32
    llama = resolve_engine("llama.cpp")
    for name, rate in (("rtx-3090", 17.8e12), ("rx-7900-xtx", 30.7e12),
                       ("a100-80gb-sxm", 19.5e12), ("m2-max", 13.6e12)):
        device = load_hardware(name)
        traits = traits_for(llama, device)
        for weights, ops, expected in (("Q4_K_M", 4.0, rate), ("fp16", 1.0, device.vector_flops)):
            up = next(op for op in build_ledger(model, Step.decode(1, 10),
                                                Precision(weights, "fp16", "fp16")).ops
                      if op.name == "mlp.up")
            f = op_features(up, device, "fp16", traits)
            assert f.matvec == 1.0
            assert priced_parts(f, c).compute_s == pytest.approx(flops * ops / expected,
                                                                 rel=1e-9), (name, weights)
    # the generic engine's kernels are not llama.cpp's: no dispatch of its own
    assert traits_for(resolve_engine("generic"), load_hardware("rtx-3090")).kernels is None


def test_the_matrix_vector_count_is_fitted_per_compute_backend():
    """llama.cpp's matrix-vector kernels are one source per backend (mul_mat_vec_q for CUDA
    and HIP, kernel_mul_mv for Metal), so matvec_alu_ops has a level per engine and backend,
    not per device class; a backend without one takes the engine's."""
    profile = Profile("t", values={"engine:llama.cpp": {"matvec_alu_ops": 9.0},
                                   "engine:llama.cpp/backend:cuda": {"matvec_alu_ops": 6.0},
                                   "engine:llama.cpp/backend:metal": {"matvec_alu_ops": 12.0},
                                   "engine:llama.cpp/class:consumer_gpu": {"matvec_alu_ops": 99.0,
                                                                           "kernel_overhead_s": 7e-6}})
    llama = resolve_engine("llama.cpp")
    rtx, m2, rx = (load_hardware(n) for n in ("rtx-3090", "m2-ultra", "rx-7900-xtx"))
    assert constants_for(profile, rtx, llama).matvec_alu_ops == 6.0
    assert constants_for(profile, m2, llama).matvec_alu_ops == 12.0
    assert constants_for(profile, rx, llama).matvec_alu_ops == 9.0
    assert constants_for(profile, rtx, llama).kernel_overhead_s == 7e-6  # others stay by class
    again = profile_from_document(tomllib.loads(profile_to_toml(profile)), "x")
    assert again.values == profile.values


def test_a_device_s_streaming_rate_falls_back_to_its_architecture_then_its_class():
    """bandwidth_fraction has a level per architecture (the sheet's [architecture] name) between
    the device and its class: an RTX 4070 Ti with no value of its own takes Ada's (informed
    by its siblings), an RTX 3090 with none for Ampere GA10x its class's; the matmul
    fraction has no such level, and Apple parts are not grouped."""
    defs = parameter_defs()
    llama = resolve_engine("llama.cpp")
    rtx, ampere, m2 = (load_hardware(n) for n in ("rtx-4070-ti", "rtx-3090", "m2-ultra"))
    assert level_keys(rtx, llama, defs["bandwidth_fraction"]) == [
        "device:rtx-4070-ti", "arch:nvidia-ada", "class:consumer_gpu", "global"]
    assert level_keys(rtx, llama, defs["gemm_fraction"]) == [
        "device:rtx-4070-ti", "class:consumer_gpu", "global"]
    assert level_keys(m2, llama, defs["bandwidth_fraction"]) == [
        "device:m2-ultra", "class:apple_gpu", "global"]
    profile = Profile("t", values={"class:consumer_gpu": {"bandwidth_fraction": 0.8},
                                   "arch:nvidia-ada": {"bandwidth_fraction": 0.9},
                                   "device:rtx-4090": {"bandwidth_fraction": 0.95}})
    assert constants_for(profile, rtx, llama).bandwidth_fraction == 0.9
    assert constants_for(profile, ampere, llama).bandwidth_fraction == 0.8
    assert constants_for(profile, load_hardware("rtx-4090"), llama).bandwidth_fraction == 0.95
    again = profile_from_document(tomllib.loads(profile_to_toml(profile)), "x")
    assert again.values == profile.values
    # an architecture groups siblings (a level of one device adds nothing), each with a source
    by_arch: dict[str, list[str]] = {}
    for name in hardware_names():
        device = load_hardware(name)
        if device.architecture:
            assert "architecture" in device.sources, name
            by_arch.setdefault(device.architecture, []).append(name)
    assert by_arch and all(len(devices) >= 2 for devices in by_arch.values()), by_arch


def test_grouping_by_architecture_keeps_a_device_s_prior_about_its_class():
    """A grouped device's offset and its architecture's each get spread / sqrt(2), so their
    sum varies about the class as an ungrouped device's offset does (variance 1.0^2 for
    bandwidth_fraction: 0.5 + 0.5); the class and an ungrouped device keep the spread."""
    defs = parameter_defs()
    spread = defs["bandwidth_fraction"].spread
    observations = [Observation(f"stream-{n}", "s", load_hardware(n), None, 1.0 / 8e11,
                                ceiling="memory_bw")
                    for n in ("rtx-4090", "ryzen-ai-max-395")]
    problem = _Problem(observations)
    by_key = {key: problem.spread[j] for j, (name, key) in enumerate(problem.slots)
              if name == "bandwidth_fraction"}
    assert by_key["device:rtx-4090"] == pytest.approx(spread / math.sqrt(2))
    assert by_key["arch:nvidia-ada"] == pytest.approx(spread / math.sqrt(2))
    assert by_key["device:rtx-4090"] ** 2 + by_key["arch:nvidia-ada"] ** 2 == \
        pytest.approx(spread ** 2)
    assert by_key["class:consumer_gpu"] == pytest.approx(spread)
    assert by_key["device:ryzen-ai-max-395"] == pytest.approx(spread)


def test_metal_small_batches_share_a_pass_s_unpacking_among_its_tokens():
    """kernel_mul_mv_ext dequantizes a chunk once and dots it against its r1ptg tokens:
    Qwen2.5 7B Q8_0's mlp.up (3584 x 2 x 18944 per layer, 28 layers) on an M2 Max costs
    4 x (1/4 + 3/4 / t) operations per FLOP at t tokens a pass: 4 at one token; 4 tokens
    in one pass, 1.75; 8 tokens in two passes of 4, 1.75 again; a 16-bit GEMM 1 whatever
    the tokens (nothing to unpack)."""
    m2 = load_hardware("m2-max")
    metal = traits_for(resolve_engine("llama.cpp"), m2)
    assert metal.kernels.matvec_unpack_share == 0.75
    c = Constants(**ROUND)
    dense = load_model("qwen2.5-7b")
    for tokens, ops in ((1, 4.0), (4, 1.75), (8, 1.75)):
        up = next(op for op in build_ledger(dense, Step.decode(tokens, 64),
                                            Precision("Q8_0", "fp16", "fp16")).ops
                  if op.name == "mlp.up")
        flops = 2.0 * 3584 * 2 * 18944 * 28 * tokens
        assert up.flops == pytest.approx(flops)
        f = op_features(up, m2, "fp16", metal)
        assert priced_parts(f, c).compute_s == pytest.approx(flops * ops / m2.vector_flops)
        f16 = next(op for op in build_ledger(dense, Step.decode(tokens, 64),
                                             Precision("fp16", "fp16", "fp16")).ops
                   if op.name == "mlp.up")
        assert priced_parts(op_features(f16, m2, "fp16", metal), c).compute_s == \
            pytest.approx(flops / m2.vector_flops)


def test_matrix_vector_token_limits_follow_the_backend_and_the_expert_path():
    """Metal runs mul_mv up to ne11_mm_min = 8 tokens (1 before PR #10491); routed experts of
    a pass under 32 tokens run mul_mv_id on Metal, of at most 8 tokens MMVQ on CUDA."""
    m2, rtx = load_hardware("m2-max"), load_hardware("rtx-4090")
    metal = traits_for(resolve_engine("llama.cpp"), m2)
    cuda = traits_for(resolve_engine("llama.cpp"), rtx)
    old = traits_for(_stated(resolve_engine("llama.cpp"),
                               "llama.cpp llama-bench (master, 2023-10-07), Metal backend",
                               "metal"), m2)
    precision = Precision("Q8_0", "fp16", "fp16")
    dense = load_model("qwen2.5-7b")
    for tokens, on_metal, on_old in ((1, 1.0, 1.0), (2, 1.0, 0.0), (8, 1.0, 0.0),
                                     (9, 0.0, 0.0)):
        up = next(op for op in build_ledger(dense, Step.decode(tokens, 64), precision).ops
                  if op.name == "mlp.up")
        assert op_features(up, m2, "fp16", metal).matvec == on_metal
        assert op_features(up, m2, "fp16", old).matvec == on_old
    moe = load_model("qwen3-30b-a3b")
    for tokens, on_metal, on_cuda in ((8, 1.0, 1.0), (16, 1.0, 0.0), (32, 0.0, 0.0)):
        experts = next(op for op in build_ledger(moe, Step.decode(tokens, 64), precision).ops
                       if op.name == "moe.experts")
        assert op_features(experts, m2, "fp16", metal).matvec == on_metal
        assert op_features(experts, rtx, "fp16", cuda).matvec == on_cuda


def test_every_geforce_sheet_states_its_fp16_accumulate_rate():
    """GeForce tensor cores run FP16 with FP32 accumulation at half their FP16-accumulate
    rate (GA102 whitepaper: RTX 3090 71 and 142 dense TFLOPS; Ada whitepaper: RTX 4090
    165.2 and 330.3), and the sheets give the FP32-accumulate figure: a GeForce sheet
    without [architecture] fp16_accumulate_speedup = 2 would price llama.cpp's fp16
    GEMMs at half their rate."""
    for name in hardware_names():
        device = load_hardware(name)
        if device.vendor == "NVIDIA" and device.device_class == "consumer_gpu":
            assert device.fp16_accumulate_speedup == 2.0, name
        elif device.vendor != "NVIDIA":
            assert device.fp16_accumulate_speedup == 1.0, name


def test_a_resolved_model_is_reused_for_the_same_device_and_remade_for_another():
    # Calibrated.for_device memoises on the device, profile and engine: the same inputs give
    # the same model (and its priced operators), another device its own constants.
    h100, a100 = load_hardware("h100-sxm"), load_hardware("a100-80gb-pcie")
    assert Calibrated.for_device(h100) is Calibrated.for_device(h100)
    assert Calibrated.for_device(a100) is not Calibrated.for_device(h100)
    assert Calibrated.for_device(h100, engine="vllm") is not Calibrated.for_device(h100)
