"""Pricing one replica shape: the step times and memory the analytic screen combines.

A shape (device × parallelism × formats × engine) is priced once, through the same
ledger → lower → cost path as the estimate and the simulator (``estimate.pricing``):
prefill of each request class alone and packed into a step, for each chunk size; decode
steps at a grid of batch sizes at the traffic's mean decode context, plain and as
speculative rounds; and the KV-cache capacity the simulator would give each batch limit
(``serving.kv_cache``). Every candidate built on the shape reuses these figures, so the
screen's cost grows with the shapes, not with the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

from phasewise.errors import InputError
from phasewise.estimate.pricing import CostChoice, cost_for, price_step, step_seconds
from phasewise.ledger import SeqGroup, Step
from phasewise.plan.space import PoolShape, Speculation, Traffic
from phasewise.serving.kv_cache import kv_capacity
from phasewise.serving.speculative import Speculation as SimSpeculation
from phasewise.specs import ModelSpec

# Decode batches priced; the screen interpolates linearly between them (the ledger's
# decode step is affine in the batch at a fixed context, up to the MoE's distinct experts
# and the cost model's efficiency curves, which the grid follows).
BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True, slots=True)
class DecodePoint:
    batch: int
    step_s: float  # a plain decode step, or a speculative round when speculating
    bound: str
    network_share: float  # of the step's speed-of-light parts: collectives


@dataclass(frozen=True, slots=True)
class Profile:
    """A shape's prices. Per chunk size: each class's prefill alone (``single_s``, its
    idle TTFT) and its device time per prompt when prompts are packed into a step
    (``packed_s``); decode points (``decode``, plain; ``spec``, speculative rounds); KV
    tokens a replica holds per (chunk, max_seqs, speculating)."""

    shape: PoolShape
    fits: bool
    reason: str = ""
    single_s: dict | None = None  # chunk -> tuple per class
    packed_s: dict | None = None
    prefill_bound: str = ""
    decode: tuple[DecodePoint, ...] = ()
    spec: tuple[DecodePoint, ...] = ()
    tokens_per_round: float = 1.0
    kv_tokens: dict | None = None  # (chunk, max_seqs, speculating) -> tokens, 0: no fit

    def decode_s(self, batch: float, speculating: bool) -> float:
        """Step (or round) seconds at ``batch``, linear between grid points."""
        return interpolate(self.spec if speculating else self.decode, batch)

    def point(self, batch: float, speculating: bool) -> DecodePoint:
        points = self.spec if speculating else self.decode
        return min(points, key=lambda p: (abs(p.batch - batch), p.batch))


def interpolate(points: tuple[DecodePoint, ...], batch: float) -> float:
    b = max(1.0, batch)
    for lo, hi in zip(points, points[1:], strict=False):
        if b <= hi.batch:
            return lo.step_s + (hi.step_s - lo.step_s) * (b - lo.batch) / (hi.batch - lo.batch)
    last, before = points[-1], points[-2]
    return last.step_s + (last.step_s - before.step_s) * (b - last.batch) / (last.batch - before.batch)


def segments(points: tuple[DecodePoint, ...]) -> list[tuple[float, float, float, float]]:
    """(batch from, batch to, intercept, slope) of each linear piece; the last extends."""
    out = []
    for lo, hi in zip(points, points[1:], strict=False):
        slope = (hi.step_s - lo.step_s) / (hi.batch - lo.batch)
        out.append((lo.batch, hi.batch, lo.step_s - slope * lo.batch, slope))
    a, b, c, d = out[-1]
    out[-1] = (a, float("inf"), c, d)
    return out


def sim_speculation(spec: Speculation) -> SimSpeculation:
    return SimSpeculation(spec.tokens, spec.accept, spec.draft, spec.head_fraction)


def price_shape(model: ModelSpec, shape: PoolShape, traffic: Traffic, chunks: tuple[int, ...],
                max_seqs: tuple[int, ...], speculation: Speculation | None,
                cost: str) -> Profile:
    """Price ``shape`` for every chunk size and batch limit; a shape that cannot hold the
    model, or whose device cannot run a step of it, comes back with ``fits`` False and the
    reason."""
    try:
        return _price_shape(model, shape, traffic, chunks, max_seqs, speculation, cost)
    except InputError as err:
        return Profile(shape, False, str(err))


def _price_shape(model: ModelSpec, shape: PoolShape, traffic: Traffic, chunks: tuple[int, ...],
                 max_seqs: tuple[int, ...], speculation: Speculation | None,
                 cost: str) -> Profile:
    cost_model = cost_for(CostChoice(cost, shape.engine), shape.device)
    par, prec, dev = shape.parallelism, shape.precision, shape.device
    try:
        kv = _kv_tokens(model, shape, chunks, max_seqs, speculation)
    except InputError as err:
        return Profile(shape, False, str(err))
    if not any(kv.values()):
        return Profile(shape, False, f"{model.name} leaves no KV cache on {shape.label}")
    if max(kv.values()) < traffic.longest_tokens:
        return Profile(shape, False, f"the longest request ({traffic.longest_tokens:,} tokens) "
                                     f"needs more KV cache than {shape.label} holds")

    def seconds(step: Step) -> float:
        return step_seconds(model, step, prec, par, dev, cost_model)

    single, packed = {}, {}
    for chunk in chunks:
        single[chunk] = tuple(_chunked_prefill_s(seconds, c.isl, chunk) for c in traffic.classes)
        packed[chunk] = tuple(_packed_prefill_s(seconds, c.isl, chunk, single[chunk][i])
                              for i, c in enumerate(traffic.classes))
    first = traffic.classes[0]
    prefill_bound = price_step(model, Step.prefill(min(first.isl, max(chunks))), prec, par, dev,
                               cost_model)[1].total.bound
    context = traffic.decode_context
    top = max(max_seqs)
    grid = tuple(b for b in BATCH_GRID if b < top) + (top,)
    decode = tuple(_decode_point(model, shape, cost_model, b, context, None) for b in grid)
    spec_points: tuple[DecodePoint, ...] = ()
    per_round = 1.0
    if speculation is not None:
        spec_points = tuple(_decode_point(model, shape, cost_model, b, context, speculation)
                            for b in grid)
        per_round = float(sim_speculation(speculation).tokens_per_round)
    return Profile(shape, True, "", single, packed, prefill_bound, decode, spec_points,
                   per_round, kv)


def _kv_tokens(model: ModelSpec, shape: PoolShape, chunks: tuple[int, ...],
               max_seqs: tuple[int, ...], speculation: Speculation | None) -> dict:
    """KV tokens one replica holds, as the simulator sizes its cache (0: none)."""
    out = {}
    extra = None
    if speculation is not None:
        extra = sim_speculation(speculation).memory(model, shape.precision, shape.parallelism)
    for chunk in chunks:
        for seqs in max_seqs:
            for speculating in ((False, True) if extra else (False,)):
                try:
                    out[(chunk, seqs, speculating)] = kv_capacity(
                        model, shape.device, shape.precision, shape.parallelism,
                        max_batched_tokens=chunk, max_seqs=seqs,
                        draft=extra if speculating else None).tokens
                except InputError:
                    out[(chunk, seqs, speculating)] = 0
    return out


def _chunked_prefill_s(seconds, isl: int, chunk: int) -> float:  # noqa: ANN001
    """One prompt alone, in chunks of at most ``chunk`` tokens after the ones before."""
    total, done = 0.0, 0
    while done < isl:
        new = min(chunk, isl - done)
        last = done + new == isl
        total += seconds(Step((SeqGroup(1, new, done, 1 if last else 0),)))
        done += new
    return total


def _packed_prefill_s(seconds, isl: int, chunk: int, alone_s: float) -> float:  # noqa: ANN001
    """Device seconds per prompt when ⌊chunk / isl⌋ prompts share a step (one prompt at a
    time when it is longer than the chunk)."""
    prompts = chunk // isl
    if prompts <= 1:
        return alone_s
    return seconds(Step.prefill(isl, batch=prompts)) / prompts


def _decode_point(model: ModelSpec, shape: PoolShape, cost_model, batch: int, context: int,  # noqa: ANN001
                  speculation: Speculation | None) -> DecodePoint:
    """A decode step of ``batch`` sequences at ``context`` cached tokens; speculating, a
    round as the simulator prices it: the target verifying γ+1 tokens a sequence plus γ
    draft decode steps (``serving.pricing.StepPricer``)."""
    par, prec, dev = shape.parallelism, shape.precision, shape.device
    new = 1 + (speculation.tokens if speculation else 0)
    _, timing = price_step(model, Step.decode(batch, context, new_tokens=new), prec, par, dev,
                           cost_model)
    step_s = timing.total.time_s
    if speculation is not None:
        draft, draft_par, _ = sim_speculation(speculation).drafter(model, par)
        step_s += speculation.tokens * step_seconds(draft, Step.decode(batch, context), prec,
                                                    draft_par, dev, cost_model)
    total = timing.total
    parts = total.compute_s + total.memory_s + total.network_s
    return DecodePoint(batch, step_s, total.bound, total.network_s / parts if parts else 0.0)
