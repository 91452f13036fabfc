"""Serving measurements' quantization labels (aiconfigurator's gemm_quant_mode,
moe_quant_mode, kvcache_quant_mode) as a ``Precision`` on one device (``quant_modes.toml``).

The label of the MoE experts sets the weights of a MoE model, the GEMM label those of a dense
one and of a MoE model's other modules (``Precision.for_model`` reads a checkpoint the same
way). Where the checkpoint stores its weights in a format of the label's family, the
checkpoint's format wins. The device's native formats then decide how they multiply:
``specs.compute.precision_on`` for NVFP4 (W4A4 on Blackwell, weight-only elsewhere) and FP8;
the labels that fix a mixed matmul (W4A8) carry their own compute format, used only where the
device multiplies every format the label needs.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.specs import HardwareSpec, ModelSpec, Precision

QUANT_MODES_FILE = Path(__file__).with_name("quant_modes.toml")
NON_EXPERT_CLASSES = ("embed", "attention", "mlp", "lm_head")
WEIGHT_ONLY = "bf16"


@lru_cache(maxsize=1)
def quant_modes() -> dict[str, Any]:
    return tomllib.loads(QUANT_MODES_FILE.read_text())


def _mode(label: str) -> dict[str, Any]:
    modes = quant_modes()["modes"]
    key = (label or "").strip().lower()
    if key not in modes:
        known = ", ".join(repr(k) for k in modes)
        raise InputError(f"quantization label '{label}' is not mapped; known: {known}. Add it "
                         "to catalog/quant_modes.toml with its weight and activation formats.")
    return {**modes[key], "label": key}


def _family(fmt: str) -> str | None:
    return next((name for name, members in quant_modes()["families"].items() if fmt in members),
                None)


def _checkpoint_format(model: ModelSpec, module_class: str) -> str | None:
    checkpoint = getattr(model, "checkpoint", None)
    return checkpoint.format_of(module_class) if checkpoint is not None else None


def label_weights(label_format: str, checkpoint_format: str | None) -> str:
    """The label's weight format, or the checkpoint's where it is of the same family."""
    if checkpoint_format and _family(checkpoint_format) and \
            _family(checkpoint_format) == _family(label_format):
        return checkpoint_format
    return label_format


def _native(device: HardwareSpec, needs: list[str]) -> bool:
    return all(device.computes_natively(fmt) for fmt in needs)


def _activations(mode: dict[str, Any], weights: str, checkpoint_format: str | None,
                 device: HardwareSpec, engine: str) -> tuple[str, str]:
    """(activation format, compute format or '') of the label on ``device``."""
    mx = quant_modes()["mxfp4_checkpoint"]
    if weights == "fp4" and checkpoint_format == "fp4" and mode["label"] in mx["labels"]:
        if not _native(device, mx["needs"]):
            return WEIGHT_ONLY, ""
        acts = mx["activations"].get(engine, mx["default_activations"])
        return acts, mx["compute"][acts]
    if "compute" in mode:
        if _native(device, mode.get("needs", [])):
            return mode["activations"], mode["compute"]
        return WEIGHT_ONLY, ""
    return mode["activations"], ""


def _kv_format(label: str, model: ModelSpec) -> str:
    table = quant_modes()["kv_cache"]
    key = (label or "").strip().lower()
    if key not in table:
        raise InputError(f"KV-cache label '{label}' is not mapped; known: "
                         f"{', '.join(repr(k) for k in table)}.")
    if table[key] != "auto":
        return table[key]
    checkpoint = getattr(model, "checkpoint", None)
    return (checkpoint.kv_cache if checkpoint is not None else None) or WEIGHT_ONLY


def serving_precision(gemm_label: str, moe_label: str, device: HardwareSpec, model: ModelSpec,
                      *, engine: str = "", kv_label: str = "") -> Precision:
    """The formats a serving row's labels describe for ``model`` on ``device`` (module
    docstring); an empty MoE label follows the GEMM label."""
    gemm = _mode(gemm_label)
    main = _mode(moe_label or gemm_label) if model.is_moe else gemm
    main_class = "experts" if model.is_moe else "mlp"
    checkpoint_format = _checkpoint_format(model, main_class)
    weights = label_weights(main["weights"], checkpoint_format)
    others = label_weights(gemm["weights"], checkpoint_format)
    modules = tuple((cls, others) for cls in NON_EXPERT_CLASSES) if others != weights else ()
    acts, compute = _activations(main, weights, checkpoint_format, device, engine)
    return Precision(weights, acts, _kv_format(kv_label, model), module_weights=modules,
                     source=f"serving labels gemm '{gemm['label']}', moe '{main['label']}' "
                            f"({QUANT_MODES_FILE.name})", compute=compute)
