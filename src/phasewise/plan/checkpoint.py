"""The default draft for speculative decoding: the model's own multi-token-prediction
layers (``ModelSpec.mtp_layers``) where it has them, else a one-layer head."""

from __future__ import annotations

from phasewise.plan.space import Speculation
from phasewise.specs import ModelSpec

# Acceptance of the second token drafted by DeepSeek-V3's MTP module: "between 85% and 90%
# across various generation topics" (DeepSeek-V3 Technical Report, arXiv 2412.19437,
# section 5.4.3); the low end is the default.
MTP_ACCEPT = 0.85
MTP_SOURCE = "DeepSeek-V3 Technical Report §5.4.3: MTP second-token acceptance 85–90%"
# Without MTP heads: an EAGLE-style draft head of one decoder layer (Li et al., EAGLE,
# ICML 2024), at phasewise's default per-token acceptance (``simulate --spec-accept``),
# drafting 3 tokens a round (a common num_speculative_tokens in vLLM's EAGLE examples).
HEAD_ACCEPT = 0.7
HEAD_TOKENS = 3
HEAD_SOURCE = ("one-layer EAGLE-style head at phasewise's default acceptance 0.7; give "
               "--spec-accept for your task")
DRAFT_SOURCE = "draft model given with --draft"


def default_speculation(model_ref: str, model: ModelSpec, *, tokens: int | None,
                        accept: float | None, draft: str | None) -> Speculation:
    """The draft searched when speculation is on: ``draft`` if given; else the model's MTP
    module (one layer of its own, γ = its module count); else a one-layer head."""
    if draft is not None:
        return Speculation(tokens or HEAD_TOKENS, HEAD_ACCEPT if accept is None else accept,
                           None, draft, DRAFT_SOURCE)
    heads = len(model.mtp_layers)
    fraction = 1 / model.num_layers
    if heads:
        return Speculation(tokens or heads, MTP_ACCEPT if accept is None else accept, fraction,
                           None, MTP_SOURCE if accept is None else "acceptance given")
    return Speculation(tokens or HEAD_TOKENS, HEAD_ACCEPT if accept is None else accept,
                       fraction, None, HEAD_SOURCE if accept is None else "acceptance given")
