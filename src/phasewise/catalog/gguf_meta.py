"""A GGUF file's metadata and tensor table, read without the weights, into a config dict the
config reader understands (so ``--model file.gguf`` needs no extra package).

The layout follows ggml's GGUF specification (docs/gguf.md): magic ``GGUF``, version,
tensor count, key/value count, the typed key/value pairs, then per tensor its name, shape,
ggml type and offset. Only the header is read, never the tensor data.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

from phasewise.errors import InputError

MAX_HEADER_ITEMS = 1_000_000  # keys, tensors or array items: a sane file has far fewer
MAX_STRING_BYTES = 1 << 20
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# ggml tensor types (ggml.h enum ggml_type) → phasewise format names.
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
              10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
              16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
              22: "IQ2_S", 23: "IQ4_XS", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0",
              39: "MXFP4"}


def _read(stream: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = stream.read(size)
    if len(data) != size:
        raise InputError(f"{getattr(stream, 'name', 'GGUF file')}: ends inside its header; is "
                         "the file complete?")
    return struct.unpack(fmt, data)[0]


def _string(stream: BinaryIO) -> str:
    length = _read(stream, "<Q")
    if length > MAX_STRING_BYTES:
        raise InputError("GGUF header holds a string longer than 1 MiB; the file is damaged.")
    return stream.read(length).decode("utf-8", errors="replace")


def _value(stream: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(stream, _SCALARS[kind])
    if kind == _STRING:
        return _string(stream)
    if kind == _ARRAY:
        item_kind, count = _read(stream, "<I"), _read(stream, "<Q")
        if count > MAX_HEADER_ITEMS:
            raise InputError("GGUF header holds an array of over a million items; damaged file.")
        if item_kind in _SCALARS:  # skip numbers: only strings' count matters here (vocab)
            stream.seek(struct.calcsize(_SCALARS[item_kind]) * count, 1)
            return [None] * count
        return [_value(stream, item_kind) for _ in range(count)]
    raise InputError(f"GGUF header has an unknown value type {kind}; damaged or newer file.")


def read_gguf_header(path: Path) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], str]]]:
    """(metadata, [(tensor name, shape, format)]) of a GGUF file."""
    with path.open("rb") as stream:
        if stream.read(4) != b"GGUF":
            raise InputError(f"{path}: not a GGUF file (no GGUF magic); pass a config.json or a "
                             ".gguf file.")
        version = _read(stream, "<I")
        if version < 2:
            raise InputError(f"{path}: GGUF version {version} is too old; convert it with a "
                             "current llama.cpp.")
        tensors_n, keys_n = _read(stream, "<Q"), _read(stream, "<Q")
        if max(tensors_n, keys_n) > MAX_HEADER_ITEMS:
            raise InputError(f"{path}: the GGUF header claims {tensors_n} tensors and {keys_n} "
                             "keys; the file is damaged.")
        meta = {}
        for _ in range(keys_n):
            key = _string(stream)
            meta[key] = _value(stream, _read(stream, "<I"))
        tensors = []
        for _ in range(tensors_n):
            name = _string(stream)
            dims = tuple(_read(stream, "<Q") for _ in range(_read(stream, "<I")))
            kind = _read(stream, "<I")
            _read(stream, "<Q")  # offset
            tensors.append((name, dims, GGML_TYPES.get(kind, f"ggml type {kind}")))
    return meta, tensors


def config_from_gguf(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A config.json-like dict from the ``{arch}.*`` metadata, and the weight formats of the
    file's tensors as a ``quantization_config`` the config reader takes (``gguf`` method)."""
    meta, tensors = read_gguf_header(path)
    arch = str(meta.get("general.architecture") or "llama")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    heads = key("attention.head_count")
    cfg: dict[str, Any] = {
        "model_type": arch, "hidden_size": key("embedding_length"),
        "num_hidden_layers": key("block_count"), "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv") or heads,
        "intermediate_size": key("feed_forward_length"),
        "max_position_embeddings": key("context_length") or 4096,
        "vocab_size": key("vocab_size") or len(meta.get("tokenizer.ggml.tokens") or ()) or None,
        "tie_word_embeddings": not any(name == "output.weight" for name, _, _ in tensors),
        "rope_theta": key("rope.freq_base"), "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
    }
    if key("attention.key_length"):
        cfg["head_dim"] = key("attention.key_length")
    if key("expert_count"):
        cfg.update(num_experts=key("expert_count"), num_experts_per_tok=key("expert_used_count"),
                   moe_intermediate_size=key("expert_feed_forward_length")
                   or key("feed_forward_length"))
    if key("attention.sliding_window"):
        cfg["sliding_window"] = key("attention.sliding_window")
    return {k: v for k, v in cfg.items() if v is not None}, _gguf_formats(tensors)


def _gguf_formats(tensors: list[tuple[str, tuple[int, ...], str]]) -> dict[str, Any]:
    """The format most of each module class's elements are stored in."""
    classes: dict[str, Counter[str]] = {}
    for name, dims, fmt in tensors:
        elements = 1
        for d in dims:
            elements *= d
        cls = ("embed" if name.startswith("token_embd") else "lm_head" if name == "output.weight"
               else "experts" if "_exps" in name else "attention" if ".attn_" in name
               else "mlp" if ".ffn_" in name else None)
        if cls is not None:
            classes.setdefault(cls, Counter())[fmt] += elements
    return {"quant_method": "gguf",
            "formats": {cls: counts.most_common(1)[0][0] for cls, counts in classes.items()}}
