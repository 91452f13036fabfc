"""Pricing a step through the ledger and a cost model, for the what-ifs that need steps the
plain estimate does not take (speculative verify, draft steps, a batch at a set context)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from phasewise.catalog import load_hardware, load_model
from phasewise.cost import CostModel, StepTiming
from phasewise.cost.calibrated import engine_steps, merge_step_timings
from phasewise.cost.registry import DEFAULT_COST_MODEL, cost_model_for
from phasewise.ledger import Ledger, Step, build_ledger
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.specs.compute import precision_on

# Simpson's rule over the first, middle and last decode context, as the estimate averages
# decode: exact while step time is piecewise linear in the context.
SIMPSON_WEIGHTS = (1 / 6, 4 / 6, 1 / 6)


@dataclass(frozen=True, slots=True)
class CostChoice:
    """A cost model by name with its options, resolved per device (a calibrated model takes
    each device's own constants), for what-ifs that price several devices."""

    name: str = DEFAULT_COST_MODEL
    engine: str | None = None
    calibration: str | None = None


Cost = str | CostChoice | CostModel


def cost_for(cost: Cost, device: HardwareSpec) -> CostModel:
    """The cost model for ``device``: a name or a CostChoice is resolved; a model is used as is."""
    if isinstance(cost, str):
        return cost_model_for(cost, device)
    if isinstance(cost, CostChoice):
        return cost_model_for(cost.name, device, engine=cost.engine, calibration=cost.calibration)
    return cost


def cost_name(cost: Cost) -> str:
    return cost if isinstance(cost, str) else cost.name


def resolve(model: ModelSpec | str, hardware: HardwareSpec | str,
            cost: Cost = DEFAULT_COST_MODEL) -> tuple[ModelSpec, HardwareSpec, CostModel]:
    """Catalog names to specs, and the cost model for that device."""
    spec = load_model(model) if isinstance(model, str) else model
    device = load_hardware(hardware) if isinstance(hardware, str) else hardware
    return spec, device, cost_for(cost, device)


def price_step(model: ModelSpec, step: Step, precision: Precision, par: Parallelism,
               device: HardwareSpec, cost_model: CostModel) -> tuple[Ledger, StepTiming]:
    """The step's ledger and its time, as the estimate prices it: an engine that runs a long
    prompt in chunks has each chunk priced and the parts summed. The precision runs as the
    device runs it (``precision_on``: FP4 natively, or weight-only where it has no FP4)."""
    precision = precision_on(precision, device).precision
    ledger = build_ledger(model, step, precision, par)
    passes = engine_steps(cost_model, step)
    if len(passes) == 1:
        return ledger, cost_model.step_time(ledger, device)
    parts = [cost_model.step_time(build_ledger(model, s, precision, par), device) for s in passes]
    return ledger, merge_step_timings(parts, ledger.ops)


def step_seconds(model: ModelSpec, step: Step, precision: Precision, par: Parallelism,
                 device: HardwareSpec, cost_model: CostModel) -> float:
    return price_step(model, step, precision, par, device, cost_model)[1].total.time_s


def decode_contexts(workload: Workload) -> tuple[int, int, int]:
    """Cached tokens at the first, middle and last decode step (as the estimate takes them)."""
    first, last = workload.isl, workload.isl + max(workload.osl - 2, 0)
    return first, (first + last) // 2, last


def decode_average(per_context: Callable[[int], float], workload: Workload) -> float:
    """Simpson's-rule mean of ``per_context(cached_tokens)`` over the decode steps."""
    return sum(w * per_context(c) for w, c in zip(SIMPSON_WEIGHTS, decode_contexts(workload), strict=False))


def average_decode_context(workload: Workload) -> int:
    return decode_contexts(workload)[1]
