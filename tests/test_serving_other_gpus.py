"""Serving rows on GPUs outside the Hopper sample: system names, quantization labels per
device, quantized checkpoints, wide expert parallelism on NVL72, and synthetic Blackwell
copies of Hopper rows replayed with physical sanity against the row they came from.

The Blackwell rows here are written by the test from Hopper rows (the system and the labels
changed, nothing measured); no held-out measurement is read.
"""

from __future__ import annotations

import csv
import dataclasses
import math

import pytest

from phasewise.catalog import load_hardware, load_model
from phasewise.catalog.checkpoints import checkpoint_table, network_of
from phasewise.catalog.quant_modes import serving_precision
from phasewise.catalog.system_names import resolve_system, system_table
from phasewise.cost.base import hardware_for_collective
from phasewise.errors import InputError
from phasewise.ledger import Step, build_ledger
from phasewise.serving.layouts import engine_layout
from phasewise.specs.compute import precision_on
from phasewise.validate.scenario import MappingError
from phasewise.validate.serving import SERVING_FILE, Pool, ServingRow, load_serving, replay
from phasewise.validate.serving_inputs import row_model

# Memory bandwidth per GPU in GB/s as the sheets state it, from their sources: H100 SXM 3.35
# TB/s and H200 4.8 TB/s (NVIDIA datasheets); HGX B200 and B300 62 TB/s / 8 ~ 7.7 TB/s; GB200
# and GB300 NVL72 576 TB/s / 72 = 8 TB/s.
BANDWIDTH_GB_S = {"h100_sxm": 3350, "h200_sxm": 4800, "b200_sxm": 7700, "b300_sxm": 7700,
                  "gb200": 8000, "gb300": 8000}
# Dense bf16 matmul peaks in TFLOPS as the sheets state them (fp8 is twice each on every one
# of these parts): H100/H200 989.4; HGX B200 and B300 36 PF / 8 / 2 = 2,250; GB200 and GB300
# NVL72 360 PF / 72 / 2 = 2,500.
BF16_TFLOPS = {"h100_sxm": 989.4, "h200_sxm": 989.4, "b200_sxm": 2250.0, "b300_sxm": 2250.0,
               "gb200": 2500.0, "gb300": 2500.0}
BLACKWELL = ("b200_sxm", "gb200", "b300_sxm", "gb300")
# Bits per weight: FP8 e4m3 8; NVFP4 16 e2m1 values (4 bits) + one fp8 scale = 4.5
FP8_BITS, NVFP4_BITS = 8, 4 + 8 / 16
# A replay's TPOT is decode steps (bandwidth-bound), the prompt chunks that share them
# (compute-bound) and the engine's fixed host time: a faster device shrinks each step by at
# most the smaller of its bandwidth and peak ratios and leaves the host time. A closed loop
# is not linear in the step time, though: on the faster device fewer decode steps wait
# behind a prefill (SGLang's prefill-first loop at ISL 1024 and 16 clients: the ratio is
# 0.42 against a bandwidth ratio of 0.435), so the lower bound allows the queueing this much;
# a wrong sheet figure or format (2x) stays far outside it.
SLACK = 0.06


def test_aiconfigurator_system_names_name_their_sheets():
    # aiconfigurator sdk/common.py SupportedSystems and systems/*.yaml file names
    expected = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "h800_sxm": "h800",
                "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "gb200_sxm": "gb200",
                "gb300": "gb300", "a100_sxm": "a100-80gb-sxm", "l40s": "l40s"}
    assert {name: resolve_system(name) for name in expected} == expected
    # InferenceX runner labels and the names the sheets' own aliases carry
    assert [resolve_system(n) for n in ("b200-trt", "h200", "mi355x", "NVIDIA B300 SXM6 AC")] \
        == ["b200", "h200-sxm", "mi355x", "b300"]


def test_every_system_row_names_an_existing_sheet():
    for name, row in system_table().items():
        assert load_hardware(row["sheet"]).name == row["sheet"], name
        assert row["source"] and not row["source"].isidentifier(), f"{name}: source not spelled out"


def test_an_unknown_system_is_refused_naming_the_nearest_known_one():
    with pytest.raises(InputError, match=r"unknown system 'h20_3e'.*h20"):
        resolve_system("h20_3e")


@pytest.mark.parametrize(("repo", "network"), [
    ("nvidia/DeepSeek-R1-FP4", "deepseek-r1"), ("nvidia/DeepSeek-R1-0528-FP4-v2", "deepseek-r1"),
    ("nvidia/Qwen3-235B-A22B-FP4", "qwen3-235b-a22b"), ("nvidia/Llama-3.3-70B-Instruct-FP4", "llama-3.1-70b"),
    ("nvidia/Kimi-K2.5-NVFP4", "kimi-k2.5")])
def test_a_quantized_checkpoint_takes_its_networks_shapes(repo, network):
    assert network_of(repo) == network
    assert row_model(repo).name == load_model(network).name


def test_every_checkpoint_row_names_a_catalog_network_and_a_source():
    for repo, row in checkpoint_table().items():
        assert load_model(row["network"]), repo
        assert row["source"].startswith(("https://", "aiconfigurator")), repo


@pytest.mark.parametrize("repo", [
    "deepseek-ai/DeepSeek-V3.2", "Qwen/Qwen3-235B-A22B-FP8", "openai/gpt-oss-20b",
    "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-Next-80B-A3B-Instruct", "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "moonshotai/Kimi-K2-Instruct", "MiniMaxAI/MiniMax-M2", "nvidia/DeepSeek-V3.1-NVFP4",
    "zai-org/GLM-4.6", "deepseek-ai/DeepSeek-V3.1"])
def test_model_paths_of_other_gpus_rows_resolve(repo):
    assert row_model(repo).layer_groups


def test_a_network_outside_the_catalog_is_refused_by_name():
    with pytest.raises((InputError, MappingError), match="Qwen3-Coder-480B"):
        row_model("Qwen/Qwen3-Coder-480B-A35B-Instruct")


def test_nvfp4_is_fp4_compute_on_blackwell_and_weight_only_on_hopper():
    model = load_model("deepseek-r1")
    for device, math_format in (("b200", "fp4"), ("gb300", "fp4"), ("h200-sxm", "bf16")):
        hw = load_hardware(device)
        precision = serving_precision("nvfp4", "nvfp4", hw, model, engine="trtllm")
        assert precision.weight_bytes_for("experts") == NVFP4_BITS / 8
        assert precision_on(precision, hw).math_format == math_format


def test_gpt_oss_keeps_its_mxfp4_checkpoint_with_each_engines_activations():
    model = load_model("gpt-oss-120b")
    mxfp4_bytes = (4 + 8 / 32) / 8  # 32 e2m1 values share one e8m0 scale (OCP MX)
    cases = {("h200-sxm", "trtllm"): "bf16", ("b200", "trtllm"): "fp8",
             ("b200", "sglang"): "fp8", ("b200", "vllm"): "bf16"}
    for (device, engine), math_format in cases.items():
        hw = load_hardware(device)
        precision = serving_precision("nvfp4", "nvfp4", hw, model, engine=engine)
        assert precision.weights == "fp4" and precision.weight_bytes_for("experts") == mxfp4_bytes
        assert precision_on(precision, hw).math_format == math_format, (device, engine)


def test_mixed_labels_run_weight_only_where_the_device_lacks_a_format():
    hw_h, hw_b = load_hardware("h200-sxm"), load_hardware("b200")
    model = load_model("gpt-oss-120b")
    assert precision_on(serving_precision("w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8", hw_b, model),
                        hw_b).math_format == "fp8"
    assert precision_on(serving_precision("w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8", hw_h, model),
                        hw_h).math_format == "bf16"  # Hopper has no FP4 units
    with pytest.raises(InputError, match="'int3_magic' is not mapped"):
        serving_precision("int3_magic", "", hw_b, model)


def test_the_moe_label_sets_the_experts_and_the_gemm_label_the_rest():
    model, hw = load_model("deepseek-r1"), load_hardware("b200")
    precision = serving_precision("fp8", "nvfp4", hw, model)
    assert precision.weight_bytes_for("experts") == NVFP4_BITS / 8
    # DeepSeek's checkpoint stores FP8 with one fp32 scale per 128x128 block
    assert precision.weight_bytes_for("attention") == (8 + 32 / (128 * 128)) / 8


def test_wide_ep_collectives_stay_on_nvlink_inside_an_nvl72_rack():
    model = load_model("deepseek-r1")
    par = engine_layout(tp=1, attention_dp=32, moe_tp=1, moe_ep=32, is_moe=True)
    ledger = build_ledger(model, Step.decode(32, context_tokens=1024), parallelism=par)
    comm = [op for op in ledger.ops if op.kind == "communication"]
    assert comm
    gb200, b200 = load_hardware("gb200"), load_hardware("b200")
    # 32 GPUs: inside GB200's 72-GPU NVLink domain, beyond B200's 8-GPU board
    assert {hardware_for_collective(gb200, op, ledger).interconnect.name for op in comm} \
        == {gb200.interconnect.name}
    assert {hardware_for_collective(b200, op, ledger).interconnect.name for op in comm} \
        == {b200.scale_out.name}


def _hopper_rows(per_key: int) -> list[ServingRow]:
    """The ``per_key`` lowest-concurrency rows of every (model, engine, mode, labels)."""
    rows, _ = load_serving()
    keyed: dict[tuple, list[ServingRow]] = {}
    for row in sorted(rows, key=lambda r: r.concurrency):
        keyed.setdefault((row.model, row.engine, row.mode, row.gemm_quant, row.moe_quant), []).append(row)
    return [r for group in keyed.values() for r in group[:per_key]]


def _check_against_hopper(base, moved, system: str) -> None:
    for value in (moved.ttft_s, moved.tpot_s):
        assert math.isfinite(value) and value > 0
    ratio = moved.tpot_s / base.tpot_s
    old = base.row.hardware
    floor = min(BANDWIDTH_GB_S[old] / BANDWIDTH_GB_S[system], BF16_TFLOPS[old] / BF16_TFLOPS[system])
    assert floor * (1 - SLACK) <= ratio <= 1 + SLACK, (base.row.record_id, system, ratio, floor)


def _replay_set(per_key: int, systems, prompts_per_client: int):
    results, refused = [], []
    for row in _hopper_rows(per_key):
        try:
            base = replay(row, prompts_per_client=prompts_per_client)
        except InputError:
            continue  # refused on Hopper already: not a question of the device
        for system in systems:
            moved = dataclasses.replace(row, hardware=system, record_id=f"{row.record_id}@{system}")
            try:
                results.append((base, replay(moved, prompts_per_client=prompts_per_client), system))
            except InputError as err:
                refused.append((moved.record_id, str(err)))
    return results, refused


def test_hopper_rows_moved_to_b200_and_gb200_replay_within_the_bandwidth_bounds():
    results, refused = _replay_set(1, ("b200_sxm", "gb200"), prompts_per_client=2)
    assert not refused
    assert len(results) >= 40
    for base, moved, system in results:
        _check_against_hopper(base, moved, system)


def test_nvfp4_weights_cut_blackwell_decode_by_at_most_the_weight_bytes():
    # Layouts inside one 8-GPU board: wider ones are bound by collectives, which the ledger
    # prices in the activations' format (fp8 under W8A8, bf16 under W4A4), not the weights'.
    # Prompts up to 1k tokens: a longer prompt's chunks share the decode steps, and their
    # attention runs in the ledger's one math format (bf16 under W4A4, fp8 under W8A8), so
    # at 8k a W4A4 step can be the slower one (DeepSeek-R1 at ISL 8192, 4 clients: +1%).
    rows = [r for r in _hopper_rows(1) if r.gemm_quant == "fp8" and r.concurrency <= 8
            and r.isl <= 1024 and max(p.tp * p.attention_dp for p in r.pools) <= 8
            and r.model in ("deepseek-ai/DeepSeek-R1", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B")]
    assert rows
    for row in rows:
        fp8 = replay(dataclasses.replace(row, hardware="b200_sxm"), prompts_per_client=2)
        fp4 = replay(dataclasses.replace(row, hardware="b200_sxm", gemm_quant="nvfp4",
                                         moe_quant="nvfp4"), prompts_per_client=2)
        ratio = fp4.tpot_s / fp8.tpot_s
        assert NVFP4_BITS / FP8_BITS * (1 - SLACK) <= ratio < 1, (row.record_id, ratio)


def test_disaggregated_wide_ep_on_nvl72_replays():
    rows, _ = load_serving()
    base = next(r for r in rows if r.model == "deepseek-ai/DeepSeek-R1" and r.mode == "disagg")
    prefill = Pool(workers=4, tp=1, attention_dp=8, moe_tp=1, moe_ep=8, batch=1)
    for system in ("gb200", "gb300"):
        for width in (16, 32, 64):
            decode = Pool(workers=1, tp=1, attention_dp=width, moe_tp=1, moe_ep=width, batch=8 * width)
            row = dataclasses.replace(base, hardware=system, pools=(prefill, decode),
                                      concurrency=4 * width, gemm_quant="nvfp4", moe_quant="nvfp4")
            result = replay(row, prompts_per_client=2)
            assert result.devices == 4 * 8 + width
            assert math.isfinite(result.tpot_s) and math.isfinite(result.ttft_s)


@pytest.mark.slow
def test_a_synthetic_blackwell_set_is_simulated_not_refused():
    """Two rows of every Hopper (model, engine, mode, labels), moved to each Blackwell system
    and, for the FP8 ones, relabelled NVFP4: at least 95% simulated, none with NaN."""
    results, refused = _replay_set(2, BLACKWELL, prompts_per_client=3)
    rows = _hopper_rows(2)
    relabelled = [dataclasses.replace(r, hardware=s, gemm_quant="nvfp4", moe_quant="nvfp4")
                  for r in rows if r.gemm_quant.startswith("fp8") for s in ("b200_sxm", "gb200")]
    for row in relabelled:
        try:
            result = replay(row, prompts_per_client=3)
            assert math.isfinite(result.tpot_s) and math.isfinite(result.ttft_s)
        except InputError as err:
            refused.append((row.record_id, str(err)))
    total = len(results) + len(relabelled)
    assert len(refused) <= 0.05 * total, refused
    for base, moved, system in results:
        _check_against_hopper(base, moved, system)


def test_a_kv_cache_label_sets_the_cache_format_and_an_empty_one_keeps_the_checkpoints():
    hw = load_hardware("gb200")
    llama, nvfp4 = load_model("llama-3.1-8b"), load_model("deepseek-v3.1-nvfp4")
    assert serving_precision("fp8", "", hw, llama, kv_label="fp8").kv_bytes == 1
    assert serving_precision("fp8", "", hw, llama).kv_bytes == 2  # bf16: the config declares none
    # nvidia/DeepSeek-V3.1-NVFP4's hf_quant_config: kv_cache_quant_algo FP8
    assert serving_precision("nvfp4", "nvfp4", hw, nvfp4).kv_bytes == 1
    with pytest.raises(InputError, match="KV-cache label 'fp2'"):
        serving_precision("fp8", "", hw, llama, kv_label="fp2")


def test_the_kvcache_column_is_read_where_a_file_has_one(tmp_path):
    with SERVING_FILE.open() as f:
        reader = csv.DictReader(f)
        row = next(reader)
        header = list(reader.fieldnames) + ["kvcache_quant_mode"]
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerow({**row, "system": "gb300", "kvcache_quant_mode": "fp8"})
    (read,), problems = load_serving(path)
    assert not problems and (read.kv_quant, read.device) == ("fp8", "gb300")
