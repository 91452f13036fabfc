"""Devices ranked for one model and workload: speed of each phase, memory fit and cost.

Prefill is bound by FLOP/s and decode by bandwidth, so a prompt-heavy workload and a
generation-heavy one can rank the same devices differently; the winners per criterion
make that visible.
"""

from __future__ import annotations

from collections.abc import Callable

from phasewise.catalog import hardware_names, load_hardware
from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.errors import InputError
from phasewise.estimate.core import estimate
from phasewise.estimate.cost_energy import SECONDS_PER_HOUR, with_price
from phasewise.estimate.pricing import Cost, cost_for, cost_name, resolve
from phasewise.estimate.types import Estimate
from phasewise.estimate.whatif_types import Comparison, DeviceResult
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.version import __version__

REQUESTS_PER_THOUSAND = 1000.0

# criterion -> (result field, True when larger is better)
CRITERIA: dict[str, tuple[str, bool]] = {
    "cost": ("usd_per_thousand_requests", False),
    "ttft": ("ttft_s", False),
    "tpot": ("tpot_s", False),
    "throughput": ("tokens_per_s_per_device", True),
    "input-cost": ("usd_per_million_input_tokens", False),
    "output-cost": ("usd_per_million_output_tokens", False),
}
WINNER_LABELS = {
    "ttft": "prefill: lowest TTFT",
    "tpot": "decode: lowest TPOT",
    "throughput": "most output tokens/s per device",
    "input-cost": "cheapest input tokens",
    "output-cost": "cheapest output tokens",
    "cost": "cheapest request",
}


def compare(model: ModelSpec | str, workload: Workload = Workload(),
            precision: Precision = Precision(), *, hardware: list[str | HardwareSpec] | None = None,
            parallelisms: list[Parallelism] | None = None, rank_by: str = "cost",
            prices: dict[str, float] | None = None, include_unfit: bool = False,
            cost: Cost = DEFAULT_COST_MODEL) -> Comparison:
    """Estimate ``model`` on each device (every catalog device by default) under each
    parallelism, drop what cannot run or does not fit, and rank the rest by ``rank_by``."""
    if rank_by not in CRITERIA:
        raise InputError(f"--rank-by {rank_by}: choose one of {', '.join(CRITERIA)}.")
    devices = [load_hardware(h) if isinstance(h, str) else h
               for h in (hardware if hardware is not None else hardware_names())]
    spec = resolve(model, devices[0] if devices else "h100-sxm", cost)[0]
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    results: list[DeviceResult] = []
    skipped: dict[str, str] = {}
    for device in devices:
        device = with_price(device, (prices or {}).get(device.name))
        for par in parallelisms or [Parallelism()]:
            key = device.name if par == Parallelism() else f"{device.name} TP{par.tp}"
            try:
                est = _estimate_on(spec, device, workload, precision, par, cost)
            except InputError as err:
                skipped[key] = str(err)
                continue
            if not est.memory.fits and not include_unfit:
                skipped[key] = (f"does not fit: needs {est.memory.total_bytes / 1e9:,.1f} GB of "
                                f"{est.memory.capacity_bytes / 1e9:,.0f} GB per device"
                                f"{_larger_tp_hint(spec, device, workload, precision, par)}")
                continue
            results.append(device_result(est, device, par))
    ranked = rank(results, rank_by)
    return Comparison(
        tool_version=__version__, model=spec.name, isl=workload.isl, osl=workload.osl,
        batch_size=workload.batch_size, weight_dtype=precision.weights,
        act_dtype=precision.activations, kv_dtype=precision.kv_cache, kv_keep=precision.kv_keep,
        cost_model=cost_name(cost), rank_by=rank_by,
        results=ranked, winners=winners(ranked), skipped=skipped)


def smallest_fitting_tp(model: ModelSpec, device: HardwareSpec, workload: Workload,
                        precision: Precision, par: Parallelism) -> int | None:
    """The smallest power-of-two TP above ``par.tp``, within the device's scale-up domain,
    whose per-device footprint (weights, KV cache, activations, reserve) fits; None if none
    does. Memory arithmetic only: no step is priced."""
    from phasewise.estimate.core import memory_report
    from phasewise.ledger.build import check_parallelism

    widest = device.interconnect.max_devices if device.interconnect is not None else 1
    tp = par.tp * 2
    while tp <= widest:
        candidate = Parallelism(tp=tp, pp=par.pp, ep=par.ep)
        try:
            check_parallelism(model, candidate)
            if memory_report(model, device, workload, precision, candidate).fits:
                return tp
        except InputError:
            pass  # this TP does not divide the heads; try the next
        tp *= 2
    return None


def _larger_tp_hint(model: ModelSpec, device: HardwareSpec, workload: Workload,
                    precision: Precision, par: Parallelism) -> str:
    tp = smallest_fitting_tp(model, device, workload, precision, par)
    if tp is not None:
        return f"; fits from TP{tp} (--tp {tp})"
    widest = device.interconnect.max_devices if device.interconnect is not None else 1
    return f"; no TP up to its scale-up domain ({widest}) fits it"


def _estimate_on(model: ModelSpec, device: HardwareSpec, workload: Workload,
                 precision: Precision, par: Parallelism, cost: Cost) -> Estimate:
    link = device.interconnect
    if par.devices > 1 and link is not None and par.devices // par.pp > link.max_devices:
        raise InputError(f"TP{par.tp} spans more than the {link.max_devices} devices "
                         f"{link.name} joins; use --pp across machines.")
    return estimate(model, device, workload, precision, par, cost=cost_for(cost, device))


def device_result(est: Estimate, device: HardwareSpec, par: Parallelism) -> DeviceResult:
    """One ranked row: an estimate's speed, fit and cost per device and per request."""
    ce = est.cost_energy
    price = device.price_usd_per_hour
    per_request = (price * par.devices * est.e2el_s / SECONDS_PER_HOUR / est.inputs.batch_size
                   * REQUESTS_PER_THOUSAND if price is not None else None)
    return DeviceResult(
        hardware=device.name, display_name=device.display_name, tp=par.tp, pp=par.pp,
        ep=par.ep, devices=par.devices, fits=est.memory.fits,
        memory_total_bytes=est.memory.total_bytes, capacity_bytes=est.memory.capacity_bytes,
        max_batch_size=est.memory.max_batch_size, ttft_s=est.ttft_s, tpot_s=est.tpot_s,
        prefill_bound=est.prefill.bound, decode_bound=est.decode.bound,
        tokens_per_s_per_device=est.tokens_per_s_per_gpu, usd_per_hour=price,
        usd_per_million_input_tokens=ce.usd_per_million_input_tokens if ce else None,
        usd_per_million_output_tokens=ce.usd_per_million_output_tokens if ce else None,
        usd_per_thousand_requests=per_request,
        price_basis=device.price.basis if device.price else ("catalog" if price is not None else None),
        price_date=device.price.date if device.price else None, unpriced=price is None)


def _sort_key(criterion: str) -> Callable[[DeviceResult], tuple[bool, float]]:
    field, larger_better = CRITERIA[criterion]

    def key(row: DeviceResult) -> tuple[bool, float]:
        value = getattr(row, field)
        if value is None:  # no price: ranked after every priced device
            return (True, -row.tokens_per_s_per_device)
        return (False, -value if larger_better else value)

    return key


def rank(results: list[DeviceResult], criterion: str) -> list[DeviceResult]:
    return sorted(results, key=_sort_key(criterion))


def label(row: DeviceResult) -> str:
    return row.hardware + (f" TP{row.tp}" if row.devices > 1 else "")


def winners(results: list[DeviceResult]) -> dict[str, str]:
    """The best device for each criterion that at least one result has a value for."""
    best: dict[str, str] = {}
    for criterion, name in WINNER_LABELS.items():
        field = CRITERIA[criterion][0]
        candidates = [r for r in results if getattr(r, field) is not None]
        if candidates:
            best[name] = label(rank(candidates, criterion)[0])
    return best
