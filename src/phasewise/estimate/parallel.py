"""Tensor-parallel scaling: what each added device buys once collectives are paid.

TP splits every weight matrix, so each device reads 1/TP of the weights per step, but it
adds two ring all-reduces per layer (2(p−1)/p of the hidden states each, in 2(p−1)
latency-bound rounds) and an all-gather of the logits (the ledger's ``tp.allreduce`` and
``tp.allgather`` ops). For a small model the per-round link latency soon outweighs the
bytes saved: that is where TP stops paying.
"""

from __future__ import annotations

from phasewise.cost import link_for
from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.errors import InputError
from phasewise.estimate.core import estimate
from phasewise.estimate.pricing import Cost, resolve
from phasewise.estimate.types import Estimate, PhaseReport
from phasewise.estimate.whatif_types import ParallelPoint, ParallelScaling
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.version import __version__

DEFAULT_TP_DEGREES = (1, 2, 4, 8)


def _network_share(phase: PhaseReport) -> float:
    return phase.network_s / phase.sol_time_s if phase.sol_time_s else 0.0


def tp_scaling(model: ModelSpec | str, hardware: HardwareSpec | str,
               workload: Workload = Workload(), precision: Precision = Precision(), *,
               tp_degrees: tuple[int, ...] | list[int] = DEFAULT_TP_DEGREES, pp: int = 1,
               ep: int = 1, cost: Cost = DEFAULT_COST_MODEL) -> ParallelScaling:
    """One estimate per TP degree; degrees the model's heads do not allow are skipped."""
    spec, device, cost_model = resolve(model, hardware, cost)
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    link = link_for(device) if max(tp_degrees) > 1 else None
    runs: list[tuple[int, Estimate]] = []
    skipped: dict[str, str] = {}
    for tp in sorted(set(tp_degrees)):
        try:
            runs.append((tp, estimate(spec, device, workload, precision,
                                      Parallelism(tp, pp, max(ep, 1)), cost=cost_model)))
        except InputError as err:
            skipped[f"TP{tp}"] = str(err)
    if not runs:
        raise InputError(f"no TP degree in {list(tp_degrees)} suits {spec.name}: "
                         f"{next(iter(skipped.values()))}")
    tp0, first = runs[0]
    points = [ParallelPoint(
        tp=tp, devices=est.hardware.devices, ttft_s=est.ttft_s, tpot_s=est.tpot_s,
        prefill_network_share=_network_share(est.prefill),
        decode_network_share=_network_share(est.decode),
        weights_bytes_per_device=est.memory.weights_bytes,
        memory_total_bytes_per_device=est.memory.total_bytes, fits=est.memory.fits,
        tokens_per_s_per_device=est.tokens_per_s_per_gpu,
        tpot_speedup=first.tpot_s / est.tpot_s,
        tpot_efficiency=first.tpot_s / est.tpot_s * tp0 / tp,
        within_link_domain=link is None or tp <= link.max_devices) for tp, est in runs]
    return ParallelScaling(
        tool_version=__version__, model=spec.name, hardware=device.name,
        link=link.name if link else "", isl=workload.isl, osl=workload.osl,
        batch_size=workload.batch_size, points=points,
        best_tp_for_tpot=min(points, key=lambda p: p.tpot_s).tp,
        best_tp_for_ttft=min(points, key=lambda p: p.ttft_s).tp,
        tp_stops_paying_at=stops_paying_at(points), skipped=skipped)


def stops_paying_at(points: list[ParallelPoint]) -> int | None:
    """The first TP degree whose TPOT is no better than the degree before it."""
    for before, after in zip(points, points[1:], strict=False):
        if after.tpot_s >= before.tpot_s:
            return after.tp
    return None
