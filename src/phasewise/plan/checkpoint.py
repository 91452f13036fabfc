"""The default draft for speculative decoding: the model's own multi-token-prediction
layers (``ModelSpec.mtp_layers``) where it has them, else a one-layer head; accepted at the
published rate for that draft kind and the traffic's task kind (``catalog/speculative.toml``)
unless the user gives one."""

from __future__ import annotations

from phasewise.catalog.speculative import DEFAULT_TASK, Acceptance, resolve_acceptance
from phasewise.plan.space import Speculation
from phasewise.specs import ModelSpec

# Without MTP heads: an EAGLE-style draft head of one decoder layer (Li et al., EAGLE,
# ICML 2024) drafting 3 tokens a round: vLLM's EAGLE-3 acceptance test and SGLang's
# bench_eagle3.py runs behind the catalog's head figures both draft 3 (num_speculative_tokens
# 3; num_steps=3, topk=1).
HEAD_TOKENS = 3


def default_speculation(model_ref: str, model: ModelSpec, *, tokens: int | None,
                        accept: float | None, draft: str | None,
                        task: str = DEFAULT_TASK) -> Speculation:
    """The draft searched when speculation is on: ``draft`` if given; else the model's MTP
    module (one layer of its own, γ = its module count); else a one-layer head. ``accept``
    None: the documented acceptance of that draft kind on ``task`` work."""
    if draft is not None:
        acceptance = resolve_acceptance(accept, "model", task)
        return Speculation(tokens or HEAD_TOKENS, acceptance.alpha, None, draft,
                           _label(acceptance, f"draft model {draft}"))
    heads = len(model.mtp_layers)
    fraction = 1 / model.num_layers
    if heads:
        acceptance = resolve_acceptance(accept, "mtp", task)
        return Speculation(tokens or heads, acceptance.alpha, fraction, None,
                           _label(acceptance, "the model's MTP module"))
    acceptance = resolve_acceptance(accept, "head", task)
    return Speculation(tokens or HEAD_TOKENS, acceptance.alpha, fraction, None,
                       _label(acceptance, "a one-layer draft head"))


def _label(acceptance: Acceptance, draft: str) -> str:
    return f"{draft}, {acceptance.task} traffic: acceptance {acceptance.source}"
