"""Build a simulated server from its description, check the run is possible, run it.

    server = Server(model="llama-3.1-8b", pool=Pool("h100-sxm"), scheduler="chunked")
    requests = synthetic(1000, parse_lengths("1024", "--isl"), parse_lengths("256", "--osl"),
                         rng, arrival_s=poisson_arrivals(8.0, 1000, rng))
    sim = simulate(server, requests)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from phasewise.catalog import load_hardware, load_link, load_model
from phasewise.cost import CostModel
from phasewise.cost.base import measured_link_efficiency
from phasewise.cost.registry import DEFAULT_COST_MODEL, cost_model_for
from phasewise.errors import InputError
from phasewise.ledger import kv_cache_bytes_per_device
from phasewise.serving.cluster import Cluster, Source, load_balancer
from phasewise.serving.engine import EventLoop
from phasewise.serving.kv_cache import DEFAULT_BLOCK_TOKENS, KVCapacity, kv_capacity
from phasewise.serving.presets import EngineSettings
from phasewise.serving.pricing import DEFAULT_BUCKET_TOKENS, StepPricer
from phasewise.serving.replica import Limits, Replica, Seq
from phasewise.serving.requests import ClosedLoop, Requests
from phasewise.serving.schedulers import DEFAULT_MAX_SEQS, MixedWhole, Scheduler, scheduler
from phasewise.serving.speculative import Speculation, SpeculativeReplica
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision

# An upper bound on the state a run holds, from tracemalloc peaks of runs and their metrics
# (benchmarks/bench_simulate.py): a step record is 8 doubles and a decode step's end time
# one more (72 B), the metrics keep about 3 doubles per output token, and a request's own
# state is under 1 KB. At light load a step serves one token, the worst case: 2,000
# requests of 256 tokens one at a time peak at 35 MiB, under the 68 MB this bound gives.
HELD_BYTES_PER_REQUEST = 1_000
HELD_BYTES_PER_OUTPUT_TOKEN = 130
DEFAULT_MEMORY_BUDGET_BYTES = 4 * 2**30
PROGRESS_EVERY_EVENTS = 4096


@dataclass(frozen=True, slots=True)
class Pool:
    """Identical replicas: the device, the parallelism inside one replica, how many."""

    hardware: str | HardwareSpec = "h100-sxm"
    parallelism: Parallelism = Parallelism()
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class Server:
    """What serves the requests. ``pool`` holds the colocated replicas, or the prefill
    pool when the scheduler is disaggregated (``decode_pool`` defaults to a copy of it)."""

    model: str | ModelSpec = "llama-3.1-8b"
    pool: Pool = Pool()
    decode_pool: Pool | None = None
    precision: Precision = Precision()
    scheduler: str = "continuous"
    max_seqs: int = DEFAULT_MAX_SEQS
    # disaggregated: sequences a prefill replica holds at once (None: ``max_seqs``); the
    # pools of a disaggregated deployment are launched with their own batch limits
    prefill_max_seqs: int | None = None
    max_batched_tokens: int | None = None  # None: the scheduler's default
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    load_balancer: str = "least-outstanding"
    kv_link: str = "infiniband-ndr-400"
    cost: str | CostModel = DEFAULT_COST_MODEL
    speculation: Speculation | None = None  # on the replicas that decode
    engine: str | None = None  # the calibrated model's engine profile (None: the preset's)
    calibration: str | None = None  # a calibration profile file (None: the bundled one)
    preset: EngineSettings | None = None  # graph padding, host time, memory share
    fast_forward: bool = True  # steady decode runs as one event (the same results)
    # step prices kept across runs of the same model, device, formats and engine (keyed
    # by pool role, parallelism and device inside): a sweep or a validation replay prices
    # each shape once; None keeps them per run
    price_cache: dict | None = field(default=None, compare=False, hash=False)


@dataclass
class Simulation:
    """A finished run: the requests as served, every replica's steps, the KV transfers."""

    server: Server
    model: ModelSpec
    requests: list[Seq]
    replicas: list[Replica]
    transfers: list[tuple[float, float, int, int, int]]
    capacities: dict[str, KVCapacity]
    cost_model: str
    closed_loop: ClosedLoop | None
    devices: int
    priced_shapes: int
    events: int
    bucket_tokens: int
    notes: list[str] = field(default_factory=list)
    warmup: int = 0  # requests (the first ids) left out of the figures
    frontend_s: float = 0.0  # the API server's time per request, in TTFT and E2E (HostTime)

    @property
    def steps(self) -> int:
        return sum(r.step_count for r in self.replicas)


def simulate(server: Server, requests: Requests, *, closed_loop: ClosedLoop | None = None,
             bucket_tokens: int = DEFAULT_BUCKET_TOKENS,
             memory_budget_bytes: float = DEFAULT_MEMORY_BUDGET_BYTES,
             progress: Callable[[int, int], None] | None = None,
             warmup: int = 0) -> Simulation:
    """Serve ``requests`` (an open loop when they carry arrival times, else ``closed_loop``)
    and return what happened; the first ``warmup`` requests are served but left out of
    the figures. Deterministic: the same inputs give the same run."""
    check_held_memory(requests, memory_budget_bytes)
    if server.preset is not None and not server.preset.prefix_caching:
        requests = Requests(requests.input_tokens, requests.output_tokens, requests.arrival_s)
    if requests.arrival_s is None and closed_loop is None:
        raise InputError("the requests have no arrival times; give a rate, a trace or a number "
                         "of concurrent clients.")
    model = load_model(server.model) if isinstance(server.model, str) else server.model
    how = scheduler(server.scheduler)
    load_balancer(server.load_balancer)  # a clear error before anything is built
    longest = int(np.max(requests.input_tokens + requests.output_tokens)) - 1
    budget = server.max_batched_tokens or how.default_budget(longest)
    if server.preset is not None and not how.chunked:
        budget = max(budget, longest)  # the engines size a whole-prompt step to the longest
    limits = Limits(server.max_seqs, budget)
    _check_limits(limits, longest, how.chunked, server.max_batched_tokens is not None)
    if warmup < 0 or warmup >= len(requests):
        raise InputError(f"--warmup {warmup}: give fewer warm-up requests than the "
                         f"{len(requests)} sent.")
    notes = server.speculation.warnings(model, server.pool.parallelism) \
        if server.speculation else []
    cluster = Cluster([], [], server.load_balancer)
    capacities = {}
    pools = {"both": server.pool} if not how.disaggregated else \
        {"prefill": server.pool, "decode": server.decode_pool or server.pool}
    for role, pool in pools.items():
        mine = limits if role != "prefill" or server.prefill_max_seqs is None else \
            Limits(server.prefill_max_seqs, budget)
        mine = _batch_waiting(mine, server, pool, how)
        if mine is not limits:
            _check_limits(mine, longest, how.chunked, server.max_batched_tokens is not None)
        members, capacities[role] = _replicas(server, model, role, pool, how.policy, mine,
                                              cluster, requests, bucket_tokens)
        (cluster.decode_pool if role == "decode" else cluster.front).extend(members)
    if how.disaggregated:
        cluster.link = load_link(server.kv_link)
        cluster.kv_bytes_per_token = kv_cache_bytes_per_device(
            model, server.precision, Parallelism(), sequences=1, context_tokens=1)
    frontend_s = server.preset.host.request_s if server.preset is not None else 0.0
    engine_loop = closed_loop
    if closed_loop is not None and frontend_s:
        # a client's next request reaches the engine after the API server has handled it
        engine_loop = replace(closed_loop, think_time_s=closed_loop.think_time_s + frontend_s)
    events = _run(cluster, requests, engine_loop, progress)
    replicas = cluster.replicas
    return Simulation(server, model, sorted(cluster.finished, key=lambda s: s.id), replicas,
                      cluster.transfers, capacities, replicas[0].pricer.cost.name, closed_loop,
                      sum(r.devices for r in replicas),
                      sum({id(r.pricer): r.pricer.shapes for r in replicas}.values()), events,
                      bucket_tokens, notes, warmup, frontend_s)


def _batch_waiting(limits: Limits, server: Server, pool: Pool,
                   how: Scheduler) -> Limits:
    """The preset's batch waiting on a pool that runs it: TensorRT-LLM's mixed scheduler
    without attention DP (py_executor.py _schedule skips it under attention DP); the token
    threshold is the ratio of the engine's max_num_tokens as launched (the server's budget
    before it is widened to the longest request)."""
    preset = server.preset
    if preset is None or not preset.batch_waits or how.policy is not MixedWhole or \
            pool.parallelism.attention_dp > 1:
        return limits
    engine_tokens = server.max_batched_tokens or preset.max_num_batched_tokens or \
        limits.max_batched_tokens
    return replace(limits, batch_wait_iters=preset.batch_wait_iters,
                   batch_wait_tokens=math.ceil(preset.batch_wait_tokens_ratio * engine_tokens))


def _replicas(server: Server, model: ModelSpec, role: str, pool: Pool, policy: Callable,
              limits: Limits, cluster: Cluster, requests: Requests,
              bucket_tokens: int) -> tuple[list[Replica], KVCapacity]:
    """One pool's replicas: their device, step pricer and KV capacity (with the draft's
    share when they decode speculatively)."""
    if pool.replicas < 1:
        raise InputError(f"a pool needs at least one replica, got {pool.replicas}.")
    device = load_hardware(pool.hardware) if isinstance(pool.hardware, str) else pool.hardware
    preset = server.preset
    cost_engine = server.engine or (preset.cost_engine if preset else None)
    cost = (cost_model_for(server.cost, device, engine=cost_engine,
                           calibration=server.calibration)
            if isinstance(server.cost, str) else server.cost)
    if preset is not None and preset.host.kernel_s is not None and \
            hasattr(cost, "with_kernel_overhead"):
        # a served step's kernels cost the preset's fitted time per kernel (HostTime.kernel_s)
        cost = cost.with_kernel_overhead(preset.host.kernel_s)
    if preset is not None and hasattr(cost, "with_link_efficiency") and \
            (efficiency := measured_link_efficiency(device)) is not None:
        # the engine's collectives at the link's measured bus bandwidth (cost.base)
        cost = cost.with_link_efficiency(efficiency)
    spec = server.speculation if role != "prefill" else None
    draft = extra = None
    if spec is not None:
        draft_model, draft_par, _ = spec.drafter(model, pool.parallelism)
        draft = (draft_model, draft_par, spec.tokens)
        extra = spec.memory(model, server.precision, pool.parallelism)
    shared = None if server.price_cache is None else server.price_cache.setdefault(
        (role, pool.parallelism, device.name, bucket_tokens), {})
    pricer = StepPricer(model, device, server.precision, pool.parallelism, cost,
                        bucket_tokens=bucket_tokens, draft=draft, cache=shared,
                        padded_batch=preset.padded_batch if preset else None,
                        host=preset.host if preset else None,
                        fusion=preset.allreduce_norm_fusion if preset else None)
    capacity = kv_capacity(model, device, server.precision, pool.parallelism,
                           block_tokens=server.block_tokens,
                           max_batched_tokens=limits.max_batched_tokens,
                           max_seqs=limits.max_seqs, draft=extra,
                           memory_fraction=preset.memory_fraction if preset else None,
                           of_free=preset.memory_fraction_of_free if preset else False)
    _check_fits(requests, capacity, role, device.display_name)
    first = len(cluster.replicas)
    args = (role, policy(), pricer, capacity, limits, cluster)
    if spec is None:
        members = [Replica(first + i, role, policy(), pricer, capacity, limits, cluster)
                   for i in range(pool.replicas)]
        for member in members:
            member.fast_forward = server.fast_forward
        return members, capacity
    return [SpeculativeReplica(first + i, *args, tokens_per_round=spec.tokens_per_round)
            for i in range(pool.replicas)], capacity


def _run(cluster: Cluster, requests: Requests, closed_loop: ClosedLoop | None,
         progress: Callable[[int, int], None] | None) -> int:
    """Run the event loop to the end; returns the events handled."""
    source = Source(cluster, requests, closed_loop)
    loop = EventLoop()
    for event in source.first_events():
        loop.push(event)
    report = None if progress is None else (lambda: progress(len(cluster.finished), len(requests)))
    loop.run(every=PROGRESS_EVERY_EVENTS, on_progress=report)
    if report:
        report()
    if len(cluster.finished) != len(requests):
        raise RuntimeError(f"{len(requests) - len(cluster.finished)} requests never finished")
    return loop.handled


def check_held_memory(requests: Requests, budget_bytes: float) -> None:
    """Refuse, before starting, a run whose state would not fit the memory budget."""
    n = len(requests)
    if n == 0:
        raise InputError("no requests to simulate; give --num-requests of at least 1.")
    held = n * HELD_BYTES_PER_REQUEST + int(requests.output_tokens.sum()) * HELD_BYTES_PER_OUTPUT_TOKEN
    if held > budget_bytes:
        raise InputError(f"{n:,} requests with {int(requests.output_tokens.sum()):,} output tokens "
                         f"would hold about {held / 2**30:.1f} GiB of simulator state, over the "
                         f"{budget_bytes / 2**30:.1f} GiB budget; lower --num-requests or raise "
                         "--memory-budget.")


def _check_limits(limits: Limits, longest: int, chunked: bool, user_budget: bool) -> None:
    if limits.max_seqs < 1:
        raise InputError(f"--max-num-seqs {limits.max_seqs}: give at least 1.")
    if chunked and limits.max_batched_tokens < limits.max_seqs:
        raise InputError(f"--max-num-batched-tokens {limits.max_batched_tokens} is below "
                         f"--max-num-seqs {limits.max_seqs}: chunked prefill gives every running "
                         "decode a token of the budget; raise the budget or lower the sequences.")
    if not chunked and limits.max_batched_tokens < longest:
        raise InputError(f"--max-num-batched-tokens {limits.max_batched_tokens} is below the "
                         f"longest request ({longest:,} tokens of prompt and answer, which a "
                         "recomputation prefills whole); raise it to at least that or use "
                         "--scheduler chunked.")


def _check_fits(requests: Requests, capacity: KVCapacity, role: str, device: str) -> None:
    usable = capacity.blocks - capacity.watermark_blocks
    need = (requests.input_tokens + requests.output_tokens - 1 + capacity.block_tokens - 1) \
        // capacity.block_tokens
    worst = int(np.argmax(need))
    if need[worst] > usable:
        where = "" if role == "both" else f" ({role} pool)"
        raise InputError(
            f"request {worst} needs {int(need[worst]) * capacity.block_tokens:,} tokens of KV "
            f"cache but a replica{where} on {device} holds {usable * capacity.block_tokens:,}; "
            "raise --tp, shorten the requests or lower --kv-dtype.")
