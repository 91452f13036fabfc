"""Batching and the roofline: decode intensity rising with the batch until the ridge, tokens/s
per device against tokens/s per user, and the batch at which the KV cache fills memory."""

from __future__ import annotations

import dataclasses

from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.estimate.core import estimate
from phasewise.estimate.explain import decode_compute_bound_batch
from phasewise.estimate.pricing import Cost, average_decode_context, resolve
from phasewise.estimate.whatif_types import BatchPoint, BatchSweep
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.version import __version__

# The default sweep doubles from 1 until it has passed both the batch memory allows and
# the compute-bound turn, or reaches this many sequences (far past any engine's default
# max_num_seqs: 256 in vLLM, 1024 in TensorRT-LLM).
DEFAULT_MAX_SWEEP_BATCH = 4096


def default_batches(max_batch: int, crossover: int | None, *,
                    ceiling: int = DEFAULT_MAX_SWEEP_BATCH) -> list[int]:
    """Powers of two from 1 past the larger of the memory cap and the compute turn."""
    target = min(ceiling, max(max_batch, crossover or 0, 1) * 2)
    batches = [1]
    while batches[-1] < target:
        batches.append(batches[-1] * 2)
    return batches


def batch_sweep(model: ModelSpec | str = "llama-3.1-8b", hardware: HardwareSpec | str = "h100-sxm",
                workload: Workload = Workload(), precision: Precision = Precision(),
                parallelism: Parallelism = Parallelism(), *, batches: list[int] | None = None,
                cost: Cost = DEFAULT_COST_MODEL) -> BatchSweep:
    """One estimate per batch size; ISL and OSL stay those of ``workload``."""
    spec, device, cost_model = resolve(model, hardware, cost)
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    base = estimate(spec, device, workload, precision, parallelism, cost=cost_model)
    crossover = decode_compute_bound_batch(spec, device, average_decode_context(workload),
                                           precision, parallelism)
    sizes = batches or default_batches(base.memory.max_batch_size, crossover)
    points = []
    for b in sizes:
        est = estimate(spec, device, dataclasses.replace(workload, batch_size=b), precision,
                       parallelism, cost=cost_model)
        points.append(BatchPoint(
            batch_size=b, decode_intensity=est.decode.arithmetic_intensity,
            ridge_point=est.decode.ridge_point, decode_bound=est.decode.bound,
            ttft_s=est.ttft_s, tpot_s=est.tpot_s,
            tokens_per_s_per_device=b / est.tpot_s / parallelism.devices,
            tokens_per_s_per_user=est.tokens_per_s_per_user,
            kv_cache_bytes=est.memory.kv_cache_bytes, memory_total_bytes=est.memory.total_bytes,
            fits=est.memory.fits,
            usd_per_million_output_tokens=(est.cost_energy.usd_per_million_output_tokens
                                           if est.cost_energy else None)))
    return BatchSweep(tool_version=__version__, inputs=base.inputs,
                      hardware_display_name=device.display_name, points=points,
                      max_batch_size=base.memory.max_batch_size, compute_bound_batch=crossover)
