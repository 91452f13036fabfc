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
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
# Step prices shared by the rows of one model, device, format and engine timing (a
# process's replays price each step shape once; see serving.Server.price_cache).
_PRICES: dict[tuple, dict] = {}


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool's layout: replicas, attention TP × DP, MoE TP × EP, sequences a replica holds."""

    workers: int
    tp: int
    attention_dp: int
    moe_tp: int | None
    moe_ep: int | None
    batch: int | None


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
            pools = (_pool(r, "prefill_"), _pool(r, "decode_")) if disagg else (_pool(r, ""),)
            rows.append(ServingRow(
                r["id"], r["silicon_data_source"], r["backend"], r["backend_version"],
                r["model_path"], r["system"], r["gemm_quant_mode"], r["mode"], int(r["isl"]),
                int(r["osl"]), concurrency, pools, _ms(r.get("silicon_ttft_ms")),
                _ms(r.get("silicon_tpot_ms")), line, load, rate,
                float(r.get("output_tokens_per_s") or "nan"),
                moe_quant=r.get("moe_quant_mode") or "", kv_quant=r.get("kvcache_quant_mode") or ""))
        except (KeyError, TypeError, ValueError) as err:
            problems.append(Problem(line, r.get("id", ""), f"cannot read the row ({err})"))
    return rows, problems


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
    precision = row_precision(row.gemm_quant, row.moe_quant, row.kv_quant, device, model, row.engine)
    pars = [engine_layout(tp=p.tp, attention_dp=p.attention_dp, moe_tp=p.moe_tp,
                          moe_ep=p.moe_ep, is_moe=model.is_moe) for p in row.pools]
    preset = _preset(row, device, pars[-1])
    if host is not None:
        preset = replace(preset, host=replace(host, overlap=preset.host.overlap))
    pools = [SimPool(row.device, par, p.workers) for par, p in zip(pars, row.pools, strict=False)]
    prices = _PRICES.setdefault((row.model, row.device, precision, preset.cost_engine,
                                 preset.cuda_graph_sizes, preset.host), {})
    decode_batch = row.pools[-1].batch
    seqs = min(preset.max_num_seqs, decode_batch) if decode_batch else preset.max_num_seqs
    scheduler = "disaggregated" if row.mode == "disagg" else preset.scheduler
    return Server(model=model, pool=pools[0], decode_pool=pools[1] if len(pools) > 1 else None,
                  precision=precision, scheduler=scheduler,
                  max_seqs=max(seqs, 1), max_batched_tokens=preset.max_num_batched_tokens or None,
                  preset=preset, price_cache=prices)


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
    requests = Requests(np.full(n, row.isl, dtype=np.int64), np.full(n, row.osl, dtype=np.int64),
                        arrival_s)
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
