"""What-if comparisons: a baseline estimate beside variants that change one or more inputs
(weight, activation or KV format, --kv-keep, parallelism, device, batch, price), with what
each change does to TTFT, TPOT, the largest batch that fits and cost."""

from __future__ import annotations

import dataclasses
from typing import Any

from phasewise.catalog import load_hardware
from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.errors import InputError, nearest_hint
from phasewise.estimate.core import estimate
from phasewise.estimate.cost_energy import with_price
from phasewise.estimate.pricing import Cost, cost_for, resolve
from phasewise.estimate.types import Estimate
from phasewise.estimate.whatif_types import VariantResult, WhatIf
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.version import __version__

# Variant keys, as the CLI flags name them, and the input each one sets.
VARIANT_KEYS = {
    "weight-dtype": ("precision", "weights", str),
    "act-dtype": ("precision", "activations", str),
    "kv-dtype": ("precision", "kv_cache", str),
    "kv-keep": ("precision", "kv_keep", float),
    "isl": ("workload", "isl", int),
    "osl": ("workload", "osl", int),
    "batch-size": ("workload", "batch_size", int),
    "tp": ("parallelism", "tp", int),
    "pp": ("parallelism", "pp", int),
    "ep": ("parallelism", "ep", int),
    "hardware": ("hardware", "", str),
    "price": ("price", "", float),
}
# A change smaller than this is reported as "unchanged" (rounding, not an effect).
NEGLIGIBLE_CHANGE = 0.005


def parse_variant(text: str) -> dict[str, str]:
    """'kv-dtype=fp8,kv-keep=0.5' -> {'kv-dtype': 'fp8', 'kv-keep': '0.5'}."""
    changes: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not value.strip():
            raise InputError(f"--what-if '{part}': write KEY=VALUE, e.g. kv-dtype=fp8.")
        if key not in VARIANT_KEYS:
            raise InputError(f"--what-if: unknown key '{key}'.{nearest_hint(key, list(VARIANT_KEYS))}"
                             f" Known: {', '.join(VARIANT_KEYS)}.")
        changes[key] = value.strip()
    if not changes:
        raise InputError("--what-if is empty; give KEY=VALUE pairs such as kv-dtype=fp8.")
    return changes


def apply_variant(changes: dict[str, str], hardware: HardwareSpec, workload: Workload,
                  precision: Precision, parallelism: Parallelism
                  ) -> tuple[HardwareSpec, Workload, Precision, Parallelism]:
    """The inputs with ``changes`` applied, each a dataclasses.replace of the baseline's."""
    parts: dict[str, Any] = {"hardware": hardware, "workload": workload,
                             "precision": precision, "parallelism": parallelism}
    price = None
    for key, raw in changes.items():
        target, field, parse = VARIANT_KEYS[key]
        try:
            value = parse(raw)
        except ValueError:
            raise InputError(f"--what-if {key}={raw}: not a valid {parse.__name__}.") from None
        if target == "hardware":
            parts["hardware"] = load_hardware(value)
        elif target == "price":
            price = value
        else:
            parts[target] = dataclasses.replace(parts[target], **{field: value})
    parts["hardware"] = with_price(parts["hardware"], price)
    return parts["hardware"], parts["workload"], parts["precision"], parts["parallelism"]


def what_if(model: ModelSpec | str, hardware: HardwareSpec | str, workload: Workload,
            precision: Precision, parallelism: Parallelism, variants: list[dict[str, str]], *,
            cost: Cost = DEFAULT_COST_MODEL) -> WhatIf:
    """The baseline and each variant, with the variant's effects stated against the baseline."""
    spec, device, cost_model = resolve(model, hardware, cost)
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    base = estimate(spec, device, workload, precision, parallelism, cost=cost_model)
    results = [_result("baseline", {}, base, None)]
    for changes in variants:
        inputs = apply_variant(changes, device, workload, precision, parallelism)
        est = estimate(spec, *inputs, cost=cost_for(cost, inputs[0]))
        label = ", ".join(f"{k}={v}" for k, v in changes.items())
        results.append(_result(label, changes, est, base))
    return WhatIf(tool_version=__version__, baseline=base.inputs, results=results)


def _cost(est: Estimate, field: str) -> float | None:
    return getattr(est.cost_energy, field) if est.cost_energy else None


def _result(label: str, changes: dict[str, str], est: Estimate,
            base: Estimate | None) -> VariantResult:
    return VariantResult(
        label=label, changes=changes, ttft_s=est.ttft_s, tpot_s=est.tpot_s,
        max_batch_size=est.memory.max_batch_size, fits=est.memory.fits,
        memory_total_bytes=est.memory.total_bytes, tokens_per_s_per_gpu=est.tokens_per_s_per_gpu,
        usd_per_million_input_tokens=_cost(est, "usd_per_million_input_tokens"),
        usd_per_million_output_tokens=_cost(est, "usd_per_million_output_tokens"),
        effects=_effects(est, base) if base else [])


def relative_change(new: float | None, old: float | None) -> float | None:
    """(new − old) / old, or None when either is missing or old is zero."""
    if new is None or old is None or old == 0:
        return None
    return (new - old) / old


def _effects(est: Estimate, base: Estimate) -> list[str]:
    words = []
    if est.memory.max_batch_size != base.memory.max_batch_size:
        words.append(f"largest batch {base.memory.max_batch_size:,} → {est.memory.max_batch_size:,}")
    pairs = [
        ("TTFT", est.ttft_s, base.ttft_s),
        ("TPOT", est.tpot_s, base.tpot_s),
        ("$/M input", _cost(est, "usd_per_million_input_tokens"),
         _cost(base, "usd_per_million_input_tokens")),
        ("$/M output", _cost(est, "usd_per_million_output_tokens"),
         _cost(base, "usd_per_million_output_tokens")),
    ]
    for name, new, old in pairs:
        change = relative_change(new, old)
        if change is None:
            continue
        words.append(f"{name} unchanged" if abs(change) < NEGLIGIBLE_CHANGE
                     else f"{name} {'+' if change > 0 else '−'}{abs(change) * 100:.0f}%")
    if est.memory.fits != base.memory.fits:
        words.append("now fits" if est.memory.fits else "no longer fits")
    return words
