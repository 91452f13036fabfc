"""A checkpoint's own number formats: ``quantization_config`` in config.json, or ModelOpt's
``hf_quant_config.json`` beside it, read into a format per module class.

Module names the checkpoint excludes from quantization (``modules_to_not_convert``,
``ignore``, ``exclude_modules``) keep the checkpoint's 16-bit type; they are mapped onto
module classes by their names (``lm_head``, ``embed``, ``self_attn``/``attn``/``mixer``,
``shared_expert``, ``mlp``/``experts``). Block scales count in each format's bits
(``specs.precision.FORMATS``).
"""

from __future__ import annotations

import re
from typing import Any

from phasewise.specs.model import CheckpointFormats

UNQUANTIZED = "bf16"
# Formats the module classes take when a method quantizes "every linear layer": the embedding
# is a lookup table, not a linear layer, and stays unquantized unless named.
LINEAR_CLASSES = ("attention", "mlp", "experts", "lm_head")
_CLASS_PATTERNS = (  # (regex over an excluded module name, module class), first match wins
    (re.compile(r"lm_head|output_layer"), "lm_head"),
    (re.compile(r"embed|wte|tok_embeddings"), "embed"),
    (re.compile(r"shared_expert"), "mlp"),
    (re.compile(r"self_attn|\battn\b|\.attn|attention|mixer|linear_attn|q_proj|kv_proj|o_proj"),
     "attention"),
    (re.compile(r"experts"), "experts"),
    (re.compile(r"mlp|ffn|feed_forward"), "mlp"),
)
# ModelOpt's quant_algo names → phasewise formats (the weights' storage; W4A16 keeps 16-bit
# activations, which the format's math says).
MODELOPT_FORMATS = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "NVFP4_AWQ": "nvfp4",
                    "FP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
                    "FP8_BLOCK_SCALES": "fp8_block", "W4A16_AWQ": "int4", "W4A8_AWQ": "int4",
                    "MXFP4": "fp4", "W4A8_MXFP4_FP8": "fp4"}
_ROUTER = re.compile(r"\bgate\b|router|\.gate$")


def _module_class(module: str) -> str | None:
    return next((cls for pattern, cls in _CLASS_PATTERNS if pattern.search(module)), None)


def checkpoint_formats(quant: Any, sidecar: Any = None, *, moe: bool = False,
                       num_layers: int = 0, attention_parts: tuple[str, ...] = ()
                       ) -> tuple[CheckpointFormats | None, list[str]]:
    """The checkpoint's formats and any notes on what could not be read. ``attention_parts``:
    the module names of the model's attention projections (``specs.model.projection_names``),
    so a checkpoint that excludes some of them keeps the others in its format."""
    formats, notes = _checkpoint_formats(quant, sidecar, moe=moe, num_layers=num_layers)
    if formats is None or not attention_parts:
        return formats, notes
    return _with_quantized_projections(formats, quant, sidecar, attention_parts, num_layers), notes


def _checkpoint_formats(quant: Any, sidecar: Any, *, moe: bool,
                        num_layers: int) -> tuple[CheckpointFormats | None, list[str]]:
    if isinstance(sidecar, dict) and isinstance(sidecar.get("quantization"), dict):
        return _modelopt(sidecar["quantization"], "hf_quant_config.json", num_layers)
    if not isinstance(quant, dict):
        return None, []
    method = str(quant.get("quant_method") or quant.get("quant_algo") or "").lower()
    if method == "gguf":  # catalog.gguf_meta: the format each class's tensors are stored in
        formats = dict(quant.get("formats") or {})
        formats.setdefault("lm_head", formats.get("embed", UNQUANTIZED))
        weights = tuple((cls, formats.get(cls, formats.get("mlp", UNQUANTIZED)))
                        for cls in ("embed", *LINEAR_CLASSES))
        return CheckpointFormats(weights, method="gguf", source="GGUF tensor types"), []
    if method == "fp8":
        fmt = "fp8_block" if quant.get("weight_block_size") else "fp8"
        return _linear(fmt, quant.get("modules_to_not_convert") or quant.get("ignored_layers"),
                       method, "quantization_config (fp8)", num_layers), []
    if method == "mxfp4":
        # gpt-oss: only the routed experts are stored as MXFP4.
        classes = ("experts",) if moe else LINEAR_CLASSES
        return _classes("fp4", classes, quant.get("modules_to_not_convert"), method,
                        "quantization_config (mxfp4)", num_layers), []
    if method == "modelopt":
        return _modelopt(quant, "quantization_config (modelopt)", num_layers)
    if method == "compressed-tensors":
        return _compressed_tensors(quant, num_layers)
    if method in ("awq", "gptq", "autoround", "auto-round"):
        bits = int(quant.get("bits") or quant.get("w_bit") or 4)
        group = quant.get("group_size") or quant.get("q_group_size")
        fmt = {4: int4_format(group), 8: "int8"}.get(bits)
        if fmt is None:
            return None, [f"{method} at {bits} bits is not a format phasewise knows; weights "
                          "are sized as bf16 (give --weight-dtype)."]
        return _linear(fmt, quant.get("modules_to_not_convert"), method,
                       f"quantization_config ({method}, {bits}-bit)", num_layers), []
    if method in ("bitsandbytes", "bnb"):
        fmt = "int4" if quant.get("load_in_4bit") else "int8"
        return _linear(fmt, quant.get("llm_int8_skip_modules"), method,
                       "quantization_config (bitsandbytes)", num_layers), []
    return None, [f"quantization method {method or '(unnamed)'!r} is not one phasewise reads; "
                  "weights are sized as bf16 (give --weight-dtype for the real format)."]


# DeepSeek-V4's ``expert_dtype``: "fp4" stores the routed experts as e2m1 pairs with one
# e8m0 scale per 32 weights along K (inference/model.py Linear: float4_e2m1fn_x2 weights,
# float8_e8m0fnu scales of in_features // 32), MXFP4's layout.
EXPERT_DTYPES = {"fp4": "fp4"}


def with_expert_format(formats: CheckpointFormats | None, expert_dtype: Any,
                       moe: bool) -> CheckpointFormats | None:
    """The formats with the routed experts in ``expert_dtype`` where a config names one."""
    fmt = EXPERT_DTYPES.get(str(expert_dtype).lower()) if expert_dtype else None
    if fmt is None or not moe:
        return formats
    weights = dict(formats.weights) if formats is not None else {
        cls: UNQUANTIZED for cls in ("embed", *LINEAR_CLASSES)}
    weights["experts"] = fmt
    source = (formats.source + "; " if formats is not None else "") + f"expert_dtype ({expert_dtype})"
    return CheckpointFormats(tuple(weights.items()), formats.kv_cache if formats else None,
                             formats.method if formats else "expert_dtype", source)


def _excluded_list(quant: Any, sidecar: Any) -> list[Any]:
    """The checkpoint's list of modules kept out of quantization, under whichever key."""
    source = sidecar.get("quantization") if isinstance(sidecar, dict) \
        and isinstance(sidecar.get("quantization"), dict) else quant
    if not isinstance(source, dict):
        return []
    for key in ("exclude_modules", "modules_to_not_convert", "ignore", "ignored_layers"):
        if isinstance(source.get(key), list):
            return source[key]
    return []


def excluded_projections(excluded: Any, num_layers: int) -> set[str] | None:
    """Attention projections a checkpoint keeps unquantized by name in at least half the
    layers ("model.layers.7.self_attn.q_a_proj" → "q_a_proj", "…self_attn.indexer*" →
    "indexer"); None when it excludes attention as a whole (a name with no layer index)."""
    names: dict[str, set[str]] = {}
    for module in excluded if isinstance(excluded, list) else ():
        text = str(module)
        if _module_class(text) != "attention" or "norm" in text:
            continue
        index = re.search(r"layers\.(\d+)\.", text)
        part = text.rsplit(".", 1)[-1].rstrip("*")
        if index is None or part in ("self_attn", "attn", "attention", "mixer", ""):
            return None
        names.setdefault(part, set()).add(index.group(1))
    return {part for part, layers in names.items() if 2 * len(layers) >= num_layers}


def _with_quantized_projections(formats: CheckpointFormats, quant: Any, sidecar: Any,
                                parts: tuple[str, ...], num_layers: int) -> CheckpointFormats:
    """Where the attention class is kept unquantized because some of its projections are
    (by name), the projections the checkpoint does not name stay in its format: NVIDIA's
    DeepSeek-V3.1-NVFP4 excludes q_a_proj, q_b_proj, kv_a_proj_with_mqa and kv_b_proj of
    every layer and quantizes o_proj."""
    classes = dict(formats.weights)
    quantized = classes.get("mlp")
    if classes.get("attention") != UNQUANTIZED or quantized in (None, UNQUANTIZED):
        return formats
    named = excluded_projections(_excluded_list(quant, sidecar), num_layers)
    if not named:
        return formats
    kept_quantized = tuple((part, quantized) for part in parts if part not in named)
    if not kept_quantized or len(kept_quantized) == len(parts):
        return formats
    return CheckpointFormats(formats.weights, formats.kv_cache, formats.method, formats.source,
                             projections=kept_quantized)


def int4_format(group: Any) -> str:
    """INT4 with a 16-bit scale per group: 4 + 16/group bits (int4 is group 128)."""
    return {32: "int4_g32", 64: "int4_g64"}.get(group if isinstance(group, int) else 128, "int4")


def _excluded_classes(excluded: Any, num_layers: int = 0) -> set[str]:
    """Module classes whose modules a checkpoint keeps unquantized: a class counts as excluded
    when a name maps onto it without a layer index (a wildcard), or when indexed names cover
    at least half the layers (some checkpoints list every layer's attention)."""
    classes: set[str] = set()
    indexed: dict[str, set[str]] = {}
    for module in excluded if isinstance(excluded, list) else ():
        text = str(module)
        if _ROUTER.search(text) and "experts" not in text or "norm" in text:
            continue  # routers and norms are not quantized linear layers
        for pattern, cls in _CLASS_PATTERNS:
            if pattern.search(text):
                index = re.search(r"layers\.(\d+)\.", text)
                if index is None:
                    classes.add(cls)
                else:
                    indexed.setdefault(cls, set()).add(index.group(1))
                break
    for cls, layers in indexed.items():
        if num_layers and 2 * len(layers) >= num_layers:
            classes.add(cls)
    return classes


def _classes(fmt: str, classes: tuple[str, ...], excluded: Any, method: str,
             source: str, layers: int = 0) -> CheckpointFormats:
    kept = _excluded_classes(excluded, layers)
    weights = tuple((cls, UNQUANTIZED if cls in kept or cls not in classes else fmt)
                    for cls in ("embed", *LINEAR_CLASSES))
    return CheckpointFormats(weights, method=method, source=source)


def _linear(fmt: str, excluded: Any, method: str, source: str, layers: int = 0) -> CheckpointFormats:
    """Every linear layer but the LM head, which checkpoints keep in 16 bits unless a
    method's list says otherwise."""
    return _classes(fmt, ("attention", "mlp", "experts"), excluded, method, source, layers)


def _modelopt(quant: dict[str, Any], where: str,
              layers: int = 0) -> tuple[CheckpointFormats | None, list[str]]:
    algo = str(quant.get("quant_algo") or "").upper()
    fmt = MODELOPT_FORMATS.get(algo)
    if fmt is None and algo == "MIXED_PRECISION":
        return _mixed(quant, where)
    if fmt is None:
        return None, [f"ModelOpt quant_algo {algo or '(none)'!r} is not one phasewise reads; "
                      "weights are sized as bf16."]
    formats = _linear(fmt, quant.get("exclude_modules") or quant.get("ignore"), "modelopt",
                      f"{where} ({algo})", layers)
    kv = _kv_format(quant.get("kv_cache_quant_algo"))
    return CheckpointFormats(formats.weights, kv, formats.method, formats.source), []


def _mixed(quant: dict[str, Any], where: str) -> tuple[CheckpointFormats, list[str]]:
    """ModelOpt MIXED_PRECISION: ``quantized_layers`` gives each module its algorithm; a class
    takes the algorithm most of its modules use."""
    votes: dict[str, dict[str, int]] = {}
    for module, entry in (quant.get("quantized_layers") or {}).items():
        algo = str((entry or {}).get("quant_algo") or "").upper()
        fmt = MODELOPT_FORMATS.get(algo)
        if fmt is None:
            continue
        cls = next((c for p, c in _CLASS_PATTERNS if p.search(module)), "mlp")
        votes.setdefault(cls, {}).setdefault(fmt, 0)
        votes[cls][fmt] += 1
    weights = tuple((cls, max(votes[cls], key=votes[cls].get) if cls in votes else UNQUANTIZED)
                    for cls in ("embed", *LINEAR_CLASSES))
    return CheckpointFormats(weights, _kv_format(quant.get("kv_cache_quant_algo")), "modelopt",
                             f"{where} (MIXED_PRECISION, the majority format per class)"), []


def _kv_format(algo: Any) -> str | None:
    return {"FP8": "fp8", "NVFP4": "nvfp4"}.get(str(algo or "").upper())


def _compressed_tensors(quant: dict[str, Any],
                        layers: int = 0) -> tuple[CheckpointFormats | None, list[str]]:
    """compressed-tensors: the first config group's weight scheme (num_bits, type, group
    size) for its targets (Linear), the ``ignore`` list, and ``kv_cache_scheme``."""
    groups = quant.get("config_groups") or {}
    scheme = next(iter(groups.values()), None) if isinstance(groups, dict) else None
    weights = (scheme or {}).get("weights") or {}
    bits, kind = weights.get("num_bits"), str(weights.get("type") or "int")
    group = weights.get("group_size")
    fmt = None
    if bits == 8:
        fmt = "fp8" if kind == "float" else "int8"
    elif bits == 4:
        fmt = ("nvfp4" if group == 16 else "fp4") if kind == "float" else int4_format(group)
    if fmt is None:
        return None, [f"compressed-tensors weights of {bits} bits ({kind}) are not a format "
                      "phasewise reads; weights are sized as bf16."]
    formats = _linear(fmt, quant.get("ignore"), "compressed-tensors",
                      f"quantization_config (compressed-tensors, {bits}-bit {kind})", layers)
    kv_scheme = quant.get("kv_cache_scheme") or {}
    kv = "fp8" if kv_scheme.get("num_bits") == 8 and kv_scheme.get("type") == "float" else None
    return CheckpointFormats(formats.weights, kv, formats.method, formats.source), []
