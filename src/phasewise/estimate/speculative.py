"""Speculative decoding: a cheap draft proposes γ tokens, the target verifies them in one step.

A round is γ draft decode steps plus one target step over γ+1 tokens per sequence (the
ledger's ``Step.decode(batch, context, new_tokens=γ+1)``), and yields on average
(1 − α^(γ+1)) / (1 − α) tokens for a per-token acceptance α (Leviathan, Kalman and Matias,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, equation 1).
At batch 1 the verify step costs about as much as a plain decode step (both read every
weight once), so the round is nearly free; as the batch grows decode turns compute-bound,
the verify step costs about γ+1 decode steps, and the speed-up shrinks below 1. At long
contexts the KV reads, shared by the γ+1 tokens of a sequence, keep decode bandwidth-bound
at any batch and speculation keeps paying.

The draft is another model (any catalog model or config) or a head on the target
(EAGLE/MTP style), priced as the target cut to a fraction of its layers, sharing its
embedding and LM head.
"""

from __future__ import annotations

import dataclasses

from phasewise.catalog.speculative import DEFAULT_TASK, resolve_acceptance
from phasewise.cost import CostModel
from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.errors import InputError
from phasewise.estimate.core import PREFILL_CHUNK_TOKENS, reserve_bytes
from phasewise.estimate.pricing import (
    Cost,
    average_decode_context,
    decode_average,
    price_step,
    resolve,
    step_seconds,
)
from phasewise.estimate.whatif_types import SpeculativePoint, SpeculativeReport
from phasewise.ledger import (
    Step,
    activation_bytes_per_device,
    kv_cache_bytes_per_device,
    param_counts,
    weight_bytes_per_device,
)
from phasewise.ledger.build import check_parallelism
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.version import __version__

# Batches the speed-up is shown at, besides the workload's own.
DEFAULT_SPEC_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# More draft tokens than this per round is never useful: at α = 0.9, γ = 32 already
# yields 9.7 of the 10 tokens the geometric series can give.
MAX_SPEC_TOKENS = 32


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """Tokens a verify step yields on average: (1 − α^(γ+1)) / (1 − α) (Leviathan et al.
    2023, eq. 1): the accepted prefix of the γ drafts plus the target's own next token."""
    check_speculation(alpha, gamma)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def check_speculation(alpha: float, gamma: int) -> None:
    if not 0 <= alpha < 1:
        raise InputError(f"--spec-accept {alpha}: per-token acceptance must lie in [0, 1); "
                         "typical values are 0.6-0.9.")
    if not isinstance(gamma, int) or not 1 <= gamma <= MAX_SPEC_TOKENS:
        raise InputError(f"--spec-tokens {gamma}: give a whole number of draft tokens per "
                         f"round in 1..{MAX_SPEC_TOKENS}.")


def head_draft(target: ModelSpec, layers_fraction: float) -> ModelSpec:
    """An EAGLE/MTP-style head: the target cut to round(fraction · layers) layers (at least
    one), keeping its embedding and LM head."""
    if not 0 < layers_fraction < 1:
        raise InputError(f"--draft-head {layers_fraction}: give the head's cost as a fraction "
                         "of the target's layers in (0, 1), e.g. 0.03 for one layer of 32.")
    layers = max(1, round(layers_fraction * target.num_layers))
    return dataclasses.replace(
        target, name=f"{target.name} head ({layers} layer{'s' if layers > 1 else ''})",
        num_layers=layers, layer_types=target.layer_types[:layers],
        moe_layers=target.moe_layers[:layers], layer_specs=target.layer_specs[:layers],
        mtp_layers=())


MTP_DRAFT = "mtp"


def mtp_draft(target: ModelSpec) -> ModelSpec:
    """The model's own multi-token-prediction layers as the draft head (DeepSeek-V3 §2.2,
    used by vLLM and SGLang as the EAGLE-style proposer): its MTP layers, sharing the
    target's embedding and LM head."""
    if not target.mtp_layers:
        raise InputError(f"--draft mtp: {target.name} has no MTP layers (num_nextn_predict_layers "
                         "or mtp_num_hidden_layers in its config); give --draft MODEL or "
                         "--draft-head FRACTION.")
    count = len(target.mtp_layers)
    return dataclasses.replace(
        target, name=f"{target.name} MTP ({count} layer{'s' if count > 1 else ''})",
        num_layers=count, layer_specs=target.mtp_layers, mtp_layers=(), layer_types=(),
        moe_layers=())


def draft_parallelism(draft: ModelSpec, par: Parallelism, head: bool) -> Parallelism:
    """A head runs inside the target's last stage; a draft model shares the target's tensor
    split when its heads allow, and otherwise runs whole on every device."""
    if head:
        return Parallelism(tp=par.tp, ep=par.ep)
    try:
        check_parallelism(draft, Parallelism(tp=par.tp))
    except InputError:
        return Parallelism()
    return Parallelism(tp=par.tp)


def draft_weight_bytes(draft: ModelSpec, precision: Precision, par: Parallelism,
                        head: bool) -> float:
    weights = weight_bytes_per_device(draft, precision, par)
    if head:  # the embedding and LM head are the target's own, already in memory
        counts = param_counts(draft)
        shared = counts.embedding * (1 if draft.tie_word_embeddings else 2)
        weights -= shared / par.tp * precision.weight_bytes
    return weights


def speculative(model: ModelSpec | str, hardware: HardwareSpec | str, workload: Workload,
                precision: Precision = Precision(), parallelism: Parallelism = Parallelism(), *,
                draft: ModelSpec | str | None = None, draft_head_fraction: float | None = None,
                spec_tokens: int = 4, spec_accept: float | None = None,
                task: str = DEFAULT_TASK, batches: tuple[int, ...] = DEFAULT_SPEC_BATCHES,
                cost: Cost = DEFAULT_COST_MODEL) -> SpeculativeReport:
    """TPOT with and without speculation at the workload's batch and across ``batches``.
    ``spec_accept`` None: the documented acceptance of the draft kind on ``task`` work
    (``catalog/speculative.toml``)."""
    kind = "mtp" if draft == MTP_DRAFT else "head" if draft is None else "model"
    acceptance = resolve_acceptance(spec_accept, kind, task)
    spec_accept = acceptance.alpha
    check_speculation(spec_accept, spec_tokens)
    target, device, cost_model = resolve(model, hardware, cost)
    precision = precision.for_model(target)  # 'auto': the checkpoint's formats
    if (draft is None) == (draft_head_fraction is None):
        raise InputError("speculative decoding needs one draft: --draft MODEL or "
                         "--draft-head FRACTION.")
    head = draft is None or draft == MTP_DRAFT
    if draft == MTP_DRAFT:
        drafter = mtp_draft(target)
    elif head:
        drafter = head_draft(target, draft_head_fraction)
    else:
        drafter = resolve(draft, device, cost_model)[0]
    warnings = check_draft(target, drafter, head)
    draft_par = draft_parallelism(drafter, parallelism, head)
    expected = expected_tokens_per_round(spec_accept, spec_tokens)
    fits_without, fits_with_draft, draft_weights, draft_kv = _memory(
        target, drafter, device, workload, precision, parallelism, draft_par, head)

    def point(batch: int) -> SpeculativePoint:
        w = dataclasses.replace(workload, batch_size=batch)
        priced = _round(target, drafter, device, cost_model, precision, parallelism, draft_par,
                        w, spec_tokens)
        base, draft_s, verify_s, bound = priced
        round_s = draft_s + verify_s
        return SpeculativePoint(
            batch_size=batch, tpot_baseline_s=base, draft_s=draft_s, verify_s=verify_s,
            round_s=round_s, tpot_s=round_s / expected, speedup=base * expected / round_s,
            verify_bound=bound, fits=batch <= fits_with_draft)

    sizes = sorted(set(batches) | {workload.batch_size})
    return SpeculativeReport(
        tool_version=__version__, model=target.name, hardware=device.name, draft=drafter.name,
        draft_kind="head" if head else "model", spec_tokens=spec_tokens, spec_accept=spec_accept,
        task=acceptance.task, spec_accept_source=acceptance.source,
        expected_tokens_per_round=expected, isl=workload.isl, osl=workload.osl,
        batch_size=workload.batch_size, at_batch=point(workload.batch_size),
        points=[point(b) for b in sizes], draft_weights_bytes=draft_weights,
        draft_kv_bytes_per_sequence=draft_kv, max_batch_size_baseline=fits_without,
        max_batch_size_with_draft=fits_with_draft, warnings=warnings)


def _round(target: ModelSpec, drafter: ModelSpec, device: HardwareSpec, cost_model: CostModel,
           precision: Precision, par: Parallelism, draft_par: Parallelism, workload: Workload,
           gamma: int) -> tuple[float, float, float, str]:
    """Decode-averaged seconds of a plain decode step, of γ draft steps and of the verify
    step over γ+1 tokens per sequence; and what bounds the verify step."""
    b = workload.batch_size

    def average(model: ModelSpec, p: Parallelism, new_tokens: int) -> float:
        return decode_average(lambda c: step_seconds(model, Step.decode(b, c, new_tokens=new_tokens),
                                                     precision, p, device, cost_model), workload)

    verify_step = Step.decode(b, average_decode_context(workload), new_tokens=gamma + 1)
    bound = price_step(target, verify_step, precision, par, device, cost_model)[1].total.bound
    return (average(target, par, 1), gamma * average(drafter, draft_par, 1),
            average(target, par, gamma + 1), bound)


def check_draft(target: ModelSpec, drafter: ModelSpec, head: bool) -> list[str]:
    if head:
        return []
    target_params, draft_params = param_counts(target).total, param_counts(drafter).total
    if draft_params >= target_params:
        raise InputError(f"draft {drafter.name} ({draft_params / 1e9:,.1f} B parameters) is not "
                         f"smaller than the target {target.name} ({target_params / 1e9:,.1f} B); "
                         "choose a smaller --draft.")
    if drafter.vocab_size != target.vocab_size:
        return [f"draft {drafter.name} has a vocabulary of {drafter.vocab_size:,} tokens and the "
                f"target {target.vocab_size:,}: a draft must share the target's tokenizer."]
    return []


def _memory(target: ModelSpec, drafter: ModelSpec, device: HardwareSpec, workload: Workload,
            precision: Precision, par: Parallelism, draft_par: Parallelism,
            head: bool) -> tuple[int, int, float, float]:
    """Largest batch without and with the draft (its weights and its KV cache per sequence
    held beside the target's), the draft's weight bytes and KV bytes per sequence."""
    context = workload.max_context
    weights = weight_bytes_per_device(target, precision, par)
    kv = kv_cache_bytes_per_device(target, precision, par, sequences=1, context_tokens=context)
    draft_weights = draft_weight_bytes(drafter, precision, draft_par, head)
    draft_kv = kv_cache_bytes_per_device(drafter, precision, draft_par, sequences=1,
                                         context_tokens=context)
    activations = activation_bytes_per_device(
        target, precision, par, tokens=min(workload.batch_size * workload.isl,
                                           PREFILL_CHUNK_TOKENS), logit_tokens=workload.batch_size)
    room = device.memory_bytes - reserve_bytes(device) - weights - activations
    without = max(0, int(room // kv)) if kv else 0
    with_draft = max(0, int((room - draft_weights) // (kv + draft_kv))) if kv else 0
    return without, with_draft, draft_weights, draft_kv
