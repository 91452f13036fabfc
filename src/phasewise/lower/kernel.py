"""A kernel: what an engine runs for one ledger operator, as the cost model prices it.

The ledger says what the model computes (``Op``); an engine's lowering (``lower/``) says
how it computes it: on the matrix or the vector units, with how many passes over the
weights, padded to which tiles, with which extra traffic (unfused attention scores, a
16-bit copy of dequantized weights) and how many launches. A lowering that changes nothing
returns ``Kernel.of(op)``; every change it makes names the engine trait behind it in
``rules``, whose source ``engines.toml`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from phasewise.ledger import Op

# The unit a kernel runs on: a GEMM on the matrix units or as matrix-vector products on
# the vector ALUs; attention fused into one kernel or as matmuls with scores in memory.
UNITS = ("matrix", "vector", "attention", "attention-unfused", "elementwise", "network")
_UNIT_OF_KIND = {"gemm": "matrix", "attention": "attention", "elementwise": "elementwise",
                 "communication": "network"}


@dataclass(frozen=True, slots=True)
class Kernel:
    """The kernels one operator runs as, summed over its ``op.calls`` calls."""

    op: Op
    unit: str
    flops: float  # FLOPs computed: the op's, plus tile padding and masked scores
    memory_bytes: float  # bytes the main kernel moves, each pass over the weights counted
    weight_bytes: float  # weight bytes read, over every pass (sets a GEMM's intensity)
    launches: float  # kernel launches
    hops: float  # latency-bound message rounds of a collective
    extra_bytes: float = 0.0  # moved by kernels of their own (a dequant buffer, scores)
    dequantized: bool = False  # dequantizes block-quantized weights as it reads them
    passes: float = 1.0  # passes over the weights
    alu_share: float = 1.0  # share of a matrix-vector FLOP's ALU work left per token
    peak_factor: float = 1.0  # matmul rate over the sheet's peak (fp16 accumulation, FP4 MMA)
    vector_rate: float = 1.0  # vector-ALU rate over the sheet's fp32 figure
    rules: tuple[str, ...] = ()  # the engine traits that shaped it (engines.toml)

    @classmethod
    def of(cls, op: Op, *, dequantized: bool = False) -> Kernel:
        """The operator as the ledger counts it, on its kind's unit (no launch of its own
        when it runs fused into the kernel before it)."""
        return cls(op, _UNIT_OF_KIND[op.kind], op.flops, op.memory_bytes, op.weights,
                   0 if op.fused else op.calls, op.hops, dequantized=dequantized)

    @property
    def padding(self) -> float:
        """FLOPs computed over the FLOPs the ledger counts (1: none wasted)."""
        return self.flops / self.op.flops if self.op.flops else 1.0

    @property
    def changed(self) -> bool:
        """Whether the engine runs the operator otherwise than the ledger counts it."""
        return bool(self.rules)
