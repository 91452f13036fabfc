"""Real prefill and decode steps of the reference transformer, each set beside its ledger.

For every point the FLOPs and bytes come from ``ledger.build_ledger`` (the single source
of arithmetic); the measurement supplies only the time. The predicted time is the cost
model's on a ``HardwareSpec`` built from the measured ceilings, so MFU, MBU and the gap to
speed of light are all against what this machine really reaches.

``profile_points`` yields one point at a time, so a caller can show progress and keep the
points already measured when a run is interrupted.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from phasewise.cost import CostModel, SpeedOfLight
from phasewise.errors import InputError
from phasewise.ledger import (
    Step,
    activation_bytes_per_device,
    build_ledger,
    kv_cache_bytes_per_device,
    weight_bytes_per_device,
)
from phasewise.measure.layer_timing import MAX_INSTRUMENTED_PASSES, layer_rows, layer_shares
from phasewise.measure.micro import available_memory_bytes, hardware_from_ceilings, torch_dtype
from phasewise.measure.timing import Sample, time_call
from phasewise.measure.types import Ceilings, ProfilePoint
from phasewise.specs import ModelSpec, Parallelism, Precision

# Share of free memory a profile may plan to use: the rest covers the allocator's slack,
# the attention kernels' scratch and the interpreter.
USABLE_MEMORY_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    """The steps to measure: prefill of one prompt per length, decode of every batch size at
    every context length."""

    prompt_lengths: tuple[int, ...] = (128, 512, 2048)
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64)
    contexts: tuple[int, ...] = (512,)
    warmup: int = 1
    repeats: int = 5
    # Instrumented passes per point that split its time by layer group (0: no split).
    layer_passes: int = MAX_INSTRUMENTED_PASSES

    def __post_init__(self) -> None:
        for name in ("prompt_lengths", "batch_sizes", "contexts"):
            values = getattr(self, name)
            if any(v < 1 for v in values):
                raise InputError(f"{name.replace('_', ' ')} must be positive, got {list(values)}.")
        if self.repeats < 1 or self.warmup < 0 or self.layer_passes < 0:
            raise InputError("--repeats must be at least 1 and --warmup at least 0.")

    @property
    def steps(self) -> list[tuple[str, Step]]:
        prefill = [("prefill", Step.prefill(n)) for n in self.prompt_lengths]
        decode = [("decode", Step.decode(b, c)) for c in self.contexts for b in self.batch_sizes]
        return prefill + decode

    @property
    def cache_batch(self) -> int:
        return max((*self.batch_sizes, 1)) if self.contexts else 1

    @property
    def cache_tokens(self) -> int:
        """Positions the KV cache must hold: the longest prompt, or the longest context
        plus the decoded token."""
        return max((*self.prompt_lengths, *(c + 1 for c in self.contexts), 1))


def precision_for(dtype: str) -> Precision:
    """The reference transformer keeps weights, activations and KV cache in one format."""
    return Precision(weights=dtype, activations=dtype, kv_cache=dtype)


def required_bytes(spec: ModelSpec, plan: ProfilePlan, dtype: str) -> float:
    """Weights, the KV cache for the largest batch at the longest length, and the widest
    step's activations (ledger memory helpers)."""
    precision, par = precision_for(dtype), Parallelism()
    weights = weight_bytes_per_device(spec, precision, par)
    kv = kv_cache_bytes_per_device(spec, precision, par, sequences=plan.cache_batch,
                                   context_tokens=plan.cache_tokens)
    widest = max((*plan.prompt_lengths, *plan.batch_sizes))
    activations = activation_bytes_per_device(spec, precision, par, tokens=widest,
                                              logit_tokens=plan.cache_batch)
    return weights + kv + activations


def check_fits(spec: ModelSpec, plan: ProfilePlan, dtype: str, device: str) -> float:
    """Refuse, before allocating anything, a profile that would not fit in free memory, or
    fp16 on a CPU (without AVX512-FP16, torch runs fp16 matmul through a slow scalar path)."""
    if dtype == "fp16" and device == "cpu":
        raise InputError("fp16 on a CPU runs matmuls through a slow fallback and measures "
                         "nothing useful; use --dtype fp32 or bf16.")
    need = required_bytes(spec, plan, dtype)
    free = available_memory_bytes(device)
    if need > USABLE_MEMORY_FRACTION * free:
        raise InputError(
            f"{spec.name} in {dtype} needs {need / 1e9:,.2f} GB on {device} (weights, KV cache "
            f"for batch {plan.cache_batch} × {plan.cache_tokens:,} tokens, activations) but "
            f"{free / 1e9:,.2f} GB is free; choose a smaller model, fewer or shorter points "
            "(--batch-size, --context, --prompt-lengths), or bf16.")
    return need


def profile_points(model: Any, spec: ModelSpec, ceilings: Ceilings, plan: ProfilePlan, *,
                   dtype: str, device: str, cost: CostModel | None = None,
                   cuda_graphs: bool = True, seed: int = 0) -> Iterator[ProfilePoint]:
    """Measure every step of ``plan`` on ``model`` (a reference ``Transformer`` whose caches
    hold ``plan.cache_batch`` × ``plan.cache_tokens``) and yield one point per step."""
    import torch

    from phasewise.measure.reference import syncs_with_host

    hardware = hardware_from_ceilings(ceilings)
    precision = precision_for(dtype)
    generator = torch.Generator().manual_seed(seed)
    for phase, step in plan.steps:
        group = step.groups[0]
        tokens = torch.randint(0, spec.vocab_size, (group.count, group.new_tokens),
                               generator=generator).to(device)
        # MoE layers that run their experts one by one read the counts back to the host,
        # which a CUDA graph cannot hold; grouped GEMMs do not.
        graph = cuda_graphs and phase == "decode" and not syncs_with_host(model)
        sample, graphed = measure_step(model, tokens, group.cached_tokens, device=device,
                                       warmup=plan.warmup, repeats=plan.repeats, cuda_graph=graph)
        point = make_point(phase, step, sample, spec, precision, hardware, ceilings, cost, graphed)
        if plan.layer_passes:
            run = functools.partial(_forward, model, tokens, group.cached_tokens)
            shares = layer_shares(model, run, spec, device=device,
                                  passes=min(plan.repeats, plan.layer_passes))
            ledger = build_ledger(spec, step, precision)
            point = point.model_copy(update={"layers": layer_rows(ledger, hardware, shares,
                                                                  point.time_s, cost)})
        yield point


def _forward(model: Any, tokens: Any, start: int) -> Any:
    from phasewise.measure.reference import decode_one_token, prefill

    step = prefill if tokens.shape[1] > 1 else decode_one_token
    return step(model, tokens, start)


def measure_step(model: Any, tokens: Any, start: int, *, device: str, warmup: int,
                 repeats: int, cuda_graph: bool = False) -> tuple[Sample, bool]:
    """Time one forward pass of ``tokens`` (batch, new) at position ``start``: prefill when
    it starts at 0 with several tokens, else decode. On CUDA, decode is captured once as a
    CUDA graph and replayed, as serving engines do, unless capture fails (e.g. MoE routing
    syncs with the host)."""
    from phasewise.measure.reference import decode_one_token, prefill

    if tokens.shape[1] > 1:
        return time_call(lambda: prefill(model, tokens, start), device=device, warmup=warmup,
                         repeats=repeats), False
    run = lambda: decode_one_token(model, tokens, start)  # noqa: E731
    replay = capture_graph(run) if cuda_graph and device.startswith("cuda") else None
    sample = time_call(replay or run, device=device, warmup=warmup, repeats=repeats)
    return sample, replay is not None


def capture_graph(run: Any) -> Any:
    """``run`` captured as a CUDA graph: a callable that replays it and returns the output
    tensor the capture allocated (overwritten by each replay), or None when the capture
    fails (a host sync inside ``run``, for one)."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up on a side stream, as torch.cuda.graphs requires
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = run()
    except RuntimeError:
        torch.cuda.synchronize()
        return None

    def replay() -> Any:
        graph.replay()
        return output

    return replay


def make_point(phase: str, step: Step, sample: Sample, spec: ModelSpec, precision: Precision,
               hardware: Any, ceilings: Ceilings, cost: CostModel | None,
               cuda_graph: bool = False) -> ProfilePoint:
    """A measured time set beside the ledger of its step and the cost model's prediction."""
    group = step.groups[0]
    ledger = build_ledger(spec, step, precision)
    floor = SpeedOfLight().step_time(ledger, hardware).total
    expected = cost.step_time(ledger, hardware).total.time_s if cost is not None else None
    time_s = sample.median_s
    flops_per_s, bytes_per_s = ledger.flops / time_s, ledger.memory_bytes / time_s
    label = (f"pp{group.new_tokens}" if phase == "prefill"
             else f"tg@{group.cached_tokens}×{group.count}")
    return ProfilePoint(
        phase=phase, label=label, batch_size=group.count, new_tokens=group.new_tokens,
        context_tokens=group.cached_tokens, time_s=time_s, min_time_s=sample.min_s,
        repeats=sample.repeats, tokens_per_s=step.new_tokens / time_s, flops=ledger.flops,
        bytes=ledger.bytes_by_class, memory_bytes=ledger.memory_bytes,
        arithmetic_intensity=ledger.arithmetic_intensity, achieved_flops_per_s=flops_per_s,
        achieved_bytes_per_s=bytes_per_s,
        mfu=flops_per_s / ceilings.gemm_flops_per_s[precision.math_format],
        mbu=bytes_per_s / ceilings.copy_bytes_per_s, predicted_bound=floor.bound,
        sol_time_s=floor.time_s, expected_time_s=expected, cuda_graph=cuda_graph)


def prepare_model(spec: ModelSpec, plan: ProfilePlan, *, dtype: str, device: str,
                  weights: str | None = None, seed: int = 0) -> Any:
    """The reference transformer for ``spec`` with random (or ``weights``) weights and its
    caches allocated for the plan; call ``check_fits`` first."""
    from phasewise.measure.loading import load_weights
    from phasewise.measure.reference import build_model, prefer_vector_layouts, use_grouped_gemm

    model = build_model(spec, dtype=torch_dtype(dtype), device=device, seed=seed)
    if weights:
        load_weights(model, spec, weights)
    if device == "cpu":
        prefer_vector_layouts(model)
    use_grouped_gemm(model)
    model.setup_caches(plan.cache_batch, plan.cache_tokens)
    return model
