"""Which math format a device runs a precision's matmuls in, and why.

The formats alone fix a matmul's format when both operands share a narrow one (fp8 × fp8
runs at the fp8 rate). A 4-bit float checkpoint depends on the device as well:

- NVFP4 weights with 16-bit activations compute in FP4 on a device whose matrix units take
  FP4 (Blackwell, CDNA 4): NVFP4 checkpoints carry activation scales and engines quantise
  the activations to FP4 on the fly (TensorRT Model Optimizer's NVFP4 recipe is W4A4;
  vLLM's ModelOpt NVFP4 path uses CUTLASS FP4 GEMMs on SM100).
- A 4-bit float format on a device without FP4 matrix math is weight-only: the kernels
  dequantise the weights to 16 bits as they read them and multiply in bf16 (vLLM runs NVFP4
  and MXFP4 checkpoints on Hopper and Ampere through its Marlin FP4 kernels), so the weight
  bytes stay 4-bit and the FLOPs run at the bf16 rate.

Other formats keep the rule ``Precision.math_format`` states.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from phasewise.specs.hardware import HardwareSpec
from phasewise.specs.precision import Precision, number_format

FP4_FORMATS = ("fp4", "nvfp4")
# Weight formats whose checkpoints quantise activations alongside (W4A4) where the device
# multiplies FP4 natively.
ACTIVATION_QUANTISING = ("nvfp4",)
WEIGHT_ONLY_MATH = "bf16"


@dataclass(frozen=True, slots=True)
class ComputeChoice:
    """The precision as ``device`` runs it, its matmul format and the reason ('' when the
    formats alone decide)."""

    precision: Precision
    math_format: str
    reason: str = ""


def precision_on(precision: Precision, device: HardwareSpec) -> ComputeChoice:
    """The matmul format ``device`` runs ``precision`` in (rules in the module docstring)."""
    if precision.compute:
        return ComputeChoice(precision, precision.compute)
    weights, activations = precision.weights, precision.activations
    requested = precision.math_format
    name = device.display_name
    if weights in ACTIVATION_QUANTISING and requested != "fp4" and device.computes_natively("fp4"):
        chosen = dataclasses.replace(precision, compute="fp4")
        return ComputeChoice(chosen, "fp4", f"{name} multiplies FP4 natively: {weights} weights "
                             f"with {activations} activations quantised to FP4 on the fly (W4A4)")
    if requested == "fp4" and not device.computes_natively("fp4"):
        chosen = dataclasses.replace(precision, activations=WEIGHT_ONLY_MATH,
                                     compute=WEIGHT_ONLY_MATH)
        return ComputeChoice(chosen, WEIGHT_ONLY_MATH, f"{name} has no FP4 matrix math: {weights} "
                             f"weights with {WEIGHT_ONLY_MATH} activations, dequantised to {WEIGHT_ONLY_MATH} as they are read "
                             "(weight-only; 4-bit weight bytes, bf16 FLOPs)")
    if weights in FP4_FORMATS and requested != "fp4":
        why = ("no FP4 matrix math" if not device.computes_natively("fp4") else
               f"{number_format(weights).name} checkpoints keep 16-bit activations unless "
               "--act-dtype fp4")
        return ComputeChoice(precision, requested, f"{name}: {why}; {weights} weights are "
                             f"dequantised to {requested} (weight-only)")
    return ComputeChoice(precision, requested)
