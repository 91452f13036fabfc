"""Fusions across a step's operators: what an engine runs as one kernel where the ledger
counts two.

A lowering (``lower.registry``) sees one operator at a time, which is all most engine
behaviour needs. A fusion joins neighbours, and whether an engine fuses depends on the
model and the layout, which no single operator carries: it is a pass over the ledger of
one step with the model and the parallelism at hand, run where a served step is priced
(``serving.pricing.StepPricer``) with the rule its engine preset states.

TensorRT-LLM's Llama decoder layer (``tensorrt_llm/_torch/models/modeling_llama.py``,
``LlamaDecoderLayer``) runs the tensor-parallel all-reduce of the attention output with the
residual add and the post-attention RMSNorm (``PRE_MLP_FUSION``: TP > 1, no attention DP)
and the all-reduce of the MLP output with the residual add and the next layer's input
RMSNorm, the model's final norm after the last layer (``POST_MLP_FUSION``: TP > 1), as one
``AllReduce`` kernel (``AllReduceFusionOp.RESIDUAL_RMS_NORM``, ``..._QUANT_FP8`` with FP8
weights), when ``config.hidden_size > 4096`` ("disable fusion for small models due to
accuracy issues"). The norms' bytes still move, inside the all-reduce kernel; their
launches do not happen: per layer two launches fewer, the first layer's input norm alone
left standing. (PRE_MLP_FUSION also needs attention DP off, which a dense model always has
here: the ledger refuses attention DP without experts.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from phasewise.ledger import Ledger, Op
from phasewise.specs import ModelSpec, Parallelism

ALLREDUCE = "tp.allreduce"
ATTN_NORM, MLP_NORM, FINAL_NORM = "attn.norm", "mlp.norm", "final.norm"
# An operator's totals over its calls (the rest are per-call shapes).
_TOTALS = ("flops", "weights", "kv_read", "kv_write", "activations", "network")


@dataclass(frozen=True, slots=True)
class AllreduceNormFusion:
    """An engine's all-reduce + residual + RMSNorm fusion: for models whose config
    ``model_type`` is one of ``model_types`` and whose hidden size exceeds
    ``min_hidden``."""

    model_types: tuple[str, ...]
    min_hidden: int
    source: str = ""

    def applies(self, model: ModelSpec, parallelism: Parallelism) -> bool:
        return (parallelism.tp > 1 and model.model_type in self.model_types
                and model.hidden_size > self.min_hidden)

    def launches_saved(self, model: ModelSpec) -> int:
        """Norm launches a step of ``model``'s uniform decoder stack saves: each layer's
        post-attention norm, every input norm but the first layer's, and the final norm."""
        return 2 * model.num_layers


def _share(op: Op, calls: int, *, fused: bool) -> Op:
    """``calls`` of ``op``'s calls as an operator of their own."""
    scale = calls / op.calls
    return replace(op, calls=calls, fused=fused,
                   **{name: getattr(op, name) * scale for name in _TOTALS})


def fuse_allreduce_norms(ledger: Ledger, model: ModelSpec, parallelism: Parallelism,
                         rule: AllreduceNormFusion | None) -> Ledger:
    """The step's ledger with the RMSNorms that ``rule``'s engine runs inside the
    all-reduce before them marked ``fused`` (module docstring); the ledger itself where the
    rule does not apply or the step is not the uniform decoder stack it describes."""
    if rule is None or not rule.applies(model, parallelism):
        return ledger
    names = [op.name for op in ledger.ops]
    if names.count(ALLREDUCE) != 2 or names.count(ATTN_NORM) != 1 \
            or names.count(MLP_NORM) != 1:
        return ledger
    layers = next(op.calls for op in ledger.ops if op.name == MLP_NORM)
    ops: list[Op] = []
    for op in ledger.ops:
        if op.name == MLP_NORM:
            ops.append(replace(op, fused=True))
        elif op.name == ATTN_NORM and op.calls == layers and layers > 1:
            # the first layer's input norm follows the embedding, not an all-reduce
            ops += [_share(op, 1, fused=False), _share(op, layers - 1, fused=True)]
        elif op.name == FINAL_NORM:
            ops.append(replace(op, fused=True))
        else:
            ops.append(op)
    return replace(ledger, ops=tuple(ops))
