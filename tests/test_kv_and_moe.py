"""KV bytes per token and MoE expert arithmetic, from hand calculations."""

import pytest

from phasewise.catalog import load_model
from phasewise.ledger import Step, build_ledger, expected_distinct_experts, param_counts
from phasewise.specs import Precision


def test_kv_bytes_per_token_llama_31_8b_bf16():
    # 32 layers · 2 (K and V) · 8 KV heads · 128 dims · 2 bytes
    assert param_counts(load_model("llama-3.1-8b"), kv_bytes=2).kv_bytes_per_token == 131_072


def test_kv_bytes_per_token_deepseek_v3_mla_bf16():
    # 61 layers · (kv_lora_rank 512 + qk_rope_head_dim 64) · 2 bytes
    assert param_counts(load_model("deepseek-v3"), kv_bytes=2).kv_bytes_per_token == 70_272


def test_kv_bytes_follow_the_kv_format():
    fp8 = param_counts(load_model("llama-3.1-8b"), kv_bytes=1).kv_bytes_per_token
    assert fp8 == 65_536


@pytest.mark.parametrize("tokens,expected", [
    (1, 8 * (1 - 0.75)),          # one token touches exactly its top-2
    (8, 8 * (1 - 0.75 ** 8)),     # 7.199
    (64, 8 * (1 - 0.75 ** 64)),   # all 8, to 8 decimals
])
def test_mixtral_distinct_experts(tokens, expected):
    assert expected_distinct_experts(8, 2, tokens) == pytest.approx(expected)


def test_mixtral_expert_weight_bytes_follow_distinct_experts():
    model = load_model("mixtral-8x7b")
    expert_bytes = 3 * 4096 * 14336 * 2  # one expert's gate, up, down in bf16
    for batch, distinct in ((1, 2.0), (8, 8 * (1 - 0.75 ** 8))):
        ledger = build_ledger(model, Step.decode(batch, 100), Precision())
        experts = ledger.select("moe.experts")
        assert sum(op.weights for op in experts) == pytest.approx(32 * distinct * expert_bytes)


def test_moe_flops_follow_routed_tokens_not_distinct_experts():
    model = load_model("mixtral-8x7b")
    ledger = build_ledger(model, Step.decode(8, 100), Precision())
    flops = sum(op.flops for op in ledger.select("moe.experts"))
    assert flops == pytest.approx(32 * 8 * 2 * 2 * 3 * 4096 * 14336)  # layers·T·k·2·params


def test_deepseek_v3_has_three_dense_layers_then_moe():
    groups = {g.mlp: g.count for g in load_model("deepseek-v3").layer_groups}
    assert groups == {"dense": 3, "moe": 58}


def test_mxfp4_moe_file_type_stores_experts_in_mxfp4_and_the_rest_in_q8_0():
    # llama.cpp's MXFP4_MOE file type (llama-quant.cpp: 'MoE tensors -> MXFP4, other
    # tensors -> Q8_0'): block_mxfp4 is 17 B per 32 weights (4.25 bits), block_q8_0 34 B
    # per 32 (8.5 bits). gpt-oss-20b (config.json): 24 layers, hidden 2880, 32 experts of
    # 3 x 2880 x 2880, top-4, 64 query and 8 KV heads of 64 dims.
    model = load_model("gpt-oss-20b")
    precision = Precision("MXFP4 MoE", "fp16", "fp16")
    assert precision.weights == "MXFP4_MOE"
    assert (precision.weight_bytes, precision.expert_weight_bytes) == (8.5 / 8, 4.25 / 8)
    ledger = build_ledger(model, Step.decode(1, 100), precision)
    expert = 3 * 2880 * 2880
    experts = sum(op.weights for op in ledger.select("moe.experts"))
    assert experts == pytest.approx(24 * 4 * expert * 4.25 / 8)  # one token: its top-4
    qkv = sum(op.weights for op in ledger.select("attn.qkv"))
    assert qkv == pytest.approx(24 * 2880 * (64 + 2 * 8) * 64 * 8.5 / 8)
    # llama-bench prints 11.27 GiB for this file and 59.02 GiB for gpt-oss-120b (llama.cpp
    # benches/dgx-spark/dgx-spark.md); the rest is F32 norms, biases and attention sinks
    from phasewise.ledger import weight_bytes_per_device
    from phasewise.specs import Parallelism
    for name, gib in (("gpt-oss-20b", 11.27), ("gpt-oss-120b", 59.02)):
        held = weight_bytes_per_device(load_model(name), precision, Parallelism()) / 2**30
        assert held == pytest.approx(gib, rel=0.01)
