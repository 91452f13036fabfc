"""Real weights: safetensors folders and GGUF files load into the reference transformer,
and bad files say exactly what is wrong."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
safetensors_torch = pytest.importorskip("safetensors.torch")

from phasewise.errors import InputError  # noqa: E402
from phasewise.measure.gguf_file import (  # noqa: E402
    hf_name,
    load_gguf,
    open_gguf,
    spec_from_gguf,
    unpermute_rope_rows,
)
from phasewise.measure.loading import load_weights, resolve_spec  # noqa: E402
from phasewise.measure.reference import build_model  # noqa: E402
from phasewise.measure.weights import checkpoint_layout  # noqa: E402
from phasewise.specs import ModelSpec  # noqa: E402

SPEC = ModelSpec(name="tiny-llama", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                 head_dim=8, intermediate_size=48, vocab_size=64, model_type="llama",
                 rope_theta=10000.0, max_context=128)
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 128,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}


def checkpoint(spec: ModelSpec = SPEC, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {part.name: torch.randn(part.shape, generator=generator)
            for slot in checkpoint_layout(spec) for part in slot.parts}


def llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py, LlamaModel.permute: rotate-half rows to interleaved pairs."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_folder(folder, tensors, config=CONFIG):
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    safetensors_torch.save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_a_safetensors_folder_fills_the_fused_projections_in_order(tmp_path):
    tensors = checkpoint()
    folder = write_folder(tmp_path / "model", tensors)
    spec = resolve_spec(None, str(folder))
    model = build_model(spec)
    load_weights(model, spec, str(folder))
    attn = model.layers[1].attn.wqkv.weight
    q, k, v = attn.split((32, 16, 16))
    torch.testing.assert_close(q, tensors["model.layers.1.self_attn.q_proj.weight"])
    torch.testing.assert_close(v, tensors["model.layers.1.self_attn.v_proj.weight"])
    gate, up = model.layers[0].mlp.w_up.weight.split((48, 48))
    torch.testing.assert_close(up, tensors["model.layers.0.mlp.up_proj.weight"])
    torch.testing.assert_close(model.lm_head.weight, tensors["lm_head.weight"])


def test_routed_experts_fill_their_rows_of_the_stacked_expert_weights():
    from phasewise.measure.weights import load_into

    spec = ModelSpec(name="tiny-moe", hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=8, intermediate_size=48, vocab_size=64, num_experts=4,
                     experts_per_token=2, moe_intermediate_size=16, model_type="qwen2_moe")
    tensors = checkpoint(spec)
    model = build_model(spec)
    load_into(model, spec, tensors.__getitem__)
    mlp, hf = model.layers[1].mlp, "model.layers.1.mlp.experts"
    assert mlp.w_up.shape == (4, 32, 32) and mlp.w_down.shape == (4, 32, 16)
    for j in range(4):
        gate, up = mlp.w_up[j].split((16, 16))
        torch.testing.assert_close(gate, tensors[f"{hf}.{j}.gate_proj.weight"])
        torch.testing.assert_close(up, tensors[f"{hf}.{j}.up_proj.weight"])
        torch.testing.assert_close(mlp.w_down[j], tensors[f"{hf}.{j}.down_proj.weight"])
    torch.testing.assert_close(mlp.router.weight, tensors["model.layers.1.mlp.gate.weight"])


def test_a_weights_folder_that_disagrees_with_its_config_names_the_first_bad_tensor(tmp_path):
    tensors = checkpoint()
    tensors["model.layers.0.mlp.down_proj.weight"] = torch.zeros(32, 40)  # should be 32 × 48
    tensors["model.layers.1.mlp.down_proj.weight"] = torch.zeros(32, 40)
    folder = write_folder(tmp_path / "model", tensors)
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.down_proj\.weight has shape "
                                         r"\[32, 40\] but the config of .* gives \[32, 48\]"):
        load_weights(build_model(SPEC), SPEC, str(folder))


def test_missing_and_foreign_tensors_are_named(tmp_path):
    tensors = checkpoint()
    del tensors["model.norm.weight"]
    with pytest.raises(InputError, match=r"model\.norm\.weight is missing"):
        load_weights(build_model(SPEC), SPEC, str(write_folder(tmp_path / "a", tensors)))
    tensors = checkpoint() | {"model.layers.0.mlp.experts.0.up_proj.weight": torch.zeros(2, 2)}
    with pytest.raises(InputError, match=r"experts\.0\.up_proj\.weight has no place"):
        load_weights(build_model(SPEC), SPEC, str(write_folder(tmp_path / "b", tensors)))


def test_unpermute_undoes_llama_cpps_rope_permutation():
    rows = np.arange(4 * 8 * 3, dtype=np.float32).reshape(4 * 8, 3)  # 4 heads of 8 rows
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(rows, 4), 4), rows)
    # one head of d = 4: rows (0, 1, 2, 3) are stored interleaved as (0, 2, 1, 3)
    assert llama_cpp_permute(np.arange(4.0), 1).tolist() == [0, 2, 1, 3]


def test_gguf_names_map_to_the_hugging_face_layout():
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.7.ffn_gate.weight") == "model.layers.7.mlp.gate_proj.weight"
    assert hf_name("blk.0.attn_output.weight") == "model.layers.0.self_attn.o_proj.weight"
    assert hf_name("blk.0.ffn_gate_exps.weight") == "blk.0.ffn_gate_exps.weight"


GGUF_NAMES = {v: k for k, v in {
    "token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight"}.items()}
BLOCK = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(name: str) -> str:
    if name in GGUF_NAMES:
        return GGUF_NAMES[name]
    _, _, layer, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{BLOCK[module]}.{kind}"


def write_gguf(path, tensors, *, odd_tensor=None):
    """A GGUF file as llama.cpp's converter writes a llama model: F32 tensors, Q/K rows
    permuted, metadata under llama.*."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(48)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(64)
    for name, value in tensors.items():
        array = value.numpy()
        if name.endswith("q_proj.weight"):
            array = llama_cpp_permute(array, 4)
        elif name.endswith("k_proj.weight"):
            array = llama_cpp_permute(array, 2)
        writer.add_tensor(gguf_name(name), np.ascontiguousarray(array))
    if odd_tensor:
        odd_tensor(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_file_loads_the_same_weights_as_the_checkpoint_it_came_from(tmp_path):
    tensors = checkpoint(seed=3)
    path = write_gguf(tmp_path / "tiny.gguf", tensors)
    spec = spec_from_gguf(open_gguf(path), "tiny")
    assert (spec.hidden_size, spec.num_layers, spec.num_kv_heads, spec.head_dim,
            spec.tie_word_embeddings) == (32, 2, 2, 8, False)
    from_gguf, from_folder = build_model(spec), build_model(spec)
    load_gguf(from_gguf, spec, path)
    load_weights(from_folder, spec, str(write_folder(tmp_path / "model", tensors)))
    for (name, a), (_, b) in zip(from_gguf.state_dict().items(), from_folder.state_dict().items(), strict=False):
        torch.testing.assert_close(a, b, msg=name)


def test_a_tensor_type_the_gguf_package_cannot_dequantize_is_named(tmp_path):
    def q8_1_tensor(writer):
        block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1][1]  # bytes per 32 values
        writer.add_tensor("blk.0.attn_q.weight", np.zeros((32, block), dtype=np.uint8),
                          raw_dtype=gguf.GGMLQuantizationType.Q8_1)

    tensors = checkpoint()
    del tensors["model.layers.0.self_attn.q_proj.weight"]  # written as Q8_1 instead
    path = write_gguf(tmp_path / "odd.gguf", tensors, odd_tensor=q8_1_tensor)
    with pytest.raises(InputError, match=r"tensor blk\.0\.attn_q\.weight has GGUF type Q8_1"):
        load_gguf(build_model(SPEC), SPEC, path)


def test_weights_that_are_neither_gguf_nor_a_folder_are_refused(tmp_path):
    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"\0")
    with pytest.raises(InputError, match="give a .gguf file or a folder"):
        load_weights(build_model(SPEC), SPEC, str(stray))
    with pytest.raises(InputError, match="no \\*.safetensors"):
        load_weights(build_model(SPEC), SPEC, str(tmp_path))
