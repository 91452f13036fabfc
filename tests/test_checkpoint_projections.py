"""A checkpoint that quantizes some attention projections and not others (NVIDIA's
DeepSeek-V3.1-NVFP4 keeps q_a/q_b/kv_a/kv_b in bf16 and quantizes o_proj): each projection
is sized at its own format, weighed by its parameters."""

import pytest

import phasewise
from phasewise.catalog import model_from_config
from phasewise.catalog.hf_quant import excluded_projections
from phasewise.catalog.models import load_model
from phasewise.ledger import Step, build_ledger
from phasewise.ledger.memory import weight_bytes_per_device
from phasewise.report.estimate_view import headline
from phasewise.specs import Parallelism, Precision

H = 256
# A small MLA model, NVFP4 with the four down/up projections of both layers excluded.
MLA = {"model_type": "deepseek_v3", "hidden_size": H, "num_hidden_layers": 2,
       "num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
       "qk_nope_head_dim": 32, "v_head_dim": 32, "intermediate_size": 512, "vocab_size": 1000,
       "tie_word_embeddings": False, "num_key_value_heads": 4}
EXCLUDED = ["lm_head"] + [f"model.layers.{i}.self_attn.{part}" for i in range(2)
                          for part in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")]
SIDECAR = {"quantization": {"quant_algo": "NVFP4", "group_size": 16,
                            "exclude_modules": EXCLUDED}}
# Per layer: q_a 256·64, q_b 64·4·48, kv_a 256·48, kv_b 32·4·64, o 4·32·256, norms 64 + 32.
BF16_PARTS = 256 * 64 + 64 * 4 * 48 + 256 * 48 + 32 * 4 * 64 + 64 + 32
O_PROJ = 4 * 32 * 256
NVFP4 = 0.5 + 1 / 16  # 4 bits and one fp8 scale per 16


def test_the_projections_the_checkpoint_does_not_exclude_keep_its_format():
    model = model_from_config(MLA, "mla-nvfp4", sidecar=SIDECAR)
    assert model.checkpoint.projections == (("o_proj", "nvfp4"),)
    assert dict(model.checkpoint.weights)["attention"] == "bf16"


def test_mixer_weights_are_the_parameter_weighted_mean_of_their_projections():
    model = model_from_config(MLA, "mla-nvfp4", sidecar=SIDECAR)
    ledger = build_ledger(model, Step.decode(1, 10))
    mixer_ops = ("attn.qkv_a", "attn.q_b", "attn.kv_b", "attn.out", "attn.norm")
    weights = sum(op.weights for op in ledger.ops if op.name in mixer_ops)
    # Every mixer weight the step reads (the projections and the block's pre-norm; the
    # latent norms are not read as operators) at Σ params·bytes / Σ params.
    mean = (BF16_PARTS * 2 + O_PROJ * NVFP4) / (BF16_PARTS + O_PROJ)
    assert weights == pytest.approx(2 * (BF16_PARTS - (64 + 32) + O_PROJ + H) * mean)


def test_memory_sizes_each_projection_at_its_format():
    model = model_from_config(MLA, "mla-nvfp4", sidecar=SIDECAR)
    weights = weight_bytes_per_device(model, Precision(), Parallelism())
    mlp = 2 * 3 * H * 512
    rest = 1000 * H * 2 + 1000 * H * 2 + (2 * 2 + 1) * H * NVFP4  # embed, head; norms as mlp
    expected = 2 * (BF16_PARTS * 2 + O_PROJ * NVFP4) + mlp * NVFP4 + rest
    assert weights == pytest.approx(expected)


def test_an_explicit_weight_format_sizes_every_projection_alike():
    model = model_from_config(MLA, "mla-nvfp4", sidecar=SIDECAR)
    assert Precision(weights="fp8").for_model(model).projection_weights == ()


def test_a_checkpoint_excluding_every_projection_keeps_attention_whole():
    every = EXCLUDED + [f"model.layers.{i}.self_attn.o_proj" for i in range(2)]
    model = model_from_config(MLA, "mla", sidecar={"quantization": {
        "quant_algo": "NVFP4", "exclude_modules": every}})
    assert model.checkpoint.projections == ()
    assert dict(model.checkpoint.weights)["attention"] == "bf16"


def test_a_wildcard_exclusion_is_the_whole_class():
    assert excluded_projections(["model.layers.*.self_attn"], 2) is None
    assert excluded_projections(["model.layers.0.self_attn.q_proj"], 4) == set()
    assert excluded_projections(["model.layers.0.self_attn.indexer*",
                                 "model.layers.1.self_attn.indexer*"], 2) == {"indexer"}


def test_the_estimate_says_which_projection_differs():
    est = phasewise.estimate(load_model("deepseek-v3.1-nvfp4"), "b200",
                             parallelism=Parallelism(tp=8))
    assert est.inputs.projection_formats == {"o_proj": "nvfp4"}
    assert "attention bf16 but o_proj nvfp4" in headline(est)
