"""Verifying a candidate with the serving simulator at the target load.

The requests are drawn exactly as ``phasewise simulate`` draws them from the same flags
and seed (a mix is drawn here and written as a trace), so the command printed beside a
candidate reproduces its verification run for run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import numpy as np

from phasewise.cost.registry import cost_model_for
from phasewise.plan.profile import sim_speculation
from phasewise.plan.screen import Layout
from phasewise.plan.space import Load, Speculation, Target, Traffic
from phasewise.serving import ClosedLoop, Pool, Server, load_trace, parse_lengths, simulate
from phasewise.serving.metrics import request_metrics
from phasewise.serving.requests import Requests, arrivals, open_loop, synthetic
from phasewise.specs import ModelSpec


@dataclass(frozen=True, slots=True)
class Verification:
    """What the simulator saw: each target's observed percentile, goodput and rates."""

    met: bool
    observed_s: tuple[float, ...]  # per target, in the order the targets were given
    goodput_rps: float
    attainment: float  # share of requests meeting every target
    requests_per_s: float
    output_tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    ttft_p50_s: float
    tpot_p50_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    kv_transfer_mean_s: float | None
    preemptions: int
    requests: int
    duration_s: float


def rate_text(rate: float) -> str:
    """The request rate as the command line carries it (and as the run uses it)."""
    return f"{rate:.6g}"


def draw_requests(traffic: Traffic, load: Load, n: int, seed: int) -> tuple[Requests, ClosedLoop | None]:
    """The requests of a verification run, as ``phasewise simulate`` would draw them."""
    if traffic.trace is not None:
        return load_trace(traffic.trace), None
    rng = np.random.default_rng(seed)
    if traffic.mix is not None:
        return mix_requests(traffic, load, n, rng), None
    isl, osl = parse_lengths(traffic.isl, "--isl"), parse_lengths(traffic.osl, "--osl")
    if load.kind == "users":
        return synthetic(n, isl, osl, rng), ClosedLoop(load.users, 0.0)
    rate = float(rate_text(load.request_rate(traffic)))
    return open_loop(n, isl, osl, rng, kind="poisson", rate_per_s=rate), None


def mix_requests(traffic: Traffic, load: Load, n: int, rng: np.random.Generator) -> Requests:
    """Each request's class drawn by share, then Poisson arrivals at the load's rate."""
    shares = np.array([c.share for c in traffic.mix])
    which = rng.choice(len(shares), size=n, p=shares / shares.sum())
    isl = np.array([c.isl for c in traffic.mix], dtype=np.int64)[which]
    osl = np.array([c.osl for c in traffic.mix], dtype=np.int64)[which]
    rate = float(rate_text(load.request_rate(traffic)))
    return Requests(isl, osl, arrivals("poisson", rate, n, rng))


def trace_csv(requests: Requests) -> str:
    """A request stream as a ``phasewise simulate --trace`` CSV; times in repr, which keeps
    every bit of a float, so the replay is exact."""
    rows = ["arrival_s,input_tokens,output_tokens"]
    rows += [f"{t!r},{i},{o}" for t, i, o in zip(requests.arrival_s.tolist(),
                                                requests.input_tokens.tolist(),
                                                requests.output_tokens.tolist(), strict=False)]
    return "\n".join(rows) + "\n"


class SharedPrices:
    """The cost model ``phasewise simulate`` builds for one device, remembering every step
    it prices, so simulations of layouts on the same device share the step prices their
    engines compute (a step's price is a pure function of its operators, its math format
    and the device: the answers are the ones the plain cost model gives)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self._memo: dict = {}

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.inner, attribute)

    def step_time(self, ledger: Any, hardware: Any) -> Any:
        key = (ledger.ops, ledger.math_format, hardware)
        timing = self._memo.get(key)
        if timing is None:
            timing = self._memo[key] = self.inner.step_time(ledger, hardware)
        return timing


def shared_prices(layout: Layout, cost: str) -> SharedPrices | None:
    """A shared cost model for a layout whose pools run on one device type (a mixed
    layout needs each device's own, which the simulator builds from the name)."""
    if layout.decode is not None and layout.decode.device != layout.prefill.device:
        return None
    if layout.decode is not None and layout.decode.engine != layout.prefill.engine:
        return None
    return SharedPrices(cost_model_for(cost, layout.prefill.device, engine=layout.prefill.engine))


def server_for(model: ModelSpec, layout: Layout, speculation: Speculation | None, cost: str,
               link: str, prices: SharedPrices | None = None) -> Server:
    shape = layout.prefill
    common = dict(model=model, precision=shape.precision, max_seqs=layout.max_seqs,
                  cost=prices or cost, engine=shape.engine, kv_link=link,
                  speculation=sim_speculation(speculation) if layout.speculating else None)
    if layout.kind == "aggregated":
        return Server(pool=Pool(shape.device, shape.parallelism, layout.replicas),
                      scheduler="chunked", max_batched_tokens=layout.chunk_tokens, **common)
    dec = layout.decode
    return Server(pool=Pool(shape.device, shape.parallelism, layout.replicas),
                  decode_pool=Pool(dec.device, dec.parallelism, layout.decode_replicas),
                  scheduler="disaggregated", **common)


def verify_group(model: ModelSpec, layouts: list[Layout], speculation: Speculation | None,
                 traffic: Traffic, load: Load, targets: tuple[Target, ...], *, requests: int,
                 seed: int, cost: str, link: str) -> list[Verification]:
    """Verify layouts of one shape one after another, sharing their step prices."""
    prices = shared_prices(layouts[0], cost)
    return [verify(model, layout, speculation, traffic, load, targets, requests=requests,
                   seed=seed, cost=cost, link=link, prices=prices) for layout in layouts]


def verify(model: ModelSpec, layout: Layout, speculation: Speculation | None, traffic: Traffic,
           load: Load, targets: tuple[Target, ...], *, requests: int, seed: int, cost: str,
           link: str, prices: SharedPrices | None = None) -> Verification:
    """Simulate ``layout`` serving the target load; the percentiles of each target."""
    stream, closed = draw_requests(traffic, load, requests, seed)
    sim = simulate(server_for(model, layout, speculation, cost, link, prices), stream,
                   closed_loop=closed)
    m = request_metrics(sim)
    values = {"ttft": m.ttft_s, "tpot": m.tpot_s[~np.isnan(m.tpot_s)], "itl": m.itl_s,
              "e2e": m.e2el_s}
    observed = tuple(_percentile(values[t.metric], t.percentile) for t in targets)
    good = np.ones(len(m.id), dtype=bool)
    for t in targets:
        if t.metric == "ttft":
            good &= m.ttft_s <= t.limit_s
        elif t.metric == "tpot":
            good &= np.isnan(m.tpot_s) | (m.tpot_s <= t.limit_s)
        elif t.metric == "e2e":
            good &= m.e2el_s <= t.limit_s
    start = float(m.arrival_s.min())
    duration = float((m.arrival_s + m.e2el_s).max() - start) or 1e-12
    out_tokens = float(m.output_tokens.sum())
    tpots = values["tpot"]
    moved = m.transfer_s[m.decode_replica != m.replica] if sim.transfers else np.empty(0)
    return Verification(
        met=all(o <= t.limit_s * (1 + 1e-9) for o, t in zip(observed, targets, strict=False)),
        observed_s=observed, goodput_rps=float(good.sum()) / duration,
        attainment=float(good.mean()), requests_per_s=len(m.id) / duration,
        output_tokens_per_s=out_tokens / duration,
        tokens_per_s_per_gpu=out_tokens / duration / sim.devices,
        tokens_per_s_per_user=1.0 / float(tpots.mean()) if len(tpots) else 0.0,
        ttft_p50_s=float(np.percentile(m.ttft_s, 50)),
        tpot_p50_s=float(np.percentile(tpots, 50)) if len(tpots) else 0.0,
        e2e_p50_s=float(np.percentile(m.e2el_s, 50)),
        e2e_p90_s=float(np.percentile(m.e2el_s, 90)),
        kv_transfer_mean_s=float(moved.mean()) if len(moved) else None,
        preemptions=int(m.preemptions.sum()), requests=len(m.id), duration_s=duration)


def _percentile(values: np.ndarray, percentile: float) -> float:
    return float(np.percentile(values, percentile)) if len(values) else 0.0


def simulate_command(model_ref: str, layout: Layout, speculation: Speculation | None,
                     traffic: Traffic, load: Load, targets: tuple[Target, ...], *, requests: int,
                     seed: int, cost: str, link: str, trace_path: str | None) -> str:
    """The ``phasewise simulate`` command line that reproduces the verification run."""
    shape = layout.prefill
    par, prec = shape.parallelism, shape.precision
    args = ["phasewise", "simulate", "--model", model_ref, "--hardware", shape.device.name]
    if layout.kind == "aggregated":
        args += ["--tp", str(par.tp), "--replicas", str(layout.replicas), "--scheduler",
                 "chunked", "--max-num-batched-tokens", str(layout.chunk_tokens)]
    else:
        dec = layout.decode
        args += ["--scheduler", "disaggregated", "--prefill-tp", str(par.tp), "--decode-tp",
                 str(dec.parallelism.tp), "--prefill-replicas", str(layout.replicas),
                 "--decode-replicas", str(layout.decode_replicas), "--decode-hardware",
                 dec.device.name, "--kv-link", link]
    if par.pp > 1:
        args += ["--pp", str(par.pp)]
    if par.ep > 1:
        args += ["--ep", str(par.ep)]
    # The checkpoint's own formats (one per module class) are what --weight-dtype auto reads.
    weights = "auto" if prec.module_weights else prec.weights
    args += ["--max-num-seqs", str(layout.max_seqs), "--weight-dtype", weights,
             "--act-dtype", prec.activations, "--kv-dtype", prec.kv_cache, "--cost", cost]
    if shape.engine:
        args += ["--engine", shape.engine]
    if layout.speculating and speculation is not None:
        args += (["--draft", speculation.draft] if speculation.draft else
                 ["--draft-head", f"{speculation.head_fraction:.6g}"])
        args += ["--spec-tokens", str(speculation.tokens), "--spec-accept",
                 f"{speculation.accept:g}"]
    args += _load_args(traffic, load, requests, seed, trace_path)
    for t in targets:
        if t.metric in ("ttft", "tpot"):
            args += [f"--{t.metric}", f"{t.limit_s * 1e3:g}ms"]
    percentiles = {t.percentile for t in targets if t.metric in ("ttft", "tpot")}
    if len(percentiles) == 1:
        args += ["--slo-percentile", f"{percentiles.pop():g}"]
    return shlex.join(args)


def _load_args(traffic: Traffic, load: Load, requests: int, seed: int,
               trace_path: str | None) -> list[str]:
    if traffic.trace is not None:
        return ["--trace", traffic.trace]
    if traffic.mix is not None:
        return ["--trace", trace_path or "TRACE.csv"]
    args = ["--isl", traffic.isl, "--osl", traffic.osl, "--num-requests", str(requests),
            "--seed", str(seed)]
    if load.kind == "users":
        return args + ["--clients", str(load.users)]
    return args + ["--rate", rate_text(load.request_rate(traffic))]
