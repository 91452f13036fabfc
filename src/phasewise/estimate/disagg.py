"""Disaggregated prefill and decode: two pools, and the KV cache shipped between them.

A prefill instance (``tp`` devices) runs prompts, then sends each prompt's KV cache over a
link to a decode instance, which generates the rest. The transfer is part of TTFT:
TTFT = prefill step + KV bytes ÷ link bandwidth + link latency, with each tensor-parallel
rank sending its own shard over its own link. Each pool has a request rate it can sustain;
the slower one sets the rate, and the balanced ratio of pool sizes is the one at which
neither pool waits for the other.

Colocated serving is the comparison: the same devices run both phases, so each request
costs its prefill time plus its share of the decode steps, and decode steps stall while
a prefill runs (TPOT stretches by 1 / (1 − share of time in prefill)).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from phasewise.catalog import load_link
from phasewise.cost import CostModel
from phasewise.cost.registry import DEFAULT_COST_MODEL
from phasewise.errors import InputError
from phasewise.estimate.core import PREFILL_CHUNK_TOKENS, estimate
from phasewise.estimate.cost_energy import SECONDS_PER_HOUR, TOKENS_PER_MILLION
from phasewise.estimate.pricing import Cost, decode_average, resolve, step_seconds
from phasewise.estimate.whatif_types import ColocatedResult, DisaggReport, PoolResult, RequestClass
from phasewise.ledger import Step, kv_cache_bytes_per_device
from phasewise.specs import HardwareSpec, Link, ModelSpec, Parallelism, Precision, Workload
from phasewise.version import __version__

# The usual scale-out NIC of an H100/H200 node: one 400 Gb/s InfiniBand NDR port per GPU.
DEFAULT_LINK = "infiniband-ndr-400"
GIGA, MICRO = 1e9, 1e-6


def custom_link(bandwidth_gb_per_s: float, latency_us: float = 0.0) -> Link:
    """A link from --link-bandwidth (GB/s per direction) and --link-latency (µs)."""
    if bandwidth_gb_per_s <= 0 or latency_us < 0:
        raise InputError("--link-bandwidth must be positive (GB/s per direction) and "
                         "--link-latency at least 0 (µs).")
    return Link(f"{bandwidth_gb_per_s:g} GB/s, {latency_us:g} µs", bandwidth_gb_per_s * GIGA,
                latency_us * MICRO, "network", 1, "given on the command line")


def kv_transfer(model: ModelSpec, precision: Precision, par: Parallelism, prompt_tokens: int,
                link: Link) -> tuple[float, float]:
    """(bytes, seconds) to ship one prompt's KV cache: each device's shard of
    prompt_tokens × KV bytes per token goes over that device's link, bytes ÷ bandwidth +
    latency (a 4,096-token Llama-3.1-70B prompt in bf16: 4096 × 327,680 B = 1.34 GB, which
    takes 26.8 ms at 50 GB/s)."""
    shard = kv_cache_bytes_per_device(model, precision, par, sequences=1,
                                      context_tokens=prompt_tokens)
    return shard, shard / link.bandwidth_bytes_per_s + link.latency_s


def _check_pool(role: str, devices: int, tp: int) -> int:
    if devices < 1:
        raise InputError(f"--{role}-pool {devices}: a pool needs at least one device.")
    if devices % tp:
        raise InputError(f"--{role}-pool {devices} is not a multiple of its TP {tp}; give a "
                         f"pool of {tp * max(1, devices // tp)} or {tp * (devices // tp + 1)}.")
    return devices // tp


def prompts_per_prefill_step(isl: int) -> int:
    """Prompts a prefill instance packs into one step: up to PREFILL_CHUNK_TOKENS tokens."""
    return max(1, PREFILL_CHUNK_TOKENS // isl)


@dataclass(frozen=True, slots=True)
class _Priced:
    """One request class priced on both pools."""

    workload: Workload
    share: float
    single_prefill_s: float  # one prompt alone: its TTFT before the transfer
    prefill_s_per_request: float  # instance time per prompt, prompts packed into a step
    tpot_s: float
    decode_s_per_request: float  # instance time per request: OSL − 1 steps shared by the batch
    kv_bytes: float
    kv_s: float


def _price_class(model: ModelSpec, workload: Workload, share: float, precision: Precision,
                 pre: tuple[HardwareSpec, CostModel, Parallelism],
                 dec: tuple[HardwareSpec, CostModel, Parallelism], link: Link) -> _Priced:
    (pre_dev, pre_cost, pre_par), (dec_dev, dec_cost, dec_par) = pre, dec
    isl, b = workload.isl, workload.batch_size
    prompts = prompts_per_prefill_step(isl)
    single = step_seconds(model, Step.prefill(isl), precision, pre_par, pre_dev, pre_cost)
    packed = step_seconds(model, Step.prefill(isl, batch=prompts), precision, pre_par, pre_dev,
                          pre_cost)
    tpot = decode_average(lambda c: step_seconds(model, Step.decode(b, c), precision, dec_par,
                                                 dec_dev, dec_cost), workload)
    kv_bytes, kv_s = kv_transfer(model, precision, pre_par, isl, link)
    return _Priced(workload, share, single, packed / prompts, tpot,
                   (workload.osl - 1) * tpot / b, kv_bytes, kv_s)


def _mean(classes: list[_Priced], get) -> float:  # noqa: ANN001 - a small accessor
    return sum(c.share * get(c) for c in classes)


def request_mix(workload: Workload,
                mix: list[tuple[int, int, float]] | None) -> list[tuple[Workload, float]]:
    """(workload, share) per request class; shares are normalised to sum to 1. Without a mix,
    the workload's own ISL and OSL are the only class."""
    if not mix:
        return [(workload, 1.0)]
    if any(share <= 0 for _, _, share in mix):
        raise InputError("--mix: every share must be positive, e.g. 4096:256:0.7,512:1024:0.3.")
    total = sum(share for _, _, share in mix)
    return [(Workload(isl, osl, workload.batch_size), share / total) for isl, osl, share in mix]


def disaggregate(model: ModelSpec | str, workload: Workload, precision: Precision = Precision(), *,
                 prefill_hardware: HardwareSpec | str, decode_hardware: HardwareSpec | str,
                 prefill_pool: int, decode_pool: int, prefill_tp: int = 1, decode_tp: int = 1,
                 link: Link | str = DEFAULT_LINK, mix: list[tuple[int, int, float]] | None = None,
                 cost: Cost = DEFAULT_COST_MODEL) -> DisaggReport:
    """Rates, TTFT/TPOT and cost of the two pools, the balanced ratio, and colocated serving
    on each device type for comparison. ``workload.batch_size`` is the number of sequences a
    decode instance runs at once; ``mix`` lists (ISL, OSL, share) request classes, else the
    workload's ISL and OSL are the only one."""
    classes_in = request_mix(workload, mix)
    if any(w.osl < 2 for w, _ in classes_in):
        raise InputError("disaggregation needs --osl of at least 2: with one output token "
                         "there is no decode phase to move.")
    spec, pre_dev, pre_cost = resolve(model, prefill_hardware, cost)
    precision = precision.for_model(spec)  # 'auto': the checkpoint's formats
    _, dec_dev, dec_cost = resolve(spec, decode_hardware, cost)
    the_link = load_link(link) if isinstance(link, str) else link
    pre_par, dec_par = Parallelism(tp=prefill_tp), Parallelism(tp=decode_tp)
    n_pre = _check_pool("prefill", prefill_pool, prefill_tp)
    n_dec = _check_pool("decode", decode_pool, decode_tp)
    pre, dec = (pre_dev, pre_cost, pre_par), (dec_dev, dec_cost, dec_par)
    classes = [_price_class(spec, w, share, precision, pre, dec, the_link) for w, share in classes_in]

    # Requests per second one instance sustains; the link carries each prefill device's shard.
    per_pre = min(1 / _mean(classes, lambda c: c.prefill_s_per_request),
                  the_link.bandwidth_bytes_per_s / _mean(classes, lambda c: c.kv_bytes))
    per_dec = 1 / _mean(classes, lambda c: c.decode_s_per_request)
    rate = min(n_pre * per_pre, n_dec * per_dec)
    best, best_rate = _best_split(prefill_pool + decode_pool, prefill_tp, decode_tp, per_pre, per_dec)
    fits = (all(_fits(spec, pre_dev, pre_cost, dataclasses.replace(
                c.workload, batch_size=prompts_per_prefill_step(c.workload.isl), osl=1),
                precision, pre_par) for c in classes),
            all(_fits(spec, dec_dev, dec_cost, c.workload, precision, dec_par) for c in classes))

    def pool(role: str, dev: HardwareSpec, devices: int, tp: int, instances: int,
             per_instance: float, fit: bool) -> PoolResult:
        price = dev.price_usd_per_hour
        return PoolResult(
            role=role, hardware=dev.name, display_name=dev.display_name, devices=devices, tp=tp,
            instances=instances, instance_seconds_per_request=1 / per_instance,
            requests_per_s=instances * per_instance, utilization=rate / (instances * per_instance),
            usd_per_hour=price * devices if price is not None else None, fits=fit)

    pools = (pool("prefill", pre_dev, prefill_pool, prefill_tp, n_pre, per_pre, fits[0]),
             pool("decode", dec_dev, decode_pool, decode_tp, n_dec, per_dec, fits[1]))
    usd_h = None if any(p.usd_per_hour is None for p in pools) else sum(p.usd_per_hour for p in pools)
    output_tokens = _mean(classes, lambda c: c.workload.osl)
    all_tokens = _mean(classes, lambda c: c.workload.isl + c.workload.osl)
    warnings = [f"the {p.role} pool's devices do not fit the model with this batch; see "
                "`phasewise estimate` for the memory breakdown." for p in pools if not p.fits]
    return DisaggReport(
        tool_version=__version__, model=spec.name, batch_size=workload.batch_size,
        classes=[RequestClass(isl=c.workload.isl, osl=c.workload.osl, share=c.share,
                              prompts_per_prefill_step=prompts_per_prefill_step(c.workload.isl),
                              ttft_s=c.single_prefill_s + c.kv_s, tpot_s=c.tpot_s,
                              kv_transfer_bytes=c.kv_bytes, kv_transfer_s=c.kv_s)
                 for c in classes],
        link=the_link.name, link_bandwidth_bytes_per_s=the_link.bandwidth_bytes_per_s,
        link_latency_s=the_link.latency_s,
        kv_transfer_bytes=_mean(classes, lambda c: c.kv_bytes),
        kv_transfer_s=_mean(classes, lambda c: c.kv_s), prefill=pools[0], decode=pools[1],
        ttft_s=_mean(classes, lambda c: c.single_prefill_s + c.kv_s),
        tpot_s=_mean(classes, lambda c: c.tpot_s * (c.workload.osl - 1))
        / _mean(classes, lambda c: c.workload.osl - 1),
        sustained_requests_per_s=rate,
        bottleneck="prefill" if n_pre * per_pre <= n_dec * per_dec else "decode",
        balanced_prefill_to_decode=(prefill_tp / per_pre) / (decode_tp / per_dec),
        best_split=best, best_split_requests_per_s=best_rate,
        usd_per_million_output_tokens=_per_million(usd_h, rate * output_tokens),
        usd_per_million_tokens=_per_million(usd_h, rate * all_tokens),
        colocated=[_colocated(spec, dev, c, classes, precision, dec_par)
                   for dev, c in _distinct((pre_dev, pre_cost), (dec_dev, dec_cost))],
        warnings=warnings)


def _per_million(usd_per_hour: float | None, tokens_per_s: float) -> float | None:
    if usd_per_hour is None or tokens_per_s <= 0:
        return None
    return usd_per_hour / SECONDS_PER_HOUR / tokens_per_s * TOKENS_PER_MILLION


def _best_split(total: int, tp_p: int, tp_d: int, per_pre: float,
                per_dec: float) -> tuple[tuple[int, int], float]:
    """Of every split of ``total`` devices into whole prefill and decode instances, the one
    with the highest sustained rate (fewest prefill devices on a tie)."""
    best, best_rate = (tp_p, total - tp_p), 0.0
    for prefill in range(tp_p, total, tp_p):
        decode = (total - prefill) // tp_d * tp_d
        if decode < tp_d:
            break
        rate = min(prefill // tp_p * per_pre, decode // tp_d * per_dec)
        if rate > best_rate:
            best, best_rate = (prefill, decode), rate
    return best, best_rate


def _distinct(*pairs: tuple[HardwareSpec, CostModel]) -> list[tuple[HardwareSpec, CostModel]]:
    seen: dict[str, tuple[HardwareSpec, CostModel]] = {}
    for device, cost_model in pairs:
        seen.setdefault(device.name, (device, cost_model))
    return list(seen.values())


def _colocated(model: ModelSpec, device: HardwareSpec, cost_model: CostModel,
               classes: list[_Priced], precision: Precision, par: Parallelism) -> ColocatedResult:
    """Both phases on one instance: device time per request is its share of a prefill step
    plus its share of OSL − 1 decode steps of the batch, averaged over the request mix."""
    here = (device, cost_model, par)
    no_transfer = custom_link(1.0)  # nothing crosses a link here; its figures go unused
    priced = [_price_class(model, c.workload, c.share, precision, here, here, no_transfer)
              for c in classes]
    prefill_s = _mean(priced, lambda c: c.prefill_s_per_request)
    per_request_s = prefill_s + _mean(priced, lambda c: c.decode_s_per_request)
    rate = 1 / per_request_s / par.devices
    tpot = _mean(priced, lambda c: c.tpot_s * (c.workload.osl - 1)) / _mean(
        priced, lambda c: c.workload.osl - 1)
    tokens = _mean(priced, lambda c: c.workload.isl + c.workload.osl)
    price = device.price_usd_per_hour
    return ColocatedResult(
        hardware=device.name, tp=par.tp, requests_per_s_per_device=rate,
        ttft_s=_mean(priced, lambda c: c.single_prefill_s),
        tpot_s=tpot / (1 - prefill_s / per_request_s),
        usd_per_million_tokens=_per_million(price, rate * tokens),
        fits=all(_fits(model, device, cost_model, c.workload, precision, par) for c in priced))


def _fits(model: ModelSpec, device: HardwareSpec, cost_model: CostModel, workload: Workload,
          precision: Precision, par: Parallelism) -> bool:
    return estimate(model, device, workload, precision, par, cost=cost_model).memory.fits
