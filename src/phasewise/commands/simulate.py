"""`phasewise simulate`: a discrete-event simulation of a server under a request stream."""

from __future__ import annotations

import itertools
import re
import sys
from typing import Any

import typer

from phasewise.commands._app import (
    MAX_COUNT,
    MAX_DEVICES,
    act_dtype_option,
    app,
    calibration_option,
    check_format,
    checked,
    console,
    echo,
    given,
    ints,
    kv_dtype_option,
    refuse_unused,
    split_list,
    task_option,
    weight_dtype_option,
)
from phasewise.commands._loads import (
    ClosedLoad,
    Load,
    StreamSpec,
    TraceLoad,
    loads_from_flags,
)
from phasewise.commands._whatif import MAX_SPEC_TOKENS
from phasewise.commands.options import (
    engine_option,
    isl_option,
    one_tp,
    osl_option,
    tp_option,
)
from phasewise.errors import InputError

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
# Flag ranges past which no server is described: replicas behind one balancer, a KV page,
# the gap variability of an arrival process, the simulator state a run may hold.
MAX_REPLICAS = 10_000
MAX_BLOCK_TOKENS = 1_000_000
MAX_CV = 100.0
MAX_MEMORY_BUDGET_GIB = 1024.0
# A duration flag (SLOs, think time) past a day is a unit error.
MAX_DURATION_S = 86_400.0
# Each numeric flag's range, checked before anything runs (click's int and float types
# let NaN, infinity and 1e300 through).
FLAG_RANGES: dict[str, tuple[str, dict[str, Any]]] = {
    "pp": ("--pp", dict(kind=int, maximum=MAX_DEVICES)),
    "ep": ("--ep", dict(kind=int, maximum=MAX_DEVICES)),
    "replicas": ("--replicas", dict(kind=int, maximum=MAX_REPLICAS)),
    "max_num_seqs": ("--max-num-seqs", dict(kind=int, maximum=MAX_COUNT)),
    "max_num_batched_tokens": ("--max-num-batched-tokens", dict(kind=int, maximum=MAX_COUNT)),
    "batch_wait_iters": ("--batch-wait-iters", dict(kind=int, maximum=MAX_COUNT)),
    "batch_wait_ratio": ("--batch-wait-ratio", dict(above=0.0, maximum=1.0)),
    "block_size": ("--block-size", dict(kind=int, maximum=MAX_BLOCK_TOKENS)),
    "prefill_replicas": ("--prefill-replicas", dict(kind=int, maximum=MAX_REPLICAS)),
    "decode_replicas": ("--decode-replicas", dict(kind=int, maximum=MAX_REPLICAS)),
    "prefill_tp": ("--prefill-tp", dict(kind=int, maximum=MAX_DEVICES)),
    "decode_tp": ("--decode-tp", dict(kind=int, maximum=MAX_DEVICES)),
    "draft_head": ("--draft-head", dict(above=0.0, maximum=1.0)),
    "spec_tokens": ("--spec-tokens", dict(kind=int, maximum=MAX_SPEC_TOKENS)),
    "spec_accept": ("--spec-accept", dict(minimum=0.0, below=1.0)),
    "num_requests": ("--num-requests", dict(kind=int, maximum=MAX_COUNT)),
    "cv": ("--cv", dict(above=0.0, maximum=MAX_CV)),
    "prefix_hit_rate": ("--prefix-hit-rate", dict(minimum=0.0, below=1.0)),
    "seed": ("--seed", dict(kind=int, minimum=0, maximum=2**63 - 1)),
    "slo_percentile": ("--slo-percentile", dict(above=0.0, maximum=100.0)),
    "bucket_tokens": ("--bucket-tokens", dict(kind=int, maximum=MAX_BLOCK_TOKENS)),
    "memory_budget": ("--memory-budget", dict(above=0.0, maximum=MAX_MEMORY_BUDGET_GIB)),
}

def _preset_help() -> str:
    from phasewise.serving.presets import engine_names

    return (f"; a serving preset ({', '.join(engine_names())}, a version after '@': vllm@0.19) "
            "also sets its scheduler, budget, sequences, CUDA graphs, memory share, overlap "
            "and fitted host time")


_PRESET_HELP = _preset_help()
# Runs this long (in requests) show a progress bar on a terminal.
PROGRESS_MIN_REQUESTS = 2000
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(us|µs|ms|s)?\s*$", re.IGNORECASE)
_UNIT_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, None: 1e-3}


@app.command()
def simulate(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Catalog name, config.json "
                              "path or folder, or a Hugging Face repo id in the local cache."),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-H", help="Catalog device or "
                                 "TOML sheet (the prefill pool's when disaggregated)."),
    tp: str = tp_option(purpose="Tensor-parallel degree inside a replica"),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree inside a replica."),
    ep: int | None = typer.Option(None, "--ep", help="Expert-parallel degree inside a "
                                     "replica (MoE); above --tp, attention runs data-parallel "
                                     "over ep / tp groups (DP attention + EP)."),
    attention_dp: int = typer.Option(1, "--attention-dp", help="Attention data-parallel ranks "
                                     "of --tp devices each; the experts spread over all of "
                                     "them (--ep defaults to tp × this; a smaller --ep splits "
                                     "each expert tp × this / ep ways: MoE TP under DP "
                                     "attention)."),
    replicas: int = typer.Option(1, "--replicas", help="Replicas behind the load balancer."),
    weight_dtype: str = weight_dtype_option(),
    act_dtype: str = act_dtype_option(),
    kv_dtype: str = kv_dtype_option(),
    cost: str | None = typer.Option(None, "--cost", help="Cost model pricing each step."),
    engine: str | None = engine_option(more=_PRESET_HELP),
    calibration: str | None = calibration_option(),
    scheduler: str | None = typer.Option(None, "--scheduler", help="static, continuous, "
                                            "chunked, prefill-first, mixed or disaggregated "
                                            "(default: the engine's, else continuous); a comma "
                                            "list sweeps."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Sequences in "
                                               "flight per replica (default: the engine's, "
                                               "else 256)."),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Tokens computed per step (default: the "
        "engine's, else 8192; whole-prompt schedulers: at least the longest request)."),
    cuda_graph_sizes: str | None = typer.Option(None, "--cuda-graph-sizes", help="Captured "
                                                   "decode batch sizes a batch is padded to "
                                                   "(comma list, or none)."),
    memory_fraction: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                    help="Share of device memory for weights "
                                                    "and KV cache (vLLM's flag)."),
    host_overhead: str | None = typer.Option(None, "--host-overhead", help="Engine host "
                                                "time per step, BASE[,PER_SEQ] (e.g. 4ms,"
                                                "0.02ms); default: the engine's fit."),
    overlap: bool | None = typer.Option(None, "--overlap/--no-overlap", help="Host work "
                                           "overlaps the device's (SGLang, TensorRT-LLM)."),
    prefix_caching: bool | None = typer.Option(None, "--prefix-caching/--no-prefix-caching",
                                                  help="Reuse cached prompt prefixes."),
    batch_wait_iters: int | None = typer.Option(None, "--batch-wait-iters", help="TensorRT-LLM "
                                                   "batch waiting (batch_wait_timeout_iters): "
                                                   "while sequences decode, new prompts wait up "
                                                   "to this many steps for a batch; with "
                                                   "--batch-wait-ratio."),
    batch_wait_ratio: float | None = typer.Option(None, "--batch-wait-ratio", help="TensorRT-"
                                                     "LLM batch_wait_max_tokens_ratio: the "
                                                     "share of the step token budget that ends "
                                                     "the wait early; with --batch-wait-iters."),
    block_size: int = typer.Option(16, "--block-size", help="KV-cache page size in tokens."),
    load_balancer: str = typer.Option("least-outstanding", "--load-balancer",
                                      help="round-robin or least-outstanding."),
    prefill_replicas: int | None = typer.Option(None, "--prefill-replicas",
                                                   help="Disaggregated: prefill instances."),
    decode_replicas: int | None = typer.Option(None, "--decode-replicas",
                                                  help="Disaggregated: decode instances."),
    decode_hardware: str | None = typer.Option(None, "--decode-hardware",
                                                  help="Disaggregated: the decode pool's device."),
    prefill_tp: int | None = typer.Option(None, "--prefill-tp", help="Disaggregated: TP of "
                                             "a prefill instance (default --tp)."),
    decode_tp: int | None = typer.Option(None, "--decode-tp", help="Disaggregated: TP of a "
                                            "decode instance (default --tp)."),
    prefill_ep: int | None = typer.Option(None, "--prefill-ep", help="Disaggregated: EP of "
                                             "a prefill instance (default --ep)."),
    decode_ep: int | None = typer.Option(None, "--decode-ep", help="Disaggregated: EP of a "
                                            "decode instance (default --ep; above its TP: DP "
                                            "attention)."),
    kv_link: str = typer.Option("infiniband-ndr-400", "--kv-link",
                                help="Link KV moves over, prefill to decode (catalog links)."),
    draft: str | None = typer.Option(None, "--draft", help="Speculative decoding with this "
                                        "draft model (catalog name or config)."),
    draft_head: float | None = typer.Option(None, "--draft-head", help="Speculative "
                                               "decoding with a head costing this fraction of "
                                               "the target's layers (EAGLE/MTP style)."),
    spec_tokens: int = typer.Option(4, "--spec-tokens", help="Draft tokens per round (γ)."),
    spec_accept: float | None = typer.Option(None, "--spec-accept", help="Per-token "
                                                "acceptance of the draft (α; default: the "
                                                "published figure for the draft and --task)."),
    task: str = task_option(),
    num_requests: int = typer.Option(1000, "--num-requests", "-n", help="Requests to send."),
    request_rate: str | None = typer.Option(None, "--rate", help="Open loop: requests per "
                                               "second; a comma list sweeps."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson, gamma or constant."),
    cv: float = typer.Option(1.0, "--cv", help="Gamma arrivals: coefficient of variation of the gaps."),
    clients: str | None = typer.Option(None, "--clients", help="Closed loop: concurrent "
                                          "clients; a comma list sweeps."),
    think_time: str = typer.Option("0", "--think-time", help="Closed loop: pause between a "
                                   "client's answer and its next request (e.g. 500ms)."),
    ramp_up: str = typer.Option("0", "--ramp-up", help="Closed loop: clients start evenly "
                                "over this time instead of all at once (e.g. 2s)."),
    warmup: int = typer.Option(0, "--warmup", help="Requests served first and left out of "
                               "the figures (a benchmark's warm-up)."),
    range_ratio: float = typer.Option(1.0, "--random-range-ratio", help="Lengths uniform in "
                                      "[ratio × L, L] as vLLM's benchmark_serving draws them "
                                      "(1: fixed)."),
    percentiles: str = typer.Option("50,90,99", "--percentiles", help="Latency percentiles "
                                    "to report (comma list)."),
    detail: bool = typer.Option(False, "--detail", help="Show the engine settings and host "
                                "time per step."),
    isl: str = isl_option("distribution"),
    osl: str = osl_option("distribution"),
    trace: str | None = typer.Option(None, "--trace", help="Replay a CSV/JSONL trace "
                                        "(arrival_s, input_tokens, output_tokens)."),
    prefix_hit_rate: float = typer.Option(0.0, "--prefix-hit-rate", help="Share of each prompt "
                                          "the prefix cache already holds."),
    seed: int = typer.Option(0, "--seed", help="Seed of the request stream."),
    ttft: str | None = typer.Option(None, "--ttft", help="TTFT SLO (200ms, 1.5s; a bare "
                                       "number is milliseconds)."),
    tpot: str | None = typer.Option(None, "--tpot", help="TPOT SLO, as --ttft."),
    slo_percentile: float = typer.Option(90.0, "--slo-percentile",
                                         help="Share of requests (%) that must meet the SLOs."),
    bucket_tokens: int = typer.Option(16, "--bucket-tokens", help="Contexts are rounded to this "
                                      "many tokens when steps are priced (1: exact)."),
    memory_budget: float = typer.Option(4.0, "--memory-budget", help="GiB of simulator state "
                                        "a run may hold."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json, csv or md."),
    requests_out: str | None = typer.Option(None, "--requests-out",
                                               help="Write one JSON line per request."),
    trace_out: str | None = typer.Option(None, "--trace-out",
                                            help="Write a Chrome/Perfetto trace of the steps."),
    plot: str | None = typer.Option(None, "--plot", help="Write PNG and HTML plots here."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="A progress bar on long runs (terminal only)."),
) -> None:
    """Simulate serving a request stream: queueing, batching, KV memory, tail latency."""
    from phasewise.serving import ClosedLoop, Slo
    from phasewise.serving.schedulers import DEFAULT_MAX_SEQS
    from phasewise.serving.speculative import Speculation
    from phasewise.specs import Precision

    _check_flags(locals())
    check_format(fmt)
    quantiles = _percentiles(percentiles)
    speculation = None
    if draft is not None or draft_head is not None:
        from phasewise.catalog.speculative import resolve_acceptance

        acceptance = resolve_acceptance(spec_accept, "head" if draft is None else "model", task)
        speculation = Speculation(spec_tokens, acceptance.alpha, draft, draft_head,
                                  source=f"{acceptance.task}: {acceptance.source}")
        speculation.tokens_per_round  # noqa: B018 - checks γ and α before anything runs
    par = _parallelism(one_tp(tp), pp, ep, attention_dp)
    preset = _preset(engine, hardware, par, cuda_graph_sizes, memory_fraction, host_overhead,
                     overlap, prefix_caching)
    preset = _batch_wait(preset, batch_wait_iters, batch_wait_ratio,
                         scheduler or (preset.scheduler if preset else "continuous"))
    server_args = dict(
        model=model, precision=Precision(weight_dtype, act_dtype, kv_dtype),
        max_seqs=max_num_seqs or (preset.max_num_seqs if preset else DEFAULT_MAX_SEQS),
        max_batched_tokens=max_num_batched_tokens or (
            preset.max_num_batched_tokens or None if preset else None),
        block_tokens=block_size, load_balancer=load_balancer, kv_link=kv_link,
        speculation=speculation, engine=None if preset else engine, calibration=calibration,
        preset=preset, price_cache={})  # the runs of a sweep price each step shape once
    pools = _pools(hardware, decode_hardware, par, prefill_tp, decode_tp, prefill_ep, decode_ep,
                   replicas, prefill_replicas, decode_replicas)
    loads = loads_from_flags(request_rate, clients, trace,
                             _duration_s(think_time, "--think-time"),
                             _duration_s(ramp_up, "--ramp-up") or 0.0)
    slo = None
    if ttft is not None or tpot is not None:
        if not 0 < slo_percentile <= 100:
            raise InputError(f"--slo-percentile {slo_percentile}: give a share in (0, 100].")
        slo = Slo(_duration_s(ttft, "--ttft"), _duration_s(tpot, "--tpot"), slo_percentile)
    schedulers = scheduler or (preset.scheduler if preset else "continuous")
    runs = list(itertools.product(split_list(schedulers, "--scheduler", str), loads))
    single = len(runs) == 1
    if not single and (requests_out or trace_out):
        raise InputError("--requests-out and --trace-out need a single run; give one "
                         "--scheduler and one --rate or --clients value.")
    stream = StreamSpec(num_requests, isl, osl, arrival, cv, seed, prefix_hit_rate, range_ratio,
                        warmup)
    results = []
    for name, load in runs:
        server = _server(name, pools, server_args, cost)
        requests, workload = _requests(load, stream)
        closed = ClosedLoop(load.clients, load.think_s, load.ramp_s) \
            if isinstance(load, ClosedLoad) else None
        results.append(_run(server, requests, closed, workload, slo, bucket_tokens,
                            memory_budget, progress and single, warmup, quantiles))
    _render(results, fmt, slo, requests_out, trace_out, plot, detail)


# ---------------------------------------------------------------- parsing


def _check_flags(flags: dict[str, Any]) -> None:
    """Every numeric flag in range, no flag that would do nothing, the output paths
    writable and the run's simulator state within its budget: all before any work."""
    from phasewise.files import check_output_dir, check_output_file
    from phasewise.serving import parse_lengths
    from phasewise.serving.schedulers import scheduler as scheduler_named
    from phasewise.serving.simulator import HELD_BYTES_PER_OUTPUT_TOKEN, HELD_BYTES_PER_REQUEST

    for name, (flag, bounds) in FLAG_RANGES.items():
        checked(flag, **bounds)(flags[name])
    names = [n.strip() for n in (flags["scheduler"] or "").split(",") if n.strip()]
    if not any(scheduler_named(n).disaggregated for n in names):
        refuse_unused(given("prefill_replicas", "decode_replicas", "decode_hardware",
                            "prefill_tp", "decode_tp", "kv_link"), "--scheduler disaggregated")
    if flags["draft"] is None and flags["draft_head"] is None:
        refuse_unused(given("spec_tokens", "spec_accept", "task"), "--draft or --draft-head")
    if flags["arrival"] != "gamma":
        refuse_unused(given("cv"), "--arrival gamma")
    if flags["clients"] is None:
        refuse_unused(given("think_time"), "--clients (a closed loop)")
    for flag, path in (("--requests-out", flags["requests_out"]),
                       ("--trace-out", flags["trace_out"])):
        if path:
            check_output_file(path, flag)
    if flags["plot"]:
        check_output_dir(flags["plot"], "--plot")
    if flags["trace"] is None:
        n = flags["num_requests"]
        mean_osl = parse_lengths(flags["osl"], "--osl").mean
        parse_lengths(flags["isl"], "--isl")
        held = n * (HELD_BYTES_PER_REQUEST + mean_osl * HELD_BYTES_PER_OUTPUT_TOKEN)
        if held > flags["memory_budget"] * 2**30:
            raise InputError(f"--num-requests {n:,} of about {mean_osl:,.0f} output tokens "
                             f"would hold about {held / 2**30:,.1f} GiB of simulator state, "
                             f"over the {flags['memory_budget']:g} GiB budget; lower "
                             "--num-requests or raise --memory-budget.")


def _duration_s(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    match = _DURATION.match(str(text))
    if not match:
        raise InputError(f"{flag} {text}: give a duration such as 200ms, 1.5s or 500 "
                         "(milliseconds).")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2).lower() if match.group(2) else None]
    if not seconds <= MAX_DURATION_S:
        raise InputError(f"{flag} {text}: give a duration of at most a day, such as 200ms.")
    return seconds


def _percentiles(text: str) -> tuple[float, ...]:
    values = split_list(text, "--percentiles", float)
    if not values or any(not 0 < v <= 100 for v in values):
        raise InputError(f"--percentiles {text}: give percentiles in (0, 100], e.g. 50,90,99.")
    return tuple(values)


def _parallelism(tp: int, pp: int, ep: int | None, attention_dp: int) -> Any:
    from phasewise.specs import Parallelism

    if attention_dp < 1:
        raise InputError(f"--attention-dp {attention_dp}: give at least 1.")
    group = tp * attention_dp
    if attention_dp > 1 and ep is not None and ep != group:
        if ep > group or group % ep:
            raise InputError(f"--attention-dp {attention_dp} with --tp {tp} spreads the "
                             f"experts over {group} devices; give an --ep that divides {group}.")
        return Parallelism(tp, pp, ep, attention_dp)  # MoE TP group / ep under DP attention
    return Parallelism(tp, pp, ep or group if attention_dp > 1 else ep or 1)


def _preset(engine: str | None, hardware: str, par: Any, graph_sizes: str | None,
            memory_fraction: float | None, host_overhead: str | None, overlap: bool | None,
            prefix_caching: bool | None) -> Any:
    """The engine preset for the front pool's device and layout, with the user's flags."""
    import dataclasses

    from phasewise.catalog import load_hardware
    from phasewise.serving.presets import engine_settings, is_preset

    if not is_preset(engine):
        if any(v is not None for v in (graph_sizes, memory_fraction, host_overhead, overlap,
                                       prefix_caching)):
            raise InputError("--cuda-graph-sizes, --gpu-memory-utilization, --host-overhead, "
                             "--overlap and --prefix-caching adjust an engine preset; give "
                             "--engine vllm, sglang, trtllm or llama.cpp.")
        return None
    preset = engine_settings(engine, load_hardware(hardware), tp=par.tp, ranks=par.devices)
    changes: dict[str, Any] = {}
    if graph_sizes is not None:
        changes["cuda_graph_sizes"] = () if graph_sizes.strip().lower() == "none" else \
            tuple(sorted(_positive(ints(graph_sizes, "--cuda-graph-sizes"),
                                   "--cuda-graph-sizes")))
    if memory_fraction is not None:
        if not 0 < memory_fraction <= 1:
            raise InputError(f"--gpu-memory-utilization {memory_fraction}: give a share in (0, 1].")
        changes["memory_fraction"] = memory_fraction
    host = preset.host
    if host_overhead is not None:
        base, _, per_seq = host_overhead.partition(",")
        host = dataclasses.replace(host, base_s=_duration_s(base, "--host-overhead"),
                                   per_seq_s=_duration_s(per_seq or "0", "--host-overhead"),
                                   source="--host-overhead")
    if overlap is not None:
        host = dataclasses.replace(host, overlap=overlap)
    if prefix_caching is not None:
        changes["prefix_caching"] = prefix_caching
    return dataclasses.replace(preset, host=host, **changes)


def _batch_wait(preset: Any, iters: int | None, ratio: float | None,  # noqa: ANN401
                schedulers: str) -> Any:  # noqa: ANN401
    """The preset with TensorRT-LLM's batch waiting set from the flags: both or neither,
    since the engine waits only with both (py_executor.py _waiting_requests), and only
    where the mixed scheduler (TensorRT-LLM's in-flight batching) runs."""
    import dataclasses

    if iters is None and ratio is None:
        return preset
    if iters is None or ratio is None:
        raise InputError("give both --batch-wait-iters and --batch-wait-ratio: TensorRT-LLM "
                         "waits for a batch only with both set (e.g. 20 and 0.9).")
    if preset is None or "mixed" not in [n.strip() for n in schedulers.split(",")]:
        raise InputError("--batch-wait-iters and --batch-wait-ratio are TensorRT-LLM's batch "
                         "waiting; give --engine trtllm (its mixed scheduler).")
    return dataclasses.replace(preset, batch_wait_iters=iters, batch_wait_tokens_ratio=ratio)


def _pools(hardware: str, decode_hardware: str | None, par: Any, prefill_tp: int | None,
           decode_tp: int | None, prefill_ep: int | None, decode_ep: int | None, replicas: int,
           prefill_replicas: int | None, decode_replicas: int | None) -> dict:
    from phasewise.serving import Pool
    from phasewise.specs import Parallelism

    front_par = Parallelism(prefill_tp or par.tp, par.pp, prefill_ep or par.ep) \
        if prefill_tp or prefill_ep else par
    back_par = Parallelism(decode_tp or par.tp, par.pp, decode_ep or par.ep) \
        if decode_tp or decode_ep else par
    return {"colocated": Pool(hardware, par, replicas),
            "prefill": Pool(hardware, front_par, prefill_replicas or replicas),
            "decode": Pool(decode_hardware or hardware, back_par, decode_replicas or replicas)}


def _positive(values: list, flag: str) -> list:
    for v in values:
        if not v > 0:
            raise InputError(f"{flag} {v}: give positive values.")
    return values


def _server(name: str, pools: dict, server_args: dict, cost: str | None) -> Any:
    from phasewise.cost.registry import DEFAULT_COST_MODEL
    from phasewise.serving import Server
    from phasewise.serving.schedulers import scheduler

    disaggregated = scheduler(name).disaggregated
    return Server(pool=pools["prefill" if disaggregated else "colocated"],
                  decode_pool=pools["decode"] if disaggregated else None, scheduler=name,
                  cost=cost or DEFAULT_COST_MODEL, **server_args)


def _requests(load: Load, stream: StreamSpec) -> tuple[Any, dict]:
    """The requests ``load`` sends, and the workload the document records for them."""
    import numpy as np

    from phasewise.serving import load_trace, parse_lengths, synthetic
    from phasewise.serving.requests import open_loop, range_lengths

    if isinstance(load, TraceLoad):
        requests = load_trace(load.path)
        return requests, {"trace": load.path, "num_requests": len(requests)}
    n, rng = stream.num_requests, np.random.default_rng(stream.seed)
    input_lengths = range_lengths(parse_lengths(stream.isl, "--isl"), stream.range_ratio)
    output_lengths = range_lengths(parse_lengths(stream.osl, "--osl"), stream.range_ratio)
    if isinstance(load, ClosedLoad):
        requests = synthetic(n, input_lengths, output_lengths, rng,
                             prefix_hit_rate=stream.prefix_hit_rate)
        return requests, {**stream.workload(), "clients": load.clients,
                          "think_time_s": load.think_s, "ramp_up_s": load.ramp_s}
    requests = open_loop(n, input_lengths, output_lengths, rng, kind=stream.arrival,
                         rate_per_s=load.rate_rps, cv=stream.cv,
                         prefix_hit_rate=stream.prefix_hit_rate)
    return requests, {**stream.workload(), "arrival": stream.arrival, "rate_rps": load.rate_rps,
                      "cv": stream.cv if stream.arrival == "gamma" else None}


# ---------------------------------------------------------------- running and rendering


def _run(server: Any, requests: Any, closed: Any, workload: dict, slo: Any, bucket_tokens: int,
         memory_budget_gib: float, show_progress: bool, warmup: int = 0,
         quantiles: tuple[float, ...] = (50, 90, 99)) -> tuple:
    from phasewise.serving import request_metrics, simulate, summarize

    kwargs = dict(closed_loop=closed, bucket_tokens=bucket_tokens,
                  memory_budget_bytes=memory_budget_gib * 2**30, warmup=warmup)
    if show_progress and sys.stderr.isatty() and len(requests) >= PROGRESS_MIN_REQUESTS:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"simulating {server.scheduler}", total=len(requests))
            sim = simulate(server, requests,
                           progress=lambda done, total: bar.update(task, completed=done), **kwargs)
    else:
        sim = simulate(server, requests, **kwargs)
    metrics = request_metrics(sim)
    return sim, metrics, summarize(sim, slo=slo, workload=workload, metrics=metrics,
                                   percentiles=quantiles)


def _render(results: list[tuple], fmt: str, slo: Any, requests_out: str | None,
            trace_out: str | None, plot: str | None, detail: bool = False) -> None:
    from phasewise.files import write_atomic
    from phasewise.report.output import rows_to_csv, rows_to_markdown, to_json
    from phasewise.report.serving_view import summary_table, sweep_row, sweep_table

    summaries = [s for _, _, s in results]
    if requests_out:
        import json

        rows = results[0][1].rows()
        write_atomic(requests_out, "".join(json.dumps(r) + "\n" for r in rows))
    if trace_out:
        import json

        from phasewise.report.serving_view import chrome_trace

        write_atomic(trace_out, json.dumps(chrome_trace(results[0][0]), separators=(",", ":")))
    if plot:
        _plots(results, plot)
    if fmt == "json":
        docs = [s.model_dump(mode="json") for s in summaries]
        echo(to_json(docs[0] if len(docs) == 1 else _sweep_document(docs, summaries, slo)))
    elif fmt == "csv":
        echo(rows_to_csv(sweep_row(s) for s in summaries))
    elif fmt == "md":
        echo(rows_to_markdown(sweep_row(s) for s in summaries))
    else:
        console().print(summary_table(summaries[0], detail=detail) if len(summaries) == 1
                        else sweep_table(summaries))
        if slo is not None and len(summaries) > 1:
            echo(_sweep_verdict(summaries, slo))


def _plots(results: list[tuple], folder: str) -> None:
    from pathlib import Path

    from phasewise.files import write_all
    from phasewise.report.serving_view import plot_latencies, plot_load, plot_sweep

    out = Path(folder)
    figures: dict = {}  # every figure's files, written as one set: all of them or none
    if len(results) == 1:
        sim, metrics, summary = results[0]
        name = f"{summary.inputs.model}, {summary.inputs.scheduler}"
        plot_latencies(metrics, out / "latency", f"Latency distributions: {name}", figures)
        plot_load(sim, out / "load", f"Queue, batch and KV cache over time: {name}", figures)
    else:
        summaries = [s for _, _, s in results]
        plot_sweep(summaries, out / "sweep", f"Latency and throughput against load: "
                                             f"{summaries[0].inputs.model}", figures)
    write_all(figures)


def _sweep_verdict(summaries: list[Any], slo: Any) -> str:
    """The highest load meeting the SLOs (DistServe's goodput), or why none does."""
    met = [s for s in summaries if s.slo.met]
    targets = ", ".join(t for t in (f"TTFT ≤ {slo.ttft_s * 1e3:g} ms" if slo.ttft_s else "",
                                    f"TPOT ≤ {slo.tpot_s * 1e3:g} ms" if slo.tpot_s else "") if t)
    if not met:
        best = max(summaries, key=lambda s: s.slo.attainment)
        reasons = sorted({r for s in summaries for r in s.slo.unreachable})
        why = f" ({'; '.join(reasons)})" if reasons else ""
        return (f"No configuration in the sweep meets {targets} for {slo.percentile:g}% of "
                f"requests{why}; the best reaches {100 * best.slo.attainment:.1f}% "
                f"({best.inputs.scheduler}, {_load_label(best)}).")
    best = max(met, key=lambda s: (s.requests_per_s, s.slo.goodput_rps))
    return (f"Highest load meeting {targets} for {slo.percentile:g}% of requests: "
            f"{best.inputs.scheduler} at {_load_label(best)} "
            f"({best.slo.goodput_rps:,.2f} good req/s).")


def _load_label(s: Any) -> str:
    w = s.inputs.workload
    return f"{w['rate_rps']:g} req/s" if w.get("rate_rps") else \
        f"{w['clients']} clients" if w.get("clients") else "the trace"


def _sweep_document(docs: list[dict], summaries: list[Any], slo: Any) -> dict:
    from phasewise.serving.types import SCHEMA_VERSION
    from phasewise.version import __version__

    document = {"schema_version": SCHEMA_VERSION, "tool_version": __version__, "runs": docs}
    if slo is not None:
        document["verdict"] = _sweep_verdict(summaries, slo)
    return document
