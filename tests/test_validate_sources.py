"""Bundled measurement sources: llama-bench's names map to catalog models, formats and
devices, each row becomes the scenario its source describes, and the README lists every file.

Expected values are read off the sources by hand (llama-bench tables, result files), not
from the code's output.
"""

import re
from pathlib import Path

import pytest

from phasewise.cost.calibrated import Calibrated
from phasewise.validate import scenario as scenario_module
from phasewise.validate.measurements import MEASUREMENTS_DIR, load_measurements
from phasewise.validate.run import dataset
from phasewise.validate.scenario import (
    MappingError,
    precision_for,
    resolve_device,
    resolve_model,
    scenario_for,
)

NEW_FILES = ("lhl_benchmark_notes.csv", "github_llama_bench_posts.csv", "rocm_vllm_mi300x.csv",
             "amd_rocm_llamacpp_mi300x.csv", "vllm_ci_latency.csv", "llamacpp_dgx_spark.csv",
             "llamacpp_pr_cuda.csv", "llamacpp_pr_metal.csv", "llamacpp_m2_ultra.csv",
             "gb10_matmul_report.csv", "llamacpp_cuda_graphs_threads.csv",
             "torch_performance_test_data.csv", "llamacpp_pr_hip.csv")


def bundled_row(file: str, record_id: str):
    rows = [r for r in load_measurements(MEASUREMENTS_DIR / file).rows if r.record_id == record_id]
    assert len(rows) == 1
    return rows[0]


def configured_row(file: str, record_id: str):
    """The row's scenario as the dataset keeps it (its engine as the row's engine column
    states it, with the variants and micro-batch its software description says)."""
    found = [s for s in dataset([load_measurements(MEASUREMENTS_DIR / file)]).scenarios
             if s.record_id == record_id]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("label, params_b, catalog", [
    ("llama 7B", 6.74, "llama-2-7b"),        # LLaMA/Llama-2 7B: 6,738,415,616 parameters
    ("LLaMA 7B", 6.74, "llama-2-7b"),        # 2023 builds capitalise the architecture
    ("llama 7B", 7.24, "mistral-7b"),        # Mistral 7B is GGUF architecture "llama" too
    ("llama 70B", 70.55, "llama-3-70b"),     # not Llama-2 70B: 69.0 B is 2.2% away
    ("llama 8x7B", 46.7, "mixtral-8x7b"),
    ("qwen3moe 30B.A3B", 30.53, "qwen3-30b-a3b"),
    # llama-bench counts the language model: Gemma 3 4B's 4.3 B less its 0.417 B vision
    # tower (Gemma 3 report, Table 1) is 3.883 B
    ("gemma3 4B", 3.88, "gemma-3-4b"),
])
def test_llama_bench_labels_find_the_model_by_parameter_count(label, params_b, catalog):
    assert resolve_model(label, params_b).name == catalog


def test_same_network_under_two_names_is_not_ambiguous():
    # Llama 3 8B and Llama 3.1 8B are both 8.03 B with the same shapes: either prices the same.
    assert resolve_model("llama 8B", 8.03).name in ("llama-3-8b", "llama-3.1-8b")


def test_two_different_networks_with_one_count_are_ambiguous(monkeypatch):
    index = {"llama-2-7b": {"family": "llama", "params_total_b": 7.0},
             "mistral-7b": {"family": "mistral", "params_total_b": 7.0}}
    monkeypatch.setattr(scenario_module, "model_index", lambda: index)
    with pytest.raises(MappingError, match="ambiguous"):
        resolve_model("llama 7B", 7.0)


def test_a_label_without_a_matching_count_is_not_guessed():
    with pytest.raises(MappingError, match="19 B parameters"):
        resolve_model("llama 7B", 19.0)  # no llama-architecture network has 19 B
    # No count printed: the words are read as a name, LLaMA 7B (the LLaMA-1 checkpoint)
    assert resolve_model("llama 7B").name == "llama-7b"


@pytest.mark.parametrize("written, weights", [
    ("Q4_K - Medium", "Q4_K_M"), ("mostly Q5_K - Small", "Q5_K_S"), ("mostly Q4_0", "Q4_0"),
    ("mostly F16", "F16"), ("FP8", "fp8"), ("INT4 (W4A16, GPTQ)", "int4"), ("NVFP4", "nvfp4"),
])
def test_llama_bench_type_descriptions_are_gguf_formats(written, weights):
    assert precision_for(written).weights == weights


def test_an_unknown_type_description_is_refused():
    with pytest.raises(MappingError, match="weight format"):
        precision_for("Q4_K - Huge")


@pytest.mark.parametrize("written, catalog", [
    ("30-core M2 Max", "m2-max"), ("Apple M3 Ultra (Mac Studio)", "m3-ultra"),
    ("Radeon RX 7900 XTX", "rx-7900-xtx"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
])
def test_device_names_of_the_new_sources_find_their_sheet(written, catalog):
    assert resolve_device(written).name == catalog


def test_a_llama_bench_prompt_row_is_one_prompt_of_its_length():
    # lhl, howto/AMD GPUs.md: 7900 XTX, llama-2-7b Q4_0, pp 3968 = 2575.87 t/s.
    s = scenario_for(bundled_row("lhl_benchmark_notes.csv", "LHL-0009"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "prefill", "rx-7900-xtx", "llama-2-7b", "Q4_0")
    assert (s.workload.isl, s.workload.batch_size, s.engine.fitted_name) == (3968, 1, "llama.cpp")
    assert s.measured_s == pytest.approx(3968 / 2575.87)


def test_lhl_s_radeon_pro_and_strix_halo_rows_map_to_their_devices_and_micro_batches():
    # W7900 Pervasive Computing Project.md: 'llama 70B Q4_K - Medium | 39.59 GiB | 70.55 B |
    # ROCm | 99 | pp 3968 | 255.59 ± 0.94', build b8109bc0 (2701).
    s = scenario_for(bundled_row("lhl_benchmark_notes.csv", "LHL-0061"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights, s.engine.fitted_name) == (
        "prefill", "radeon-pro-w7900", "llama-3-70b", "Q4_K_M", "llama.cpp")
    assert s.measured_s == pytest.approx(3968 / 255.59)
    # Strix Halo.md, 'hipblaslt b128': llama-bench -b 128 caps the micro-batch at 128 tokens.
    s = configured_row("lhl_benchmark_notes.csv", "LHL-0055")
    assert (s.hardware.name, s.model.name, s.engine.name) == (
        "ryzen-ai-max-395", "qwen3-235b-a22b", "llama.cpp+ub128")
    assert s.engine.prefill_ubatch_tokens == 128
    # howto/AMD GPUs.md, Windows build 1148: 2023 llama-bench printed 'LLaMA v2 7B'.
    s = scenario_for(bundled_row("lhl_benchmark_notes.csv", "LHL-0069"))
    assert (s.hardware.name, s.model.name, s.precision.weights) == (
        "rx-7900-xt", "llama-2-7b", "Q4_K_M")
    assert s.measured_s == pytest.approx(3968 / 858.74)


def test_a_concurrency_one_tpot_row_is_a_batch_one_decode_step():
    # speed-benchmarking nvfp4/llama.cpp.q4_k_m, concurrency 1: 130,670 input and 16,080
    # output tokens over 128 requests; mean_tpot_ms 4.3604.
    s = scenario_for(bundled_row("lhl_benchmark_notes.csv", "LHL-0016"))
    assert (s.kind, s.hardware.name, s.model.name, s.engine.fitted_name) == (
        "decode", "rtx-pro-6000", "llama-3.1-8b", "llama.cpp")
    assert (s.workload.isl, s.workload.osl, s.workload.batch_size) == (1021, 126, 1)
    assert s.measured_s == pytest.approx(4.360380199823897e-3)


def test_serving_rows_name_each_engine():
    engines = {bundled_row("lhl_benchmark_notes.csv", f"LHL-{i:04d}").software_stack:
               scenario_for(bundled_row("lhl_benchmark_notes.csv", f"LHL-{i:04d}")).engine.fitted_name
               for i in (15, 17, 23, 27)}
    assert sorted(engines.values()) == ["llama.cpp", "sglang", "trtllm", "vllm"]


def test_a_2023_metal_row_maps_to_the_chip_and_the_7b_network():
    # PR #2959: 30-core M2 Max, LLaMA 7B mostly Q4_0, pp 512 = 327.79 t/s (master).
    s = scenario_for(bundled_row("github_llama_bench_posts.csv", "GHLB-0013"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "prefill", "m2-max", "llama-2-7b", "Q4_0")
    assert s.measured_s == pytest.approx(512 / 327.79)


def test_a_static_batch_latency_row_is_the_whole_batch_on_eight_devices():
    # ROCm dev-docker README: Llama 3.1 405B FP8, TP 8, batch 128, 2048 in, 2048 out: 125.471 s.
    s = scenario_for(bundled_row("rocm_vllm_mi300x.csv", "RVLM-0032"))
    assert (s.kind, s.hardware.name, s.model.name, s.engine.fitted_name) == (
        "end_to_end", "mi300x", "llama-3.1-405b", "vllm")
    assert (s.workload.isl, s.workload.osl, s.workload.batch_size) == (2048, 2048, 128)
    assert (s.parallelism.tp, s.devices) == (8, 8)
    assert (s.precision.weights, s.precision.activations, s.precision.kv_cache) == (
        "fp8", "fp8", "fp16")
    assert s.measured_s == pytest.approx(125.471)


def test_a_layer_split_llama_bench_row_is_one_sequence_through_eight_devices():
    # AMD blog 'Accelerating llama.cpp on AMD Instinct MI300X': 8x MI300X, default split
    # mode (layer), llama 70B Q4_K - Medium, 70.55 B, -fa 1, tg128 = 36.51 t/s.
    s = scenario_for(bundled_row("amd_rocm_llamacpp_mi300x.csv", "AMDL-0025"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "decode", "mi300x", "llama-3-70b", "Q4_K_M")
    assert (s.parallelism.tp, s.parallelism.pp, s.devices, s.engine.fitted_name) == (1, 8, 8, "llama.cpp")
    assert (s.workload.osl, s.workload.batch_size) == (128, 1)
    assert s.measured_s == pytest.approx(1 / 36.51)


def test_a_hip_pull_request_decode_row_is_one_token_on_an_rx_7900_xtx():
    # PR #26284, RX 7900 XTX table: llama 8B Q4_K_M, micro-batch 512, tg64, master 105.75.
    s = scenario_for(bundled_row("llamacpp_pr_hip.csv", "LPHP-0003"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "decode", "rx-7900-xtx", "llama-3-8b", "Q4_K_M")
    assert (s.workload.osl, s.workload.batch_size, s.devices) == (64, 1, 1)
    assert s.measured_s == pytest.approx(1 / 105.75)


def test_a_deepseek_llama_bench_label_is_deepseek_v3():
    # Same blog: deepseek2 671B Q4_K - Medium, 671.03 B, pp512 = 514.07 t/s.
    s = scenario_for(bundled_row("amd_rocm_llamacpp_mi300x.csv", "AMDL-0007"))
    assert (s.kind, s.model.name, s.workload.isl, s.parallelism.pp) == (
        "prefill", "deepseek-v3", 512, 8)
    assert s.measured_s == pytest.approx(512 / 514.07)


def test_a_vllm_ci_latency_row_is_a_static_batch_of_eight():
    # buildkite vllm/performance-benchmark #9523: latency_llama70B_tp4 on A100-SXM4-80GB,
    # batch 8, 32 input and 128 output tokens, mean latency 3990.59 ms; bfloat16 weights.
    s = scenario_for(bundled_row("vllm_ci_latency.csv", "VLCI-0001"))
    assert (s.kind, s.hardware.name, s.model.name, s.engine.fitted_name) == (
        "end_to_end", "a100-80gb-sxm", "llama-3-70b", "vllm")
    assert (s.workload.isl, s.workload.osl, s.workload.batch_size) == (32, 128, 8)
    assert (s.parallelism.tp, s.devices) == (4, 4)
    assert (s.precision.weights, s.precision.activations, s.precision.kv_cache) == (
        "bf16", "bf16", "bf16")
    assert s.measured_s == pytest.approx(3.99059)


def test_a_llama_bench_generation_after_a_cache_starts_at_its_depth():
    # ggml-org/llama.cpp benches/dgx-spark/dgx-spark.md: GB10, qwen2 7B Q8_0, 7.62 B,
    # tg32 @ d16384 = 25.72 t/s.
    s = scenario_for(bundled_row("llamacpp_dgx_spark.csv", "SPRK-0026"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "decode", "dgx-spark", "qwen2.5-7b", "Q8_0")
    assert (s.workload.isl, s.workload.osl, s.workload.batch_size) == (16384, 32, 1)
    assert s.measured_s == pytest.approx(1 / 25.72)


def test_a_batched_bench_generation_row_is_one_step_of_the_whole_batch():
    # Same page, llama-batched-bench: qwen3moe 30B.A3B Q8_0, PP 4096, TG 32, B 16:
    # S_TG = B*TG/T_TG = 164.97 t/s, so one decode step of 16 sequences takes 16/164.97 s.
    s = scenario_for(bundled_row("llamacpp_dgx_spark.csv", "SPRK-0017"))
    assert (s.kind, s.model.name, s.engine.fitted_name) == ("decode", "qwen3-30b-a3b", "llama.cpp")
    assert (s.workload.isl, s.workload.osl, s.workload.batch_size) == (4096, 32, 16)
    assert s.measured_s == pytest.approx(16 / 164.97)


def test_an_m2_ultra_batched_bench_row_is_one_metal_decode_step_of_the_batch():
    # ggml-org/llama.cpp benches/mac-m2-ultra/mac-m2-ultra.md, llama-batched-bench: gemma3 4B
    # Q4_0 (3.88 B), PP 512, TG 32, B 8: S_TG = 441.80 t/s, so one step of 8 sequences takes
    # 8/441.80 s, after 512 cached tokens; -fa 1 and n_ubatch 2048.
    s = configured_row("llamacpp_m2_ultra.csv", "M2UB-0052")
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "decode", "m2-ultra", "gemma-3-4b", "Q4_0")
    assert (s.workload.isl, s.workload.osl, s.workload.batch_size) == (512, 32, 8)
    assert s.engine.name == "llama.cpp+flash-attn+ub2048"
    assert s.measured_s == pytest.approx(8 / 441.80)


def test_the_gb10_matmul_report_is_a_bf16_ceiling_of_half_the_derived_sheet_figure():
    # Carmack (X post, October 2025, as quoted): 'about half the quoted performance (assuming
    # 1 PF sparse FP4 = 125 TF dense BF16)': 62.5 TFLOPS of BF16 matmul on the DGX Spark, a
    # device ceiling against the catalog's 125 TFLOPS (FP4 1000 sparse / 2 / 4).
    s = scenario_for(bundled_row("gb10_matmul_report.csv", "CRMK-0001"))
    assert (s.kind, s.hardware.name) == ("gemm", "dgx-spark")
    assert s.hardware.peak_flops("bf16") == pytest.approx(125e12)
    assert 1.0 / s.measured_s == pytest.approx(62.5e12)


def test_the_cuda_graphs_issue_row_is_one_h100_pcie_decode_token_of_llama_2_7b():
    # ggml-org/llama.cpp issue #6763: llama-2-7b.Q4_K_M on H100-PCIe, -n 128, 143.35 tokens/s
    # on master (before CUDA graphs), so one token every 1/143.35 s; April 2024 is before
    # PR #8075, the cuBLAS-fp16 code path.
    s = configured_row("llamacpp_cuda_graphs_threads.csv", "LCGR-0001")
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "decode", "h100-pcie", "llama-2-7b", "Q4_K_M")
    assert (s.workload.osl, s.workload.batch_size) == (128, 1)
    assert s.engine.name == "llama.cpp+cublas-fp16+int8-mxfp4"
    assert s.measured_s == pytest.approx(1 / 143.35)
    rows = load_measurements(MEASUREMENTS_DIR / "llamacpp_cuda_graphs_threads.csv").rows
    assert {r.record_id for r in rows if r.exclude} == {"LCGR-0003", "LCGR-0005"}  # ./main pp


def test_the_community_matmul_table_rows_are_bf16_ceilings_of_one_catalog_sheet():
    # zzc0721/torch-performance-test-data: Charming's RTX 4090 24GB, best torch.mm of
    # 170.06 TFLOPS in bf16, over the sheet's 165.2 (fp32 accumulate, rated boost clock):
    # a device ceiling, 1 / 170.06e12 s per FLOP
    s = configured_row("torch_performance_test_data.csv", "TPTD-0018")
    mamf = configured_row("public_measurements.csv", "GEMM-0001")  # a MAMF BF16 row
    assert (s.kind, s.hardware.name, s.math_format) == ("gemm", "rtx-4090", mamf.math_format)
    assert s.measured_s == pytest.approx(1 / 170.06e12)
    rows = load_measurements(MEASUREMENTS_DIR / "torch_performance_test_data.csv").rows
    kept = [r for r in rows if not r.exclude]
    assert len(rows) == 55 and len(kept) == 21
    assert all(r.weight_dtype == "BF16" and r.metric == "max_achievable_matmul_tflops"
               for r in rows)
    # laptops, modded boards, regional and ambiguous variants, parts without bf16 matrix units
    reasons = {r.record_id: r.exclude for r in rows if r.exclude}
    assert "laptop" in reasons["TPTD-0005"] and "48 GB" in reasons["TPTD-0006"]
    assert "SXM or" in reasons["TPTD-0054"] and "Volta" in reasons["TPTD-0002"]


def test_m2_ultra_rows_without_a_catalog_model_are_kept_but_excluded():
    rows = load_measurements(MEASUREMENTS_DIR / "llamacpp_m2_ultra.csv").rows
    assert {r.model for r in rows if r.exclude} == {"deepseek2 30B.A3B"}
    # five models: llama-bench's pp2048 and five tg32 depths, the batched table's 12 decode
    # steps and 3 single prompts
    assert len([r for r in rows if not r.exclude]) == 5 * (6 + 12 + 3)


def test_a_pull_request_micro_batch_sweep_row_runs_the_prompt_in_its_micro_batches():
    # PR #7716 (June 2024), RTX 4090, llama 8B Q5_1, micro-batch 16, pp2048 = 339.78 t/s
    # (master): before PR #8075, so the cuBLAS-fp16 code path, in 128 passes of 16 tokens.
    s = scenario_for(bundled_row("llamacpp_pr_cuda.csv", "LPCU-0004"))
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "prefill", "rtx-4090", "llama-3-8b", "Q5_1")
    assert s.engine.fitted_name == "llama.cpp" and s.workload.isl == 2048
    assert s.measured_s == pytest.approx(2048 / 339.78)
    configured = configured_row("llamacpp_pr_cuda.csv", "LPCU-0004")
    assert configured.engine.name == "llama.cpp+cublas-fp16+mmq-4-token-tiles+int8-mxfp4+ub16"
    assert configured.engine.prefill_ubatch_tokens == 16


def test_pr_7716_master_ran_mmq_in_4_token_tiles_reading_the_weights_once_per_tile():
    # Before PR #7716 ggml-cuda built with tensor cores ran MMQ for 5 to 32 tokens
    # (MMVQ up to 4, cuBLAS over 32) in tiles of MMQ_X = 4 tokens: each tile reads all the
    # weights, so a 16-token micro-batch of Llama 3 8B Q5_1 reads its GEMM weights 16 / 4
    # = 4 times and a 32-token one 8 times; 4 tokens read them once, and 64 tokens take
    # the fp16 copy, read once. PR #7860's master (after #7716) is not this path.
    from phasewise.ledger import Step, build_ledger
    from phasewise.lower.llama_cpp import weight_passes
    for record, tokens, passes in (("LPCU-0004", 16, 4), ("LPCU-0005", 32, 8),
                                   ("LPCU-0006", 64, 1)):
        s = configured_row("llamacpp_pr_cuda.csv", record)
        assert "mmq-4-token-tiles" in s.engine.name
        traits = Calibrated.for_device(s.hardware, engine=s.engine).traits
        up = next(op for op in build_ledger(s.model, Step.prefill(tokens), s.precision).ops
                  if op.name == "mlp.up")
        assert weight_passes(up, traits.kernels) == passes
        four = next(op for op in build_ledger(s.model, Step.prefill(4), s.precision).ops
                    if op.name == "mlp.up")
        assert weight_passes(four, traits.kernels) == 1
    assert "mmq-4-token-tiles" not in configured_row("llamacpp_pr_cuda.csv",
                                                     "LPCU-0014").engine.name


def test_pr_7860_master_rows_ran_mmq_at_every_micro_batch_size():
    # PR #7860 (June 2024), RTX 4090, llama 8B Q4_K_S, micro-batch 64, pp2048 = 3387.63 t/s
    # on master. Master's default for a micro-batch over 32 tokens converted the weights to
    # fp16 and ran cuBLAS: at least the fp16 copy written and read back, 2 + 2 bytes for
    # each of Llama 3 8B's 6.98e9 converted weights (8.03e9 less the 128256 x 4096 embedding
    # and output matrices), which takes longer at the RTX 4090's 1008 GB/s than the whole
    # measured micro-batch. So the figures are the PR's 'vs. master MMQ' table: MMQ
    # throughout, no fp16 copy.
    converted = 8.03e9 - 2 * 128256 * 4096
    assert converted * (2 + 2) / 1008e9 > 64 / 3387.63
    s = configured_row("llamacpp_pr_cuda.csv", "LPCU-0014")
    assert s.engine.name == "llama.cpp+cublas-fp16+force-mmq+int8-mxfp4+ub64"
    traits = Calibrated.for_device(s.hardware, engine=s.engine).traits
    assert traits.kernels.dequant_buffer_above_tokens == 0
    # PR #7716's table: the default path
    assert configured_row("llamacpp_pr_cuda.csv", "LPCU-0006").engine.name == \
        "llama.cpp+cublas-fp16+mmq-4-token-tiles+int8-mxfp4+ub64"


def test_a_2023_metal_prompt_of_four_tokens_is_one_prompt_on_the_m2():
    # PR #3524, jhen0409 2023-10-07, M2 (10-core GPU), llama 7B Q4_0 3.56 GiB, pp 4 =
    # 21.54 t/s (master): the Metal backend of that date, whose matrix kernel took 2+ tokens.
    s = configured_row("llamacpp_pr_metal.csv", "LPMT-0008")
    assert (s.kind, s.hardware.name, s.model.name, s.precision.weights) == (
        "prefill", "m2", "llama-2-7b", "Q4_0")
    assert s.engine.name == "llama.cpp+metal-mm-small-batch" and s.workload.isl == 4
    assert s.measured_s == pytest.approx(4 / 21.54)


def test_mxfp4_moe_files_are_scored_with_experts_in_mxfp4():
    rows = load_measurements(MEASUREMENTS_DIR / "llamacpp_dgx_spark.csv").rows
    # only GLM-4.7-Flash, a model the catalog lacks, is kept out
    assert {r.model for r in rows if r.exclude} == {"deepseek2 30B.A3B"}
    # gpt-oss-120b, 32 sequences after 512-token prompts: T_TG = 2.898 s for 32 steps
    # (benches/dgx-spark/dgx-spark.md, S_TG 353.31 t/s = 32 x 32 / 2.898); it maps, but is
    # not scored (test_batched_bench_moe_rows_are_mapped_but_not_scored)
    s = scenario_for(bundled_row("llamacpp_dgx_spark.csv", "SPRK-0096"))
    assert (s.kind, s.model.name, s.precision.weights) == ("decode", "gpt-oss-120b",
                                                           "MXFP4_MOE")
    assert s.workload.batch_size == 32 and s.measured_s == pytest.approx(2.898 / 32, rel=2e-3)
    s = configured_row("llamacpp_dgx_spark.csv", "SPRK-0091")  # the same table, B = 1
    assert (s.model.name, s.precision.weights, s.workload.batch_size) == (
        "gpt-oss-120b", "MXFP4_MOE", 1)
    assert s.measured_s == pytest.approx(1 / 57.14)
    s = configured_row("llamacpp_m2_ultra.csv", "M2UB-0065")  # tg32, llama-bench
    assert (s.model.name, s.precision.weights) == ("gpt-oss-20b", "MXFP4_MOE")
    assert s.measured_s == pytest.approx(1 / 129.97)

def test_batched_bench_moe_rows_are_mapped_but_not_scored():
    # llama-batched-bench adds token id 0 at every position of every sequence, so a MoE
    # step over B > 1 sequences routes copies, and its prompt is one token repeated: the
    # rows map but are excluded, saying why. One sequence's decode, dense models under the
    # same tool, and llama-bench's random-token prompts of the same MoE models are scored.
    data = dataset([load_measurements(MEASUREMENTS_DIR / "llamacpp_dgx_spark.csv")])
    scored = {s.record_id for s in data.scenarios}
    why = {p.record_id: p.reason for p in data.excluded}
    same_token = scenario_module.UNSCORABLE_SAME_TOKEN
    assert "token id 0" in same_token and "copies" in same_token
    assert why["SPRK-0096"] == same_token                         # gpt-oss-120b, B 32
    assert why["SPRK-0103"] == same_token                         # its PP 512 prompt
    assert why["SPRK-0008"] == same_token                         # Qwen3-30B-A3B, B 2
    assert {"SPRK-0091", "SPRK-0007", "SPRK-0033", "SPRK-0001"} <= scored
    # the page's MoE batched-bench rows: 3 models x (5 batch sizes x 2 prompts + 3 prompts)
    assert list(why.values()).count(same_token) == 3 * (5 * 2 + 3)
    # the rule reads the tool, not the page: the same MoE step from llama-bench is scored
    s = scenario_for(bundled_row("llamacpp_dgx_spark.csv", "SPRK-0096"))
    assert scenario_module.unscorable(s, "llama.cpp llama-bench, CUDA backend") == ""
    assert scenario_module.unscorable(s, "llama.cpp llama-batched-bench, CUDA") != ""


def test_ci_rows_whose_gpu_variant_is_unknown_are_excluded():
    rows = load_measurements(MEASUREMENTS_DIR / "vllm_ci_latency.csv").rows
    excluded = {r.hardware for r in rows if r.exclude}
    kept = {r.hardware for r in rows if not r.exclude}
    assert excluded == {"H100", "H200"} and kept == {"A100-SXM4-80GB"}

@pytest.mark.parametrize("file", NEW_FILES)
def test_every_row_maps_or_says_why_it_is_excluded(file):
    loaded = load_measurements(MEASUREMENTS_DIR / file)
    assert loaded.problems == () and loaded.unknown_columns == ()
    assert len(loaded.sources) == 1  # one source per file
    for row in loaded.rows:
        assert row.source_url and row.source_locator, row.record_id
        if not row.exclude:
            scenario_for(row)


def test_the_readme_lists_every_bundled_file_with_its_row_count():
    readme = (MEASUREMENTS_DIR / "README.md").read_text()
    for file in NEW_FILES:
        match = re.search(rf"^\| `{re.escape(file)}` \|[^|]*\| (\d+) \|", readme, re.M)
        assert match, file
        assert int(match[1]) == len(load_measurements(MEASUREMENTS_DIR / file).rows)


def test_a_parameter_count_that_is_not_a_number_names_the_row(tmp_path: Path):
    path = tmp_path / "m.csv"
    path.write_text("record_id,phase,source_name,hardware,model,model_params_b,weight_dtype,"
                    "software_stack,parallelism,batch_or_concurrency,input_len,output_len,"
                    "metric,value,unit\n"
                    "A,prefill,s,RTX 4090,llama 7B,6.74,Q4_0,llama.cpp,,1,512,,pp512_throughput,"
                    "5000,tokens/s\n"
                    "B,prefill,s,RTX 4090,llama 7B,seven,Q4_0,llama.cpp,,1,512,,pp512_throughput,"
                    "5000,tokens/s\n")
    loaded = load_measurements(path)
    assert [r.model_params_b for r in loaded.rows] == [6.74]
    assert [(p.record_id, p.line) for p in loaded.problems] == [("B", 3)]
    assert "model_params_b" in loaded.problems[0].reason
