"""Which math format a device runs a precision's matmuls in, and why.

The formats alone fix a matmul's format when both operands share a narrow one (fp8 × fp8
runs at the fp8 rate). A 4-bit float checkpoint depends on the device as well, and on its
block layout: NVFP4 (16 e2m1 values per fp8 scale) or MXFP4 (32 per e8m0 scale, OCP MX).

- NVFP4 weights with 16-bit activations compute in FP4 on a device whose matrix units take
  NVFP4 blocks (Blackwell): NVFP4 checkpoints carry activation scales and engines quantise the
  activations to FP4 on the fly (TensorRT Model Optimizer's NVFP4 recipe is W4A4; vLLM's
  ModelOpt NVFP4 path runs CUTLASS FP4 GEMMs on SM100).
- A 4-bit float format on a device whose matrix units do not take it (no FP4 at all, as on
  Hopper and Ampere, or MXFP4 only, as on CDNA 4 and Trainium3 for NVFP4 blocks) is
  weight-only: the kernels dequantise the weights to 16 bits as they read them and multiply in
  bf16 (vLLM runs NVFP4 and MXFP4 checkpoints on Hopper and Ampere through its Marlin FP4
  kernels), so the weight bytes stay 4-bit and the FLOPs run at the bf16 rate.
- MXFP4 weights (gpt-oss) keep 16-bit activations unless --act-dtype asks for fp4 too.

Other formats keep the rule ``Precision.math_format`` states.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from phasewise.specs.hardware import HardwareSpec
from phasewise.specs.precision import Precision

FP4_FORMATS = ("fp4", "nvfp4")
# Weight formats whose checkpoints quantise activations alongside (W4A4) where the device
# multiplies their blocks natively.
ACTIVATION_QUANTISING = ("nvfp4",)
WEIGHT_ONLY_MATH = "bf16"


@dataclass(frozen=True, slots=True)
class ComputeChoice:
    """The precision as ``device`` runs it, its matmul format and the reason ('' when the
    formats alone decide)."""

    precision: Precision
    math_format: str
    reason: str = ""


FP8_FORMATS = ("fp8", "fp8_block")


def from_checkpoint(precision: Precision) -> bool:
    """The formats came from a checkpoint's quantization config, not from a flag."""
    return precision.source.startswith(("quantization_config", "hf_quant_config"))


def _fp8_checkpoint(precision: Precision, device: HardwareSpec) -> ComputeChoice:
    """An FP8 checkpoint (DeepSeek-V3's block-scaled weights, ModelOpt and compressed-tensors
    FP8) runs W8A8 where the matrix units take fp8: the engines quantise activations per token
    or per 128-block on the fly (vLLM's fp8 and block-fp8 linear methods). Elsewhere (Ampere)
    it is weight-only: Marlin FP8 kernels dequantise the weights and multiply in bf16."""
    name = device.display_name
    if device.computes_natively("fp8"):
        chosen = dataclasses.replace(precision, compute="fp8")
        return ComputeChoice(chosen, "fp8", f"{name} multiplies fp8 natively: the checkpoint's "
                             f"{precision.weights} weights with activations quantised to fp8 on "
                             "the fly (W8A8)")
    return ComputeChoice(precision, precision.math_format, f"{name}: no FP8 matrix math; "
                         f"{precision.weights} weights are dequantised to "
                         f"{precision.math_format} (weight-only)")


def takes_blocks(device: HardwareSpec, weights: str) -> bool:
    """Whether the device's matrix units take the weights' 4-bit blocks as stored."""
    return device.computes_natively("nvfp4" if weights == "nvfp4" else "fp4")


def _why_not(device: HardwareSpec, weights: str) -> str:
    if not device.computes_natively("fp4"):
        return "no FP4 matrix math"
    if weights == "nvfp4":
        return "its FP4 units take MXFP4 blocks, not NVFP4"
    return f"{weights} checkpoints keep 16-bit activations unless --act-dtype fp4"


def precision_on(precision: Precision, device: HardwareSpec) -> ComputeChoice:
    """The matmul format ``device`` runs ``precision`` in (rules in the module docstring)."""
    if precision.compute:
        return ComputeChoice(precision, precision.compute)
    weights, activations = precision.weights, precision.activations
    requested, name = precision.math_format, device.display_name
    if weights in FP8_FORMATS and from_checkpoint(precision) and requested != "fp8":
        return _fp8_checkpoint(precision, device)
    if weights not in FP4_FORMATS:
        return ComputeChoice(precision, requested)
    native = takes_blocks(device, weights)
    if requested == "fp4" and not native:
        chosen = dataclasses.replace(precision, activations=WEIGHT_ONLY_MATH, compute=WEIGHT_ONLY_MATH)
        return ComputeChoice(chosen, WEIGHT_ONLY_MATH, f"{name}: {_why_not(device, weights)}; "
                             f"{weights} weights with {WEIGHT_ONLY_MATH} activations, dequantised as "
                             "they are read (weight-only; 4-bit weight bytes, bf16 FLOPs)")
    if requested == "fp4":
        return ComputeChoice(precision, requested)
    if native and weights in ACTIVATION_QUANTISING:
        chosen = dataclasses.replace(precision, compute="fp4")
        return ComputeChoice(chosen, "fp4", f"{name} multiplies {weights} natively: {weights} "
                             f"weights with {activations} activations quantised to FP4 on the fly (W4A4)")
    return ComputeChoice(precision, requested, f"{name}: {_why_not(device, weights)}; {weights} "
                         f"weights are dequantised to {requested} (weight-only)")
