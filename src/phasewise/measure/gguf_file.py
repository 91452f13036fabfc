"""GGUF files (llama.cpp's format): the model's shape from the metadata, the tensors renamed
to the Hugging Face layout and dequantized to fp32 with ``gguf.quants.dequantize``.

llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``) reorders the
rows of q_proj and k_proj of llama-architecture models from the rotate-half RoPE layout to
the interleaved one its kernels use; ``unpermute_rope_rows`` undoes that.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.specs import ModelSpec

GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
# Architectures whose converter permutes the Q/K rows for llama.cpp's RoPE kernels.
PERMUTED_ARCHITECTURES = ("llama",)


def open_gguf(path: str | Path) -> Any:
    """A ``gguf.GGUFReader`` (memory-mapped), or a clear error."""
    try:
        import gguf
    except ImportError:
        raise InputError("reading GGUF files needs the gguf package: pip install "
                         "'phasewise[profile]'.") from None
    if not Path(path).is_file():
        raise InputError(f"GGUF file {path} does not exist; check the path.")
    try:
        return gguf.GGUFReader(str(path))
    except ValueError as err:
        if "GGMLQuantizationType" in str(err):
            raise InputError(f"{path}: a tensor has a GGUF tensor type this gguf package does "
                             f"not know ({err}); upgrade gguf or requantize the file.") from None
        raise InputError(f"{path}: not a readable GGUF file ({err}).") from None


def metadata(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def spec_from_gguf(reader: Any, name: str) -> ModelSpec:
    """A ModelSpec from the ``{arch}.*`` metadata of a dense llama-like GGUF file."""
    arch = metadata(reader, "general.architecture", "llama")

    def need(key: str) -> Any:
        value = metadata(reader, f"{arch}.{key}")
        if value is None:
            raise InputError(f"{name}: the GGUF metadata lacks {arch}.{key}; give --model "
                             "with the model's config.")
        return value

    heads, hidden = int(need("attention.head_count")), int(need("embedding_length"))
    tensors = {t.name for t in reader.tensors}
    vocab = (metadata(reader, f"{arch}.vocab_size")
             or len(reader.fields["tokenizer.ggml.tokens"].data))
    return ModelSpec(
        name=name, hidden_size=hidden, num_layers=int(need("block_count")), num_heads=heads,
        num_kv_heads=int(metadata(reader, f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(metadata(reader, f"{arch}.attention.key_length", hidden // heads)),
        intermediate_size=int(need("feed_forward_length")), vocab_size=int(vocab),
        tie_word_embeddings="output.weight" not in tensors,
        max_context=int(metadata(reader, f"{arch}.context_length", 4096)), model_type=arch,
        rope_theta=float(metadata(reader, f"{arch}.rope.freq_base", 10000.0)),
        norm_eps=float(metadata(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)))


def hf_name(gguf_name: str) -> str:
    """token_embd.weight -> model.embed_tokens.weight, blk.3.attn_q.weight ->
    model.layers.3.self_attn.q_proj.weight; names with no counterpart stay as they are."""
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    match = _BLOCK.match(gguf_name)
    if match and match.group(2) in BLOCK_NAMES:
        return f"model.layers.{match.group(1)}.{BLOCK_NAMES[match.group(2)]}.{match.group(3)}"
    return gguf_name


def unpermute_rope_rows(weight: Any, heads: int) -> Any:
    """Inverse of llama.cpp's ``permute``: rows of each head go from (d/2, 2) interleaved
    pairs back to (2, d/2) halves. ``weight`` is (heads·d, in) or (heads·d,)."""
    rows = weight.shape[0]
    return (weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def dequantized(tensor: Any, origin: str) -> Any:
    """The tensor as an fp32 numpy array in Hugging Face (rows, columns) order."""
    import numpy as np
    from gguf import quants

    try:
        values = quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise InputError(f"{origin}: tensor {tensor.name} has GGUF type "
                         f"{tensor.tensor_type.name}, which the gguf package cannot dequantize; "
                         "requantize the file to a common type (Q8_0, Q4_K, F16…).") from None
    shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    return np.array(values.reshape(shape), dtype=np.float32)  # a writable copy


def load_gguf(model: Any, spec: ModelSpec, path: str | Path, reader: Any = None) -> None:
    """Fill ``model`` (a reference ``Transformer`` for ``spec``) from a GGUF file."""
    from phasewise.measure.weights import check_shapes, load_into

    reader = reader or open_gguf(path)
    by_name = {hf_name(t.name): t for t in reader.tensors}
    shapes = {name: tuple(int(n) for n in reversed(t.shape.tolist()))
              for name, t in by_name.items()}
    check_shapes(spec, shapes, str(path))
    load_into(model, spec, lambda name: _hf_values(reader, by_name[name], name, spec, str(path)))


def gguf_tensors_as_hf(spec: ModelSpec, path: str | Path) -> dict[str, Any]:
    """Every tensor of the file, dequantized, unpermuted and under its Hugging Face name:
    what a Hugging Face implementation loads to run the same weights."""
    import torch

    reader = open_gguf(path)
    return {name: torch.from_numpy(_hf_values(reader, t, name, spec, str(path)))
            for name, t in ((hf_name(t.name), t) for t in reader.tensors)}


def _hf_values(reader: Any, tensor: Any, name: str, spec: ModelSpec, origin: str) -> Any:
    values = dequantized(tensor, origin)
    if metadata(reader, "general.architecture", "llama") not in PERMUTED_ARCHITECTURES:
        return values
    if name.endswith("q_proj.weight"):
        return unpermute_rope_rows(values, spec.num_heads)
    if name.endswith("k_proj.weight"):
        return unpermute_rope_rows(values, spec.num_kv_heads)
    return values
