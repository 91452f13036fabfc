"""Operators and the ledger of one step: FLOPs and bytes by class, per device."""

from __future__ import annotations

from dataclasses import dataclass, field

from phasewise.ledger.step import Step

BYTE_CLASSES = ("weights", "kv_read", "kv_write", "activations", "network")
OP_KINDS = ("gemm", "attention", "elementwise", "communication")


@dataclass(frozen=True, slots=True)
class Op:
    """One operator, summed over the ``calls`` layers it runs in, on one device.

    For a GEMM, (m, n, k) is the shape of one call: (m×k)·(k×n), m the tokens.
    ``hops`` counts the latency-bound message rounds of a collective.
    A routed-expert GEMM also carries ``tokens``, the tokens its layer receives per call,
    and ``expert_load``, the routed tokens each of the device's experts gets on average
    (uniform routing): how an engine tiles the experts' tokens depends on both.
    An attention op also carries ``keys``, the KV-cache cells its pass holds on the device
    (every sequence's cached tokens, or its window, and new tokens): a kernel that scores
    every new token against every cell and masks the rest (unfused attention) does
    ``m · keys`` scores per head.
    A GEMM whose weights a file type stores in a block format of their own (MXFP4_MOE's
    routed experts) names it in ``block_format``: an engine with native kernels for it
    multiplies it as stored.
    ``fused`` marks an operator an engine runs inside the kernel before it (TensorRT-LLM's
    all-reduce with the residual add and RMSNorm, ``lower.fusion``): its work and bytes
    stay, its launches go.
    """

    name: str
    kind: str
    layers: str
    calls: int
    flops: float
    weights: float = 0.0
    kv_read: float = 0.0
    kv_write: float = 0.0
    activations: float = 0.0
    network: float = 0.0
    m: float = 0.0
    n: float = 0.0
    k: float = 0.0
    hops: int = 0
    tokens: float = 0.0
    expert_load: float = 0.0
    keys: float = 0.0
    block_format: str = ""
    message: float = 0.0  # a collective's bytes per call before it is split (0: not one)
    fused: bool = False  # runs inside the kernel before it (an engine's fusion): no launch
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        """The hash of the compared fields, computed once: cost models remember priced
        operators by value."""
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((
                self.name, self.kind, self.layers, self.calls, self.flops, self.weights,
                self.kv_read, self.kv_write, self.activations, self.network, self.m, self.n,
                self.k, self.hops, self.tokens, self.expert_load, self.keys, self.block_format,
                self.message, self.fused)))
        return self._hash  # type: ignore[return-value]

    @property
    def memory_bytes(self) -> float:
        """Bytes moved to and from device memory (everything but the network)."""
        return self.weights + self.kv_read + self.kv_write + self.activations

    @property
    def bytes_by_class(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in BYTE_CLASSES}

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte of memory traffic (0 for pure communication)."""
        return self.flops / self.memory_bytes if self.memory_bytes else 0.0


@dataclass(frozen=True, slots=True)
class Ledger:
    """The operators one device runs for one step, with the step and formats they assume."""

    step: Step
    ops: tuple[Op, ...]
    math_format: str
    devices: int = 1
    notes: tuple[str, ...] = field(default=())
    # FLOPs and each byte class summed over the ops, once (a ledger is read many times).
    _totals: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)

    def _total(self, key: str) -> float:
        if self._totals is None:
            ops = self.ops
            totals = {"flops": sum(op.flops for op in ops), "weights": sum(op.weights for op in ops),
                      "kv_read": sum(op.kv_read for op in ops),
                      "kv_write": sum(op.kv_write for op in ops),
                      "activations": sum(op.activations for op in ops),
                      "network": sum(op.network for op in ops),
                      "memory_bytes": sum(op.memory_bytes for op in ops)}
            object.__setattr__(self, "_totals", totals)
        return self._totals[key]  # type: ignore[index]

    @property
    def flops(self) -> float:
        return self._total("flops")

    def bytes(self, byte_class: str) -> float:
        if byte_class not in BYTE_CLASSES:
            raise AttributeError(f"no byte class {byte_class!r}; known: {', '.join(BYTE_CLASSES)}")
        return self._total(byte_class)

    @property
    def bytes_by_class(self) -> dict[str, float]:
        return {c: self.bytes(c) for c in BYTE_CLASSES}

    @property
    def memory_bytes(self) -> float:
        return self._total("memory_bytes")

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.memory_bytes if self.memory_bytes else 0.0

    def select(self, *prefixes: str) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.name.startswith(prefixes))
