"""Phase-level answers: price the prefill step and the decode steps, then size memory."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from phasewise.catalog import load_hardware, load_model
from phasewise.cost import CostModel, SpeedOfLight, StepTiming, math_format_for
from phasewise.cost.calibrated import engine_steps, merge_step_timings
from phasewise.cost.registry import DEFAULT_COST_MODEL, cost_model_for
from phasewise.errors import InputError
from phasewise.estimate.cost_energy import cost_energy
from phasewise.estimate.types import (
    ConstantRow,
    Estimate,
    HardwareSummary,
    Inputs,
    KernelRow,
    MemoryReport,
    ModelSummary,
    OpRow,
    PhaseReport,
)
from phasewise.ledger import (
    Ledger,
    Step,
    activation_bytes_per_device,
    build_ledger,
    kv_cache_bytes_per_device,
    param_counts,
    weight_bytes_per_device,
)
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.specs.compute import precision_on
from phasewise.specs.precision import MODULE_CLASSES
from phasewise.version import __version__

# Engine passes (micro-batches of one prompt) one estimate prices; each is priced on its
# own, so past this the count and not the model would set the run time.
MAX_ENGINE_PASSES = 8_192

# Share of device memory an engine leaves for the runtime (CUDA context, allocator slack,
# graphs): vLLM's default gpu_memory_utilization is 0.9. macOS lets the GPU wire about 75%
# of unified memory (Metal's recommendedMaxWorkingSetSize), so Apple devices keep 25% back.
RUNTIME_RESERVE_FRACTION = {"apple_gpu": 0.25, "cpu": 0.10}
DEFAULT_RESERVE_FRACTION = 0.10
# Engines prefill in chunks; vLLM's default max_num_batched_tokens with chunked prefill is
# 8192, which bounds the transient activations of one step.
PREFILL_CHUNK_TOKENS = 8192
ATTENTION_OPS = ("attn.score", "attn.kv_dequant")

_SOL = SpeedOfLight()


@dataclass(frozen=True, slots=True)
class _Priced:
    ledger: Ledger
    expected: StepTiming
    floor: StepTiming


def estimate(model: ModelSpec | str = "llama-3.1-8b", hardware: HardwareSpec | str = "h100-sxm",
             workload: Workload = Workload(), precision: Precision = Precision(),
             parallelism: Parallelism = Parallelism(), *, cost: str | CostModel = DEFAULT_COST_MODEL,
             detail: bool = False, engine: str | None = None,
             calibration: str | None = None) -> Estimate:
    """TTFT, TPOT, throughput and memory for ``workload`` on ``parallelism.devices`` devices.

    Prefill is one step of ``batch_size`` prompts; decode is priced at the first, middle and
    last context and averaged with Simpson's rule (exact while step time is piecewise
    linear in the context, as it is here). ``engine`` and ``calibration`` (a profile file)
    choose the calibrated model's constants.
    """
    spec = load_model(model) if isinstance(model, str) else model
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    device = load_hardware(hardware) if isinstance(hardware, str) else hardware
    cost_model = (cost_model_for(cost, device, engine=engine, calibration=calibration)
                  if isinstance(cost, str) else cost)
    choice = precision_on(precision, device)  # FP4 natively, or weight-only where there is none
    precision = choice.precision
    device.peak_flops(precision.math_format)  # a clear error when the format is missing
    b, isl, osl = workload.batch_size, workload.isl, workload.osl

    prefill = _price(spec, Step.prefill(isl, batch=b), precision, parallelism, device, cost_model)
    first, last = isl, isl + max(osl - 2, 0)
    decodes = [_price(spec, Step.decode(b, c), precision, parallelism, device, cost_model)
               for c in (first, (first + last) // 2, last)]
    pre = _phase_report("prefill", f"pp{isl}", b * isl, [prefill], device, precision)
    dec = _phase_report("decode", f"tg{osl}", b, decodes, device, precision, simpson=True)

    counts = param_counts(spec, kv_bytes=precision.kv_bytes)
    e2el = pre.time_s + (osl - 1) * dec.time_s
    tokens_per_s = b * osl / e2el
    memory = memory_report(spec, device, workload, precision, parallelism)
    charges = cost_energy(device, parallelism.devices, prefill_s=pre.time_s,
                          input_tokens=b * isl, decode_step_s=dec.time_s, tokens_per_decode_step=b)
    return Estimate(
        tool_version=__version__,
        inputs=Inputs(model=spec.name, hardware=device.name, isl=isl, osl=osl, batch_size=b,
                      weight_dtype=precision.weights, act_dtype=precision.activations,
                      kv_dtype=precision.kv_cache, tp=parallelism.tp, pp=parallelism.pp,
                      ep=parallelism.ep, cost_model=cost_model.name,
                      kv_keep=precision.kv_keep, engine=getattr(cost_model, "engine", None),
                      calibration=str(calibration) if calibration else None,
                      weight_formats={cls: precision.weight_format_for(cls)
                                      for cls in MODULE_CLASSES},
                      projection_formats=dict(precision.projection_weights) or None,
                      formats_source=precision.source or "--weight-dtype"),
        model=ModelSummary(name=spec.name, params_total=counts.total, params_active=counts.active,
                           kv_bytes_per_token=counts.kv_bytes_per_token, layers=spec.num_layers,
                           max_context=spec.max_context,
                           state_bytes_per_sequence=counts.state_bytes_per_sequence,
                           params_mtp=counts.mtp, params_vision=counts.vision,
                           layer_kinds={g.label: g.count for g in spec.layer_groups}),
        hardware=_hardware_summary(device, precision, parallelism, choice.reason),
        prefill=pre, decode=dec,
        ttft_s=pre.time_s, tpot_s=dec.time_s, e2el_s=e2el, tokens_per_s=tokens_per_s,
        prefill_tokens_per_s=pre.tokens_per_s, decode_tokens_per_s=dec.tokens_per_s,
        tokens_per_s_per_user=1.0 / dec.time_s,
        tokens_per_s_per_gpu=tokens_per_s / parallelism.devices,
        # One definition of $ per million output tokens everywhere: the decode steps'
        # device time per generated token (prompt tokens pay for the prefill).
        usd_per_million_output_tokens=charges.usd_per_million_output_tokens,
        memory=memory,
        cost_energy=charges,
        warnings=_warnings(spec, workload, memory, device, parallelism),
        ops=_op_rows(prefill, decodes[1]) if detail else None,
        constants=_constant_rows(cost_model) if detail else None,
        kernels=_kernel_rows(cost_model, device, spec, precision, parallelism,
                             (("prefill", Step.prefill(isl, batch=b)),
                              ("decode", Step.decode(b, (first + last) // 2))))
        if detail else None,
    )


def _check_passes(cost_model: CostModel, step: Step) -> None:
    """Refuse, before splitting it, a prompt an engine would run as more micro-batches
    than one estimate prices (each is priced on its own): ceil(tokens per sequence /
    max(1, ubatch // sequences)) passes, as cost.calibrated.split_prefill cuts them."""
    ubatch = getattr(getattr(cost_model, "traits", None), "prefill_ubatch_tokens", 0)
    if not ubatch or len(step.groups) != 1:
        return
    group = step.groups[0]
    passes = -(-group.new_tokens // max(1, ubatch // group.count))
    if passes > MAX_ENGINE_PASSES:
        raise InputError(f"a prompt of {group.new_tokens:,} tokens for {group.count:,} "
                         f"sequences runs as {passes:,} micro-batches of {ubatch} tokens in "
                         f"{cost_model.name}'s engine, more than the {MAX_ENGINE_PASSES:,} "
                         "one estimate prices; shorten the prompt or the batch.")


def _constant_rows(cost_model: CostModel) -> list[ConstantRow] | None:
    """The calibrated model's constants with the profile level each came from (None for a
    cost model without fitted constants)."""
    return [ConstantRow(**asdict(c)) for c in getattr(cost_model, "sources", ())] or None


def _kernel_rows(cost_model: CostModel, device: HardwareSpec, model: ModelSpec,
                 precision: Precision, par: Parallelism,
                 steps: tuple[tuple[str, Step], ...]) -> list[KernelRow] | None:
    """The kernels of the engine's first forward pass of each step, from its lowering
    (None for a cost model that prices the ledger as it is)."""
    kernel = getattr(cost_model, "kernel", None)
    if kernel is None:
        return None
    rows = []
    for phase, step in steps:
        passes = engine_steps(cost_model, step)
        label = phase if len(passes) == 1 else f"{phase} 1/{len(passes)}"
        ledger = build_ledger(model, passes[0], precision, par)
        for op in ledger.ops:
            k = kernel(op, device, math_format_for(op, ledger.math_format))
            rows.append(KernelRow(phase=label, name=op.name, layers=op.layers, unit=k.unit,
                                  flops=k.flops, op_flops=op.flops, passes=k.passes,
                                  memory_bytes=k.memory_bytes, extra_bytes=k.extra_bytes,
                                  launches=k.launches, rules=list(k.rules)))
    return rows


def _price(model: ModelSpec, step: Step, precision: Precision, par: Parallelism,
           device: HardwareSpec, cost_model: CostModel) -> _Priced:
    ledger = build_ledger(model, step, precision, par)
    floor = _SOL.step_time(ledger, device)
    _check_passes(cost_model, step)
    passes = engine_steps(cost_model, step)  # an engine may run a long prompt in chunks
    if cost_model.name == _SOL.name:
        expected = floor
    elif len(passes) == 1:
        expected = cost_model.step_time(ledger, device)
    else:
        expected = merge_step_timings([cost_model.step_time(build_ledger(model, s, precision, par),
                                                            device) for s in passes], ledger.ops)
    return _Priced(ledger, expected, floor)


def _phase_report(phase: str, label: str, tokens: int, priced: list[_Priced],
                  device: HardwareSpec, precision: Precision, *, simpson: bool = False) -> PhaseReport:
    weights = (1 / 6, 4 / 6, 1 / 6) if simpson else (1.0,)

    def mean(get) -> float:  # noqa: ANN001 - a small accessor
        return sum(w * get(p) for w, p in zip(weights, priced, strict=False))

    time_s = mean(lambda p: p.expected.total.time_s)
    flops = mean(lambda p: p.ledger.flops)
    memory_bytes = mean(lambda p: p.ledger.memory_bytes)
    by_class = {c: mean(lambda p, c=c: p.ledger.bytes(c)) for c in priced[0].ledger.bytes_by_class}
    attention_s = mean(lambda p: sum(t.time_s for op, t in p.expected.ops
                                     if op.name in ATTENTION_OPS))
    peak = device.peak_flops(precision.math_format)
    middle = priced[len(priced) // 2]
    return PhaseReport(
        phase=phase, label=label, tokens_per_step=tokens, flops=flops, bytes=by_class,
        memory_bytes=memory_bytes,
        arithmetic_intensity=flops / memory_bytes if memory_bytes else 0.0,
        ridge_point=device.ridge_point(precision.math_format),
        bound=middle.expected.total.bound,
        time_s=time_s, sol_time_s=mean(lambda p: p.floor.total.time_s),
        compute_s=mean(lambda p: p.floor.total.compute_s),
        memory_s=mean(lambda p: p.floor.total.memory_s),
        network_s=mean(lambda p: p.floor.total.network_s),
        tokens_per_s=tokens / time_s,
        mfu=flops / time_s / peak,
        mbu=memory_bytes / time_s / device.memory_bandwidth_bytes_per_s,
        attention_share=attention_s / time_s,
    )


def _hardware_summary(device: HardwareSpec, precision: Precision, par: Parallelism,
                      math_format_reason: str = "") -> HardwareSummary:
    fmt = precision.math_format
    price = device.price
    return HardwareSummary(
        name=device.name, display_name=device.display_name, device_class=device.device_class,
        math_format=fmt, peak_flops_per_s=device.peak_flops(fmt),
        memory_bandwidth_bytes_per_s=device.memory_bandwidth_bytes_per_s,
        memory_bytes=device.memory_bytes, ridge_point=device.ridge_point(fmt),
        devices=par.devices, price_usd_per_hour=device.price_usd_per_hour,
        math_format_reason=math_format_reason,
        price_basis=price.basis if price else None, price_date=price.date if price else None,
        price_label=price.label if price else None)


def reserve_bytes(device: HardwareSpec) -> float:
    return RUNTIME_RESERVE_FRACTION.get(device.device_class, DEFAULT_RESERVE_FRACTION) * device.memory_bytes


def memory_report(model: ModelSpec, device: HardwareSpec, workload: Workload,
                  precision: Precision, par: Parallelism) -> MemoryReport:
    """Per-device footprint at the largest context, and the largest batch that fits."""
    b, context = workload.batch_size, workload.max_context
    weights = weight_bytes_per_device(model, precision, par)
    kv_per_seq = kv_cache_bytes_per_device(model, precision, par, sequences=1,
                                           context_tokens=context)
    activations = activation_bytes_per_device(
        model, precision, par, tokens=min(b * workload.isl, PREFILL_CHUNK_TOKENS), logit_tokens=b)
    reserve = reserve_bytes(device)
    total = weights + b * kv_per_seq + activations + reserve
    room = device.memory_bytes - weights - activations - reserve
    return MemoryReport(
        weights_bytes=weights, kv_cache_bytes=b * kv_per_seq, activations_bytes=activations,
        reserve_bytes=reserve, total_bytes=total, capacity_bytes=device.memory_bytes,
        fits=total <= device.memory_bytes, shortfall_bytes=max(0.0, total - device.memory_bytes),
        max_batch_size=max(0, int(room // kv_per_seq)) if kv_per_seq else 0)


def _warnings(model: ModelSpec, workload: Workload, memory: MemoryReport,
              device: HardwareSpec, par: Parallelism) -> list[str]:
    """What makes the figures hypothetical: a context past the model's, a footprint past
    the device's memory, a tensor-parallel group past the device's scale-up domain."""
    out = list(model.notes)  # what the config reader could not price
    if workload.max_context > model.max_context:
        out.append(f"context {workload.max_context:,} tokens exceeds {model.name}'s maximum of "
                   f"{model.max_context:,}; the arithmetic still holds, the model may not.")
    if not memory.fits:
        out.append(f"does not fit: {memory.total_bytes / 1e9:,.1f} GB per device against "
                   f"{memory.capacity_bytes / 1e9:,.0f} GB on {device.name}; the times are "
                   "those of a device with room (split it over more devices or use a "
                   "smaller format).")
    link = device.interconnect
    if par.tp > (link.max_devices if link else 1):
        where = (f"the {link.max_devices} of one {link.name} domain" if link
                 else "one device (its sheet has no scale-up link)")
        out.append(f"TP {par.tp} spans more {device.name} devices than {where}; the "
                   "tensor-parallel all-reduces would cross a slower network than the one "
                   "priced.")
    return out


def _op_rows(prefill: _Priced, decode: _Priced) -> list[OpRow]:
    rows = []
    for phase, priced in (("prefill", prefill), ("decode", decode)):
        for (op, expected), (_, floor) in zip(priced.expected.ops, priced.floor.ops, strict=False):
            rows.append(OpRow(phase=phase, name=op.name, kind=op.kind, layers=op.layers,
                              flops=op.flops, bytes=op.bytes_by_class,
                              arithmetic_intensity=op.arithmetic_intensity, bound=expected.bound,
                              time_s=expected.time_s, sol_time_s=floor.time_s))
    return rows
