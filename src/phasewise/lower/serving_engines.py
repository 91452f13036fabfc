"""How the serving engines (vLLM, SGLang, TensorRT-LLM) lower what the ledger counts.

Their attention is fused and their GEMMs run as the ledger counts them (the generic
lowering). What differs is the tensor-parallel all-reduce: each ships its own kernel for
decode-sized messages (``allreduce_rounds`` in ``engines.toml``, with its source), whose
latency-bound rounds do not grow with the device count as NCCL's tree does; and the routed
experts, which the ledger counts as one operator a layer, run as a chain of kernels
(``moe_kernels``: top-k selection, sorting the routed tokens by expert, quantizing the
activations, the two grouped GEMMs, the activation between them and the weighted sum back
to token order), each launched and drained like any other.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from phasewise.ledger import Op
from phasewise.lower.engines import register_dispatch
from phasewise.lower.generic import lower_gemm
from phasewise.lower.kernel import Kernel
from phasewise.lower.registry import Target, register_lowering
from phasewise.specs import HardwareSpec

SERVING_ENGINES = ("vllm", "sglang", "trtllm")
# The ledger's tensor-parallel all-reduce, whose rounds an engine's own kernel may set.
ALLREDUCE_OP = "tp.allreduce"


def lower_collective(op: Op, target: Target) -> Kernel:
    """The engine's own all-reduce: ``allreduce_rounds`` per call on a peer-to-peer link."""
    kernel = Kernel.of(op)
    rounds = target.traits.allreduce_rounds
    if op.name != ALLREDUCE_OP or not rounds or not peer_link(target.hardware):
        return kernel
    return replace(kernel, hops=op.calls * rounds, rules=("allreduce_rounds",))


def lower_routed_gemm(op: Op, target: Target) -> Kernel:
    """A GEMM as the generic lowering runs it; the routed experts' as ``moe_kernels``
    launches a layer (the engine's fused-MoE chain), their work unchanged."""
    kernel = lower_gemm(op, target)
    chain = target.traits.kernels
    if not op.expert_load or not isinstance(chain, int) or chain <= 1:
        return kernel
    return replace(kernel, launches=op.calls * chain, rules=kernel.rules + ("moe_kernels",))


def _read_dispatch(values: dict[str, Any], hardware: HardwareSpec) -> int:
    """The serving engines' dispatch trait: kernels their routed experts run as a layer."""
    return int(values.get("moe_kernels", 1))


for _engine in SERVING_ENGINES:
    register_lowering(_engine, "communication")(lower_collective)
    register_lowering(_engine, "gemm")(lower_routed_gemm)
    register_dispatch(_engine, ("moe_kernels",), _read_dispatch)


def peer_link(hardware: HardwareSpec) -> bool:
    """Devices joined by a scale-up link (NVLink, Infinity Fabric), which engines' own
    all-reduce kernels need: they read peers' memory directly (vLLM turns them off on
    PCIe-only machines of more than two GPUs)."""
    return hardware.interconnect is not None and hardware.interconnect.kind != "pcie"
