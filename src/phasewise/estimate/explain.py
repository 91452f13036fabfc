"""The two phases at a glance: what each does, what bounds it, and where that turns over.

Two turning points are solved on the ledger, by bisection: the batch size at which a decode
step's intensity (FLOPs over bytes moved) reaches the device's ridge point, and the prompt
length at which prefill attention's FLOPs (quadratic in the prompt) reach those of the
weight GEMMs (linear in it).
"""

from __future__ import annotations

from collections.abc import Callable

from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.estimate.core import estimate
from phasewise.estimate.pricing import Cost, average_decode_context, resolve
from phasewise.estimate.types import Estimate, PhaseReport
from phasewise.estimate.whatif_types import Explanation, PhaseExplanation
from phasewise.ledger import Step, build_ledger
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.specs.compute import precision_on
from phasewise.version import __version__

# Search bounds: 2^24 sequences or prompt tokens is past any real batch or context window,
# so a turning point beyond it is reported as "never".
SEARCH_LIMIT = 2**24


def smallest_satisfying(predicate: Callable[[int], bool], *, limit: int = SEARCH_LIMIT) -> int | None:
    """Smallest n in 1..limit with ``predicate(n)``, for a predicate that stays true once it
    turns true: doubling to bracket it, then bisection. None when even ``limit`` fails."""
    if predicate(1):
        return 1
    high = 2
    while high < limit and not predicate(high):
        high *= 2
    high = min(high, limit)
    if not predicate(high):
        return None
    low = high // 2  # predicate(low) is false
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if predicate(mid) else (mid, high)
    return high


def decode_intensity(model: ModelSpec, batch: int, context: int, precision: Precision,
                     par: Parallelism) -> float:
    """FLOP per byte of memory traffic of one decode step of ``batch`` sequences."""
    return build_ledger(model, Step.decode(batch, context), precision, par).arithmetic_intensity


def decode_compute_bound_batch(model: ModelSpec, device: HardwareSpec, context: int,
                               precision: Precision = Precision(),
                               par: Parallelism = Parallelism()) -> int | None:
    """Smallest batch whose decode step at ``context`` cached tokens reaches the ridge point
    (peak FLOP/s ÷ bandwidth). None when KV reads, which grow with the batch as the FLOPs
    do, hold the intensity below the ridge however large the batch."""
    ridge = device.ridge_point(precision.math_format)
    return smallest_satisfying(
        lambda b: decode_intensity(model, b, context, precision, par) >= ridge)


def attention_overtakes_gemms_at(model: ModelSpec, precision: Precision = Precision(),
                                 par: Parallelism = Parallelism()) -> int | None:
    """Shortest prompt whose prefill attention FLOPs (2·2·h·d·S(S+1)/2 per layer) reach the
    FLOPs of all GEMMs (2·params·S). None when a sliding window keeps attention linear."""
    def attention_wins(prompt_tokens: int) -> bool:
        ledger = build_ledger(model, Step.prefill(prompt_tokens), precision, par)
        attention = sum(op.flops for op in ledger.ops if op.kind == "attention")
        gemms = sum(op.flops for op in ledger.ops if op.kind == "gemm")
        return attention >= gemms

    return smallest_satisfying(attention_wins)


def explain(model: ModelSpec | str = "llama-3.1-8b", hardware: HardwareSpec | str = "h100-sxm",
            workload: Workload = Workload(), precision: Precision = Precision(),
            parallelism: Parallelism = Parallelism(), *,
            cost: Cost = DEFAULT_COST_MODEL) -> Explanation:
    """Prefill and decode side by side for this configuration, with the turning points."""
    spec, device, cost_model = resolve(model, hardware, cost)
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    precision = precision_on(precision, device).precision  # the matmul format this device runs
    est = estimate(spec, device, workload, precision, parallelism, cost=cost_model)
    context = average_decode_context(workload)
    crossover = decode_compute_bound_batch(spec, device, context, precision, parallelism)
    short = decode_compute_bound_batch(spec, device, 0, precision, parallelism)
    limit = decode_intensity(spec, SEARCH_LIMIT, context, precision, parallelism)
    overtake = attention_overtakes_gemms_at(spec, precision, parallelism)
    prefill = _prefill_words(est, overtake)
    decode = _decode_words(est, spec, precision, parallelism, crossover, limit)
    return Explanation(
        tool_version=__version__, inputs=est.inputs,
        hardware_display_name=device.display_name, prefill=prefill, decode=decode,
        decode_context_tokens=context, decode_compute_bound_batch=crossover,
        decode_intensity_limit=limit, decode_compute_bound_batch_short_context=short,
        max_batch_size=est.memory.max_batch_size, attention_overtakes_gemms_at=overtake,
        summary=_summary(est, context, crossover, short, limit, overtake, spec.max_context))


def _kv_share(phase: PhaseReport) -> float:
    kv = phase.bytes["kv_read"] + phase.bytes["kv_write"]
    return kv / phase.memory_bytes if phase.memory_bytes else 0.0


def _phase(phase: PhaseReport, **words: str) -> PhaseExplanation:
    return PhaseExplanation(
        phase=phase.phase, bound=phase.bound, latency_s=phase.time_s,
        arithmetic_intensity=phase.arithmetic_intensity, ridge_point=phase.ridge_point,
        time_s=phase.time_s, sol_time_s=phase.sol_time_s, attention_share=phase.attention_share,
        kv_bytes_share=_kv_share(phase), **words)


def _prefill_words(est: Estimate, overtake: int | None) -> PhaseExplanation:
    i, hw = est.inputs, est.hardware
    tokens = i.batch_size * i.isl
    quadratic = (f"quadratic in attention, which overtakes the GEMMs at {overtake:,} tokens"
                 if overtake else "attention stays linear (sliding window) and never overtakes")
    return _phase(
        est.prefill,
        operation=f"GEMM (matrix × matrix): {tokens:,} prompt tokens meet each weight at once",
        hardware_figure=f"peak {hw.math_format} compute: {hw.peak_flops_per_s / 1e12:,.0f} TFLOP/s",
        sets="TTFT",
        grows_with_prompt=f"linearly in the weight GEMMs (2 FLOPs per active parameter per "
                          f"token), {quadratic}",
        grows_with_output="not at all: the prompt is processed once, before the first token",
        grows_with_batch="linearly: every prompt token is its own work, so B prompts take "
                         "about B times as long once compute-bound",
    )


def _decode_words(est: Estimate, model: ModelSpec, precision: Precision, par: Parallelism,
                  crossover: int | None, limit: float) -> PhaseExplanation:
    i, hw = est.inputs, est.hardware
    kv_token = precision.kv_keep * est.model.kv_bytes_per_token
    window = " (sliding-window layers stop at their window)" if model.is_sliding_any else ""
    turn = (f"until batch {crossover:,}, where it turns compute-bound" if crossover else
            f"and never turns compute-bound at this context: KV reads grow with the batch too, "
            f"so intensity levels off at {limit:,.0f} FLOP/byte")
    kind = "GEMV (matrix × vector)" if i.batch_size == 1 else \
        f"skinny GEMM: {i.batch_size} tokens against each weight, close to a GEMV"
    return _phase(
        est.decode,
        operation=f"{kind}; every step re-reads all weights and the KV cache",
        hardware_figure=f"memory bandwidth: {hw.memory_bandwidth_bytes_per_s / 1e12:,.2f} TB/s",
        sets="TPOT",
        grows_with_prompt=f"linearly: each step reads the whole KV cache, "
                          f"{kv_token / 1024:,.0f} KiB per cached token per sequence{window}",
        grows_with_output="OSL − 1 steps, each reading one token more of KV than the last",
        grows_with_batch=f"slowly: weights are read once per step for the whole batch, so "
                         f"step time barely grows {turn}",
    )


def _summary(est: Estimate, context: int, crossover: int | None, short: int | None,
             limit: float, overtake: int | None, max_context: int) -> list[str]:
    pre, dec, hw = est.prefill, est.decode, est.hardware
    lines = [
        f"Prefill does {pre.arithmetic_intensity:,.0f} FLOP per byte against a ridge of "
        f"{pre.ridge_point:,.0f}: {pre.bound}-bound; TTFT {_ms(pre.time_s)}.",
        f"Decode does {dec.arithmetic_intensity:,.1f} FLOP per byte: {dec.bound}-bound; TPOT "
        f"{_ms(dec.time_s)}, {100 * _kv_share(dec):.0f}% of its bytes are KV cache.",
    ]
    fits = est.memory.max_batch_size
    if not est.memory.fits and fits == 0:
        lines.append(f"The model does not fit on {hw.display_name} ×{hw.devices} at this "
                     "precision: add devices (--tp, --pp) or quantize the weights.")
    if crossover:
        where = "fits in memory" if crossover <= fits else \
            f"does not fit: memory caps the batch at {fits:,}"
        lines.append(f"Decode turns compute-bound on {hw.display_name} at batch {crossover:,} "
                     f"(context {context:,} tokens); that batch {where}.")
    else:
        lines.append(f"Decode never turns compute-bound at context {context:,}: its intensity "
                     f"levels off at {limit:,.0f} FLOP/byte, below the ridge of "
                     f"{hw.ridge_point:,.0f}" + (f" (with short contexts it would at batch "
                                                 f"{short:,})." if short else "."))
    if overtake:
        beyond = f", beyond the model's {max_context:,}-token window" if overtake > max_context else ""
        lines.append(f"Attention's quadratic term overtakes the weight GEMMs in prefill at "
                     f"prompts of {overtake:,} tokens{beyond}.")
    else:
        lines.append("Attention never overtakes the weight GEMMs: a sliding window keeps it "
                     "linear in the prompt.")
    return lines


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"
