"""Serving rows: benchmark runs of a loaded server, replayed through the simulator.

A serving row (``catalog/measurements/serving_hopper.csv``, the layout its README
describes) is one run of vLLM, SGLang or TensorRT-LLM at a fixed concurrency: the engine
and version, the device, the model and formats, the layout (attention TP and DP, MoE TP and
EP, or the prefill and decode pools of a disaggregated server), the prompt and output
lengths, and the measured mean TTFT and TPOT. It is replayed as the benchmark drove the
server: a closed loop of ``concurrency`` clients all starting at once, ``PROMPTS_PER_CLIENT``
prompts each, fixed lengths, ``ignore_eos`` (every answer runs to its length), against the
engine's preset (``serving.presets``). It is scored on what it measured: mean TTFT, mean
TPOT, as ``error = simulated / measured − 1``.

Rows the simulator cannot describe (a model outside the catalog, a layout without a
ledger form, a model that does not fit) are skipped with the reason.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from phasewise.catalog.system_names import system_sheet
from phasewise.errors import InputError
from phasewise.validate.measurements import MEASUREMENTS_DIR, Problem
from phasewise.validate.scenario import MappingError

SERVING_FILE = MEASUREMENTS_DIR / "serving" / "serving_hopper.csv"
# vLLM's benchmark_serving as InferenceMAX and the engines' recipes run it: --num-prompts
# is ten times --max-concurrency (InferenceMAX benchmarks/*.sh: --num-prompts $((CONC * 10))).
PROMPTS_PER_CLIENT = 10
# A row's system (aiconfigurator's b200_sxm, gb200), model path and quantization labels
# resolve through the catalog: validate/serving_inputs.py.
# KV-cache format where the engine's own recipes for a model family set one: TensorRT-LLM
# runs DeepSeek-R1/V3 with an FP8 KV cache (examples/serve/deepseek_r1_reasoning_parser.sh,
# docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md: kv_cache_config
# dtype fp8). Elsewhere the checkpoint's own format ('auto').
KV_FORMATS = {("trtllm", "deepseek-ai/"): "fp8"}
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
# The benchmark client behind each source, by a pattern of its silicon_data_source, and
# the --random-range-ratio it ran with. InferenceMAX (its database dumps and the dated
# result files built from them) drives every engine with vLLM's benchmark_serving.py,
# `--random-range-ratio 0.8 --num-prompts $((CONC * 10)) --max-concurrency $CONC
# --ignore-eos` (InferenceMAX README, "Benchmark Client Configuration"), so prompt and
# answer lengths are uniform on [0.8·L, L]. A row's own random_range_ratio column wins.
# Lengths that differ break the lock-step waves a closed loop of equal requests forms, and
# the runs are not in lock-step: the measured mean TTFT of many is below the compute floor
# of prefilling a whole wave at once (Qwen3-32B, TP2 H100, 8 × 1024 tokens: 2·32.8e9·8192
# FLOP over 2 × 989 TFLOP/s = 0.27 s, against 0.15 s measured), 45% of the vLLM rows of
# fixed-length sources, 28% of the TensorRT-LLM ones, below half that floor. A source
# whose client is not documented (aiconfigurator's own gap-analysis runs) is given the same
# spread, DEFAULT_RANGE_RATIO: an assumption, the one documented client's figure, standing
# for whatever desynchronises its clients.
BENCHMARK_RANGE_RATIOS = ((re.compile(r"^db-dump/|source_file=20\d\d-\d\d-\d\d\.csv"), 0.8),)
DEFAULT_RANGE_RATIO = 0.8
# Engine settings a source's published launch script gives beyond the engine's defaults:
# (source pattern, engine, model, device, the script's branch as a test of the row, the
# settings: EngineSettings fields, and "kv_cache" for the KV format). InferenceMAX's
# TensorRT-LLM Llama-3.1-70B FP8 script on H200 (benchmarks/70b_fp8_h200_trt_slurm.sh)
# launches `trtllm-serve --max_num_tokens 16384` (one revision passes $MAX_MODEL_LEN
# instead; the rest below is in every revision) with kv_cache_config dtype fp8 and
# enable_block_reuse false, cuda_graph_config enable_padding true up to max_batch_size 1024
# (llm_args.py CudaGraphConfig._generate_cuda_graph_batch_sizes(1024, True): 1, 2, 4, the
# multiples of 8 to 128, then the powers of two below the maximum, 256 and 512; 1024, the
# maximum itself, is taken as captured too, which no row's batch reaches); for 1k/1k below
# TP 8 ("will improve the
# performance") it adds batch_wait_timeout_iters 20 and batch_wait_max_tokens_ratio 0.9: a
# new prompt waits up to 20 iterations for 14,746 prompt tokens to gather, which at these
# loads never come (serving.schedulers MixedWhole). Its TTFT beyond the simulated one was
# 19.5-21 decode steps on those rows, 2-5 on the script's other branches.
TRTLLM_PADDED_GRAPHS_1024 = (1, 2, 4, *range(8, 129, 8), 256, 512, 1024)
LAUNCH_SETTINGS = (
    (BENCHMARK_RANGE_RATIOS[0][0], "trtllm", "meta-llama/Llama-3.1-70B", "h200_sxm",
     lambda row: True,
     {"max_num_batched_tokens": 16384, "kv_cache": "fp8", "prefix_caching": False,
      "cuda_graph_sizes": TRTLLM_PADDED_GRAPHS_1024}),
    (BENCHMARK_RANGE_RATIOS[0][0], "trtllm", "meta-llama/Llama-3.1-70B", "h200_sxm",
     lambda row: row.isl == 1024 and row.osl == 1024 and row.pools[-1].tp < 8,
     {"batch_wait_iters": 20, "batch_wait_tokens_ratio": 0.9}),
)
# Step prices shared by the rows of one model, device, format, engine timing and fusion (a
# process's replays price each step shape once; see serving.Server.price_cache).
_PRICES: dict[tuple, dict] = {}


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool's layout: replicas, attention TP × DP, MoE TP × EP, and ``batch``, the
    sequences one attention rank holds. The sample counts a batch per attention-DP rank:
    on every disaggregated row that names its workers, decode batch × decode workers ×
    decode attention DP is the row's concurrency (576 = 64 × 9 × 1, 1152 = 16 × 9 × 8,
    3584 = 64 × 7 × 8), as on the aggregated DP rows (256 = 32 × 8)."""

    workers: int
    tp: int
    attention_dp: int
    moe_tp: int | None
    moe_ep: int | None
    batch: int | None

    @property
    def replica_seqs(self) -> int | None:
        """Sequences one replica (all its attention ranks) holds at once."""
        return self.batch * self.attention_dp if self.batch else None


@dataclass(frozen=True, slots=True)
class ServingRow:
    record_id: str
    source: str
    engine: str
    version: str
    model: str
    hardware: str
    gemm_quant: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    pools: tuple[Pool, ...]  # one (aggregated) or prefill then decode
    ttft_s: float
    tpot_s: float
    line: int
    # how the load was set: "concurrency" (a closed loop), "rate" (Poisson arrivals),
    # "mlperf_server" (Poisson at the target rate), "mlperf_offline" or "max_throughput"
    # (every request queued at once, the engine picks the batch)
    load: str = "concurrency"
    request_rate: float = 0.0
    output_tokens_per_s: float = float("nan")  # measured throughput, where the row has it
    moe_quant: str = ""  # moe_quant_mode ('' follows gemm_quant)
    kv_quant: str = ""  # kvcache_quant_mode, where the file has one ('' is the checkpoint's)
    # the benchmark's --random-range-ratio: lengths drawn uniform on [⌊r·L⌋, L] (1: fixed)
    range_ratio: float = 1.0

    @property
    def device(self) -> str:
        return system_sheet(self.hardware) or self.hardware


LOADS = ("concurrency", "rate", "mlperf_server", "mlperf_offline", "max_throughput")
# Requests a saturating run (Offline, max throughput) queues: enough for a steady batch.
SATURATION_REQUESTS = 1000


@dataclass(frozen=True, slots=True)
class ServingResult:
    row: ServingRow
    ttft_s: float
    tpot_s: float
    devices: int
    output_tokens_per_s: float = float("nan")

    def errors(self) -> dict[str, float]:
        """simulated / measured − 1 for every figure the row measured."""
        pairs = {"ttft": (self.ttft_s, self.row.ttft_s), "tpot": (self.tpot_s, self.row.tpot_s),
                 # a throughput is read as its time, as the single-stream rows are
                 "throughput": (self.row.output_tokens_per_s, self.output_tokens_per_s)}
        return {k: sim / meas - 1.0 for k, (sim, meas) in pairs.items()
                if np.isfinite(sim) and np.isfinite(meas) and meas > 0}

    @property
    def ttft_error(self) -> float:
        return self.ttft_s / self.row.ttft_s - 1.0

    @property
    def tpot_error(self) -> float:
        return self.tpot_s / self.row.tpot_s - 1.0


def _int(text: str, default: int | None = None) -> int | None:
    text = (text or "").strip()
    return int(float(text)) if text else default


def _pool(r: dict, prefix: str) -> Pool:
    moe_ep = _int(r[f"{prefix}moe_ep_size"])
    return Pool(workers=_int(r.get(f"{prefix}num_workers", ""), 1) or 1,
                tp=_int(r[f"{prefix}tp_size"], 1), attention_dp=_int(r[f"{prefix}attention_dp_size"], 1),
                moe_tp=_int(r[f"{prefix}moe_tp_size"]), moe_ep=moe_ep or None,
                batch=_int(r.get(f"{prefix}batch_size", "")))


def _ms(text: str | None) -> float:
    return float(text) / 1e3 if text not in (None, "") else float("nan")


def load_serving(path: str | Path = SERVING_FILE) -> tuple[list[ServingRow], list[Problem]]:
    """Every row of a serving file, and a Problem for each row that cannot be read."""
    rows, problems = [], []
    text = Path(path).read_text(encoding="utf-8-sig")
    for line, r in enumerate(csv.DictReader(text.splitlines()), start=2):
        try:
            disagg = r["mode"] == "disagg"
            found = _CONCURRENCY.search(r["silicon_data_source"])
            concurrency = int(found.group(1)) if found else _int(r["batch_size"])
            load = (r.get("load") or "concurrency").strip()
            if load not in LOADS:
                problems.append(Problem(line, r["id"], f"load '{load}' is not one of "
                                        f"{', '.join(LOADS)}"))
                continue
            rate = float(r.get("request_rate") or 0.0)
            if load in ("rate", "mlperf_server") and not rate > 0:
                problems.append(Problem(line, r["id"], f"a {load} row needs a request_rate"))
                continue
            if load != "concurrency":
                concurrency = concurrency or 0
            elif not concurrency:
                problems.append(Problem(line, r["id"], "the row records no concurrency (neither "
                                        "batch_size nor silicon_concurrency)"))
                continue
            pools = (_pool(r, "prefill_"), _pool(r, "decode_")) if disagg else \
                (_agg_pool(_pool(r, ""), concurrency),)
            rows.append(ServingRow(
                r["id"], r["silicon_data_source"], r["backend"], r["backend_version"],
                r["model_path"], r["system"], r["gemm_quant_mode"], r["mode"], int(r["isl"]),
                int(r["osl"]), concurrency, pools, _ms(r.get("silicon_ttft_ms")),
                _ms(r.get("silicon_tpot_ms")), line, load, rate,
                float(r.get("output_tokens_per_s") or "nan"),
                moe_quant=r.get("moe_quant_mode") or "",
                kv_quant=r.get("kvcache_quant_mode") or "", range_ratio=_range_ratio(r)))
        except (KeyError, TypeError, ValueError) as err:
            problems.append(Problem(line, r.get("id", ""), f"cannot read the row ({err})"))
    return _complete_layouts(rows), problems


def _range_ratio(r: dict) -> float:
    """The row's --random-range-ratio: its own column, else its source's benchmark client's
    (BENCHMARK_RANGE_RATIOS), else DEFAULT_RANGE_RATIO."""
    if (r.get("random_range_ratio") or "").strip():
        ratio = float(r["random_range_ratio"])
        if not 0 < ratio <= 1:
            raise ValueError(f"random_range_ratio {ratio} is not in (0, 1]")
        return ratio
    for pattern, ratio in BENCHMARK_RANGE_RATIOS:
        if pattern.search(r.get("silicon_data_source", "")):
            return ratio
    return DEFAULT_RANGE_RATIO


def _agg_pool(pool: Pool, concurrency: int | None) -> Pool:
    """An aggregated row's batch is per replica: a concurrency that is a whole multiple of
    the replica's sequences (batch × attention DP) ran on that many replicas
    (concurrency 192 at batch 48: four)."""
    seqs = pool.replica_seqs
    if not seqs or not concurrency or pool.workers != 1 or concurrency <= seqs or \
            concurrency % seqs:
        return pool
    return replace(pool, workers=concurrency // seqs)


def _complete_layouts(rows: list[ServingRow]) -> list[ServingRow]:
    """A disaggregated row that names no workers takes the pools of a row recording the
    same run: the same engine, device, lengths and concurrency and the same measured
    TTFT and TPOT to the microsecond, from a source that names its workers and batches
    (the dated result files repeat the database dumps' runs with the layout cut to one
    TP × EP label, and name DeepSeek-R1 where the dumps name the DeepSeek-V3 architecture)."""
    def run(r: ServingRow) -> tuple:
        return (r.engine, r.hardware, r.isl, r.osl, r.concurrency,
                round(r.ttft_s, 6), round(r.tpot_s, 6))

    known = {run(r): r.pools for r in rows if r.mode == "disagg" and r.pools[-1].batch}
    return [replace(r, pools=known[run(r)])
            if r.mode == "disagg" and not r.pools[-1].batch and run(r) in known else r
            for r in rows]


def server_for(row: ServingRow, *, host=None, efficiency: float = 1.0):  # noqa: ANN001, ANN201
    """The simulated server a row describes, with the engine's preset (``host`` replaces
    its fitted host time; ``efficiency`` is unused by the simulator and kept at 1)."""
    from phasewise.serving import Pool as SimPool
    from phasewise.serving import Server
    from phasewise.serving.layouts import engine_layout
    from phasewise.validate.serving_inputs import row_device, row_model, row_precision
    from phasewise.validate.serving_layouts import as_engine_ran

    model = row_model(row.model)
    row = as_engine_ran(row, is_moe=model.is_moe)
    device = row_device(row.hardware)
    launch = launch_settings(row)
    kv = row.kv_quant or launch.pop("kv_cache", "") or next(
        (fmt for (engine, prefix), fmt in KV_FORMATS.items()
         if row.engine == engine and row.model.startswith(prefix)), "")
    precision = row_precision(row.gemm_quant, row.moe_quant, kv, device, model, row.engine)
    pars = [engine_layout(tp=p.tp, attention_dp=p.attention_dp, moe_tp=p.moe_tp,
                          moe_ep=p.moe_ep, is_moe=model.is_moe) for p in row.pools]
    preset = replace(_preset(row, device, pars[-1]), **launch)
    if host is not None:
        preset = replace(preset, host=replace(host, overlap=preset.host.overlap))
    workers = [p.workers for p in row.pools]
    if row.mode == "disagg" and not row.pools[-1].batch:
        workers[-1] = decode_workers_for_load(row, model, device, precision, pars[-1], preset)
    pools = [SimPool(row.device, par, n) for par, n in zip(pars, workers, strict=False)]
    prices = _PRICES.setdefault((row.model, row.device, precision, preset.cost_engine,
                                 preset.cuda_graph_sizes, preset.host,
                                 preset.allreduce_norm_fusion), {})
    # the deployment's own batch limit (per replica) where the row gives one, else the
    # engine's default; a disaggregated row's prefill pool has a limit of its own
    seqs = row.pools[-1].replica_seqs or preset.max_num_seqs
    prefill_seqs = row.pools[0].replica_seqs if row.mode == "disagg" else None
    scheduler = "disaggregated" if row.mode == "disagg" else preset.scheduler
    return Server(model=model, pool=pools[0], decode_pool=pools[1] if len(pools) > 1 else None,
                  precision=precision, scheduler=scheduler,
                  max_seqs=max(seqs, 1), prefill_max_seqs=prefill_seqs,
                  max_batched_tokens=preset.replica_budget(row.pools[0].attention_dp) or None,
                  preset=preset, price_cache=prices)


def launch_settings(row: ServingRow) -> dict:
    """The engine settings the row's source launched with beyond the engine's defaults
    (LAUNCH_SETTINGS): EngineSettings fields, and ``kv_cache`` for the KV format."""
    out: dict = {}
    for pattern, engine, model, hardware, covers, settings in LAUNCH_SETTINGS:
        if (row.engine == engine and row.model == model and row.hardware == hardware
                and pattern.search(row.source) and covers(row)):
            out.update(settings)
    return out


def decode_workers_for_load(row: ServingRow, model, device, precision, par, preset) -> int:  # noqa: ANN001
    """Decode replicas of a disaggregated row that does not name them: the fewest that hold
    every client's whole request in KV cache (concurrency × (ISL + OSL) tokens) within the
    engine's sequence limit. A disaggregated deployment is sized so that its decode pool
    does not preempt (a preempted sequence would go back to the prefill pool); a pool that
    small is the least the run can have had."""
    import math

    from phasewise.serving.kv_cache import ADMISSION_WATERMARK, kv_capacity

    capacity = kv_capacity(model, device, precision, par,
                           max_batched_tokens=preset.max_num_batched_tokens or row.isl + row.osl,
                           max_seqs=preset.max_num_seqs, memory_fraction=preset.memory_fraction,
                           of_free=preset.memory_fraction_of_free)
    usable = capacity.tokens * (1 - ADMISSION_WATERMARK)
    need = row.concurrency * (row.isl + row.osl)
    return max(1, math.ceil(need / usable), math.ceil(row.concurrency / preset.max_num_seqs))


# Output tokens a replay holds at most (about 1 GiB of simulator state at 130 bytes a
# token, serving.simulator): a very wide run sends fewer prompts a client, at least two.
MAX_REPLAY_OUTPUT_TOKENS = 8_000_000


def prompts(concurrency: int, osl: int, per_client: int = PROMPTS_PER_CLIENT) -> int:
    """Prompts a replay sends: ``per_client`` a client, fewer (at least two) where that
    would hold more than MAX_REPLAY_OUTPUT_TOKENS."""
    return max(2 * concurrency, min(per_client * concurrency, MAX_REPLAY_OUTPUT_TOKENS // osl))


def _preset(row: ServingRow, device, par):  # noqa: ANN001, ANN202
    """The engine's preset at the row's version; a version the presets do not reach (a
    Dynamo release number, a branch name) takes the engine's default release."""
    from phasewise.serving.presets import engine_settings

    if re.match(r"^\d", row.version or ""):
        try:
            return engine_settings(f"{row.engine}@{row.version}", device, tp=par.tp,
                                   ranks=par.devices)
        except InputError:
            pass
    return engine_settings(row.engine, device, tp=par.tp, ranks=par.devices)


def benchmark_lengths(row: ServingRow, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and answer lengths of ``n`` requests as the row's benchmark drew them: fixed,
    or with a range ratio r uniform on the integers [⌊r·L⌋, L] (vLLM benchmark_serving
    sample_random_requests: ``np.random.randint(int(input_len * range_ratio),
    input_len + 1)``; ``serving.requests.range_lengths``)."""
    from phasewise.serving.requests import Lengths, range_lengths

    rng = np.random.default_rng(seed)
    return tuple(range_lengths(Lengths("fixed", (float(length),)), row.range_ratio)
                 .sample(n, rng) for length in (row.isl, row.osl))


def replay(row: ServingRow, *, host=None, prompts_per_client: int = PROMPTS_PER_CLIENT,  # noqa: ANN001
           seed: int = 0) -> ServingResult:
    """Simulate the benchmark run the row measured and return the simulated means."""
    from phasewise.serving import ClosedLoop, request_metrics, simulate
    from phasewise.serving.requests import Requests

    server = server_for(row, host=host)
    closed = None
    if row.load == "concurrency":
        n, arrival_s = prompts(row.concurrency, row.osl, prompts_per_client), None
        closed = ClosedLoop(row.concurrency)
    elif row.load in ("rate", "mlperf_server"):
        n = max(SATURATION_REQUESTS // 5, int(row.request_rate * 60))  # a minute of arrivals
        arrival_s = np.cumsum(np.random.default_rng(seed).exponential(1 / row.request_rate, n))
    else:
        n, arrival_s = SATURATION_REQUESTS, np.zeros(SATURATION_REQUESTS)
    requests = Requests(*benchmark_lengths(row, n, seed), arrival_s)
    sim = simulate(server, requests, closed_loop=closed)
    m = request_metrics(sim)
    duration_s = float((m.arrival_s + m.e2el_s).max() - m.arrival_s.min())
    return ServingResult(row, float(m.ttft_s.mean()), float(np.nanmean(m.tpot_s)), sim.devices,
                         float(m.output_tokens.sum()) / duration_s)


def replay_all(rows: list[ServingRow], *, host_for=None, prompts_per_client: int = PROMPTS_PER_CLIENT  # noqa: ANN001
               ) -> tuple[list[ServingResult], list[Problem]]:
    """Every row replayed, or skipped with the reason (``host_for(engine)`` gives a host
    time in place of the bundled fit)."""
    results, skipped = [], []
    for row in rows:
        try:
            host = host_for(row.engine) if host_for else None
            results.append(replay(row, host=host, prompts_per_client=prompts_per_client))
        except (InputError, MappingError) as err:
            skipped.append(Problem(row.line, row.record_id, str(err)))
    return results, skipped
