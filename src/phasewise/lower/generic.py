"""The lowering every engine starts from: each operator runs as the ledger counts it.

A GEMM whose weights are stored in fewer bytes per element than its math format (int4,
the GGUF block formats, int8 weight-only) dequantizes them as it reads them; that is a fact
of the weights, not of an engine, so it is marked here for every engine. An engine that
accumulates 16-bit matmuls in fp16 (``fp16_accumulate`` in engines.toml) runs its GEMMs and
attention matmuls at the device's fp16-accumulate rate, whichever engine it is.
"""

from __future__ import annotations

from dataclasses import replace

from phasewise.ledger import Op
from phasewise.lower.engines import Traits
from phasewise.lower.kernel import Kernel
from phasewise.lower.registry import GENERIC, Target, register_lowering

# Bytes per element of the math formats a GEMM can run in.
MATH_FORMAT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0,
                     "int8": 1.0, "fp4": 0.5}
# Weights within 5% of their math format's bytes are not dequantized (rounding of a
# checkpoint's stored bytes).
DEQUANT_MARGIN = 0.95


def weight_elements(op: Op) -> float:
    """The weights a GEMM multiplies, over its calls: FLOPs ÷ 2m, which counts each routed
    expert a MoE GEMM touches as well as a dense GEMM's n × k."""
    return op.flops / (2.0 * op.m) if op.m else op.k * op.n * op.calls


def dequantized(op: Op, math_format: str) -> bool:
    """A GEMM whose weights take fewer bytes per element than its math format."""
    if op.kind != "gemm" or not op.weights or not op.k or not op.n:
        return False
    bytes_per_weight = op.weights / weight_elements(op)
    return bytes_per_weight < DEQUANT_MARGIN * MATH_FORMAT_BYTES.get(math_format, 2.0)


def fp16_accumulate(traits: Traits, math_format: str) -> float:
    """The matmul rate over the sheet's fp16 peak of an engine that accumulates 16-bit
    matmuls in fp16 (``Traits.gemm_peak_factor``; 1 in any other format)."""
    return traits.gemm_peak_factor if math_format == "fp16" else 1.0


@register_lowering(GENERIC, "gemm")
def lower_gemm(op: Op, target: Target) -> Kernel:
    return _accumulating(Kernel.of(op, dequantized=dequantized(op, target.math_format)), target)


@register_lowering(GENERIC, "attention")
def lower_attention(op: Op, target: Target) -> Kernel:
    return _accumulating(Kernel.of(op), target)


@register_lowering(GENERIC, "elementwise")
@register_lowering(GENERIC, "communication")
def lower_as_counted(op: Op, target: Target) -> Kernel:
    return Kernel.of(op)


def _accumulating(kernel: Kernel, target: Target) -> Kernel:
    factor = fp16_accumulate(target.traits, target.math_format)
    if factor == 1.0:
        return kernel
    return replace(kernel, peak_factor=factor, rules=kernel.rules + ("fp16_accumulate",))
