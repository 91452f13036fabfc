"""What the planner reads from a model's own config.json beyond its architecture: the
checkpoint's weight format and its multi-token-prediction heads, which set the default
weight format searched and the default draft for speculative decoding."""

from __future__ import annotations

from phasewise.catalog.models import read_config, resolve_model_path
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


def checkpoint_format(model_ref: str) -> str:
    """The weight format the checkpoint ships in: its quantization_config's (fp8 for
    DeepSeek-V3's block-scaled e4m3) or its torch_dtype's, bf16 by default."""
    config = _config(model_ref)
    quant = config.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8" or "fp8" in str(quant.get("fmt", "")).lower():
        return "fp8"
    if method in ("gptq", "awq"):
        return "int4"
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return "fp16" if dtype in ("float16", "fp16") else "bf16"


def mtp_layers(model_ref: str) -> int:
    """Multi-token-prediction modules the checkpoint carries (num_nextn_predict_layers)."""
    return int(_config(model_ref).get("num_nextn_predict_layers") or 0)


def default_speculation(model_ref: str, model: ModelSpec, *, tokens: int | None,
                        accept: float | None, draft: str | None) -> Speculation:
    """The draft searched when speculation is on: ``draft`` if given; else the model's MTP
    module (one layer of its own, γ = its module count); else a one-layer head."""
    if draft is not None:
        return Speculation(tokens or HEAD_TOKENS, HEAD_ACCEPT if accept is None else accept,
                           None, draft, DRAFT_SOURCE)
    heads = mtp_layers(model_ref)
    fraction = 1 / model.num_layers
    if heads:
        return Speculation(tokens or heads, MTP_ACCEPT if accept is None else accept, fraction,
                           None, MTP_SOURCE if accept is None else "acceptance given")
    return Speculation(tokens or HEAD_TOKENS, HEAD_ACCEPT if accept is None else accept,
                       fraction, None, HEAD_SOURCE if accept is None else "acceptance given")


def _config(model_ref: str) -> dict:
    try:
        path, _ = resolve_model_path(model_ref)
    except Exception:  # noqa: BLE001 - a spec built in code has no file: nothing to read
        return {}
    return read_config(path)
