"""Serving measurements in the measurement layout, replayed through the simulator.

A row whose ``load`` is set (``validate.measurements.LOADS``) is one benchmark run of a
loaded server: a closed loop of ``batch_or_concurrency`` clients (``vllm bench serve
--max-concurrency``, SGLang's bench_serving), Poisson arrivals at ``request_rate`` (a rate
sweep, MLPerf's Server scenario at its target rate), or every request queued at once
with the engine choosing the batch (MLPerf Offline, ``trtllm-bench throughput``, vLLM's
offline throughput benchmark). It is replayed as its benchmark drove the server, against
the engine's preset at the row's version (``serving.presets``; engine flags the row's
software names, ``--max-num-seqs 512``, replace the settings they set), with fixed prompt and
answer lengths (the published runs fix them: random datasets with a range ratio of 1,
``prepare_dataset.py`` with a standard deviation of 0), and scored on what it measured:
a mean or percentile of TTFT, TPOT, ITL or E2E latency, or a throughput, read as its time
(``error = simulated time / measured time − 1``, as every other row).

These rows are never fitted: the calibration is fitted to phase rows through the
estimate, and a serving row is scored by the profile in use, so it is held out in every
mode. Rows the simulator cannot describe (a layout without a ledger form, a model that
does not fit its devices) are skipped with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from phasewise.errors import InputError
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision
from phasewise.validate.measurements import Measurement, Problem
from phasewise.validate.prediction import Prediction
from phasewise.validate.scenario import (
    MappingError,
    engine_for,
    precision_for,
    resolve_device,
    resolve_model,
)

SERVING_PHASE = "serving"
# Requests a replay sends where the row does not say: ten a client for a closed loop
# (vLLM's and InferenceMAX's recipes: --num-prompts $((CONC * 10))), a minute of
# arrivals for a rate, and enough for a steady batch for a saturating run.
PROMPTS_PER_CLIENT = 10
RATE_REPLAY_S = 60.0
SATURATION_REQUESTS = 1000
# Output tokens one replay generates at most, to bound its time on a shared CPU: a
# longer run sends fewer requests (never fewer than two waves of its clients), which
# keeps the steady batch the throughput and latency are read from.
MAX_REPLAY_OUTPUT_TOKENS = 1_000_000

# A latency statistic as benchmarks name it: ``mean_ttft``, ``p99_tpot``, ``median_itl``;
# a bare figure (``ttft``) is the mean, as vLLM's and SGLang's summaries print it first.
_LATENCY = re.compile(r"^(?:(?P<stat>mean|median|p\d{1,2}(?:\.\d+)?)_)?"
                      r"(?P<figure>ttft|tpot|itl|e2el|e2e_latency)$")
_TIME_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6}
# Throughputs: per second of the whole run (first request sent to last token), over all
# devices unless per GPU. The value is read as seconds per unit, so errors are on time.
THROUGHPUTS = {"output_throughput": ("tokens/s", "output"),
               "output_throughput_per_gpu": ("tokens/s per gpu", "output"),
               "total_token_throughput": ("tokens/s", "total"),
               "request_throughput": ("requests/s", "requests")}
_RATE_UNITS = {"tokens/s": ("tokens/s", "tok/s"), "tokens/s per gpu": (
    "tokens/s per gpu", "output tokens/s per gpu", "tok/s/gpu", "tokens/s/gpu"),
    "requests/s": ("requests/s", "req/s")}

# Engine flags a row's software may name, as vLLM, SGLang and TensorRT-LLM spell them, and
# the preset setting each one replaces (the rest of the preset stays as the engine ships it).
_FLAGS = (
    (re.compile(r"--max[-_]num[-_]seqs[ =](\d+)|--max[-_]batch[-_]size[ =](\d+)"
                r"|--max[-_]running[-_]requests[ =](\d+)"), "max_num_seqs", int),
    (re.compile(r"--max[-_]num[-_]batched[-_]tokens[ =](\d+)|--max[-_]num[-_]tokens[ =](\d+)"
                r"|--chunked[-_]prefill[-_]size[ =](\d+)"), "max_num_batched_tokens", int),
    (re.compile(r"--gpu[-_]memory[-_]utilization[ =]([\d.]+)|--mem[-_]fraction[-_]static[ =]"
                r"([\d.]+)|--kv[-_]cache[-_]free[-_]gpu[-_]mem[-_]fraction[ =]([\d.]+)"),
     "memory_fraction", float),
)

# Layouts as the engines' docs write them: TP<n>, PP<n>, EP<n>, "DEP<n>" (TensorRT-LLM:
# attention data parallel over n ranks with the experts split n ways), and attention DP
# with the experts' own TP (SGLang --enable-dp-attention without EP).
_TOKEN = re.compile(r"(?P<key>dep|dp-attention|attention-dp|moe-tp|moe-ep|tp|pp|ep|dp)\s*=?\s*"
                    r"(?P<n>\d+)", re.I)


@dataclass(frozen=True, slots=True)
class ServingScenario:
    """What one serving row asks the simulator to replay, and the figure it measured."""

    record_id: str
    source: str
    model: ModelSpec
    hardware: HardwareSpec
    precision: Precision
    parallelism: Parallelism
    engine: str  # the preset, 'vllm@0.7.3' (serving.presets.engine_settings)
    load: str
    concurrency: int
    request_rate: float
    requests: int
    isl: int
    osl: int
    metric: str
    statistic: str  # 'mean', 'median', 'p99' … or the throughput's kind
    figure: str  # ttft, tpot, itl, e2el or throughput
    value: float
    unit: str
    measured_s: float  # the figure as seconds (a throughput: seconds per unit)
    # preset settings the row's own engine flags replace: (EngineSettings field, value)
    overrides: tuple[tuple[str, float], ...] = ()

    @property
    def devices(self) -> int:
        return self.parallelism.devices

    @property
    def rate(self) -> bool:
        return self.figure == "throughput"


def serving_scenario_for(row: Measurement) -> ServingScenario:
    """The replay a serving row describes, or a MappingError naming what is unknown."""
    model = resolve_model(row.model, row.model_params_b)
    hardware = resolve_device(row.hardware)
    engine_for(row, hardware)  # the row names an engine the cost model knows
    par = layout_for(row.parallelism, row.num_accelerators, is_moe=model.is_moe)
    statistic, figure, measured_s = _measured(row, par.devices)
    if row.input_len <= 0 or row.output_len <= 0:
        raise MappingError("a serving row needs input_len and output_len")
    concurrency = row.batch if row.load == "concurrency" else 0
    return ServingScenario(
        record_id=row.record_id, source=row.source, model=model, hardware=hardware,
        precision=_precision(row), parallelism=par, engine=preset_spec(row.software_stack),
        load=row.load, concurrency=concurrency, request_rate=row.request_rate,
        requests=replay_requests(row.load, row.num_prompts, concurrency, row.request_rate,
                                 row.output_len),
        isl=row.input_len, osl=row.output_len, metric=row.metric, statistic=statistic,
        figure=figure, value=row.value, unit=row.unit, measured_s=measured_s,
        overrides=engine_flags(row.software_stack))


def engine_flags(software_stack: str) -> tuple[tuple[str, float], ...]:
    """The preset settings a row's engine flags set ('--max-num-seqs 512',
    '--max_num_tokens 16384', '--gpu-memory-utilization 0.95'), in ``_FLAGS`` order."""
    found = []
    for pattern, setting, kind in _FLAGS:
        if match := pattern.search(software_stack):
            try:
                value = kind(next(g for g in match.groups() if g))
            except ValueError:
                raise MappingError(f"engine flag '{match.group(0)}' is not a number") from None
            if not value > 0 or (setting == "memory_fraction" and value > 1):
                raise MappingError(f"engine flag '{match.group(0)}' is out of range")
            found.append((setting, value))
    return tuple(found)


def _precision(row: Measurement) -> Precision:
    """The weight format as stated; an fp8 KV cache where the run's software says so
    (the rows otherwise keep the engines' 16-bit default, ``precision_for``)."""
    precision = precision_for(row.weight_dtype)
    if re.search(r"fp8 kv|kv[- _]cache[- _:=]*(?:dtype[ =:]*)?fp8", row.software_stack, re.I):
        return replace(precision, kv_cache="fp8")
    return precision


def _measured(row: Measurement, devices: int) -> tuple[str, str, float]:
    """(statistic, figure, the measured figure as seconds) for the row's metric."""
    metric, unit = row.metric.lower(), " ".join(row.unit.lower().split())
    if match := _LATENCY.match(metric):
        if unit not in _TIME_UNITS:
            raise MappingError(f"unit '{row.unit}' does not fit metric '{row.metric}' "
                               f"(expected {' or '.join(_TIME_UNITS)})")
        figure = "e2el" if match["figure"] == "e2e_latency" else match["figure"]
        stat = match["stat"] or "mean"
        return ("p50" if stat == "median" else stat), figure, row.value * _TIME_UNITS[unit]
    if metric in THROUGHPUTS:
        expected, kind = THROUGHPUTS[metric]
        if unit not in _RATE_UNITS[expected]:
            raise MappingError(f"unit '{row.unit}' does not fit metric '{row.metric}' "
                               f"(expected {expected})")
        per_gpu = metric.endswith("_per_gpu")
        return kind, "throughput", 1.0 / (row.value * (devices if per_gpu else 1))
    raise MappingError(f"unknown serving metric '{row.metric}'; one of mean_/median_/pNN_ "
                       f"ttft, tpot, itl, e2el, or {', '.join(THROUGHPUTS)}")


def layout_for(text: str, devices: int, *, is_moe: bool) -> Parallelism:
    """'TP8', 'TP8 EP4', 'DEP4', 'TP1,PP2', 'TP8 DP-attention8 MoE-TP8' -> Parallelism
    (through ``serving.layouts.engine_layout``), checked against the device count. A MoE
    row without EP splits its experts by TP, as vLLM, SGLang and TensorRT-LLM do unless
    expert parallelism is enabled."""
    from phasewise.serving.layouts import engine_layout

    found = {m["key"].lower(): int(m["n"]) for m in _TOKEN.finditer(text)}
    if not found and devices > 1:
        raise MappingError(f"unknown parallelism '{text}'; write TP<n>, EP<n>, PP<n> or DEP<n>")
    if "dep" in found:
        dp = found["dep"]
        tp, moe_tp, moe_ep = 1, 1, dp
    else:
        dp = found.get("dp-attention", found.get("attention-dp", found.get("dp", 1)))
        tp = found.get("tp", 1) // dp if dp > 1 and found.get("tp", 1) % dp == 0 \
            else found.get("tp", 1)
        moe_ep = found.get("moe-ep", found.get("ep", 1))
        moe_tp = found.get("moe-tp", tp * dp // moe_ep)
    pp = found.get("pp", 1)
    try:
        par = engine_layout(tp=tp, attention_dp=dp, moe_tp=moe_tp, moe_ep=moe_ep, pp=pp,
                            is_moe=is_moe)
    except InputError as err:
        raise MappingError(f"parallelism '{text}': {err}") from None
    if devices and tp * dp * pp != devices:
        raise MappingError(f"parallelism '{text}' uses {tp * dp * pp} devices but the row "
                           f"says {devices}")
    return par


def preset_spec(software_stack: str) -> str:
    """The engine preset a row's software names first, at the version written after the
    engine's name ('vLLM 0.7.3.dev138' -> 'vllm@0.7.3'); the engine alone where none is.
    The first name wins: a row served by vLLM and measured with SGLang's bench_serving
    names vLLM first."""
    from phasewise.serving.presets import is_preset

    lowered = software_stack.lower()
    for word in re.finditer(r"[a-z][a-z0-9.+_-]*", lowered):
        name = word.group(0).rstrip(".")
        if is_preset(name):
            version = re.search(r"\d+\.\d+(?:\.\d+)?", lowered[word.end():])
            return f"{name}@{version.group(0)}" if version else name
    raise MappingError(f"no engine preset in software_stack '{software_stack}'")


def replay_requests(load: str, stated: int, concurrency: int, rate: float, osl: int) -> int:
    """Requests a replay sends: the row's own count or the load's default, at most
    MAX_REPLAY_OUTPUT_TOKENS of output, never fewer than two waves of clients."""
    if stated:
        wanted = stated
    elif load == "concurrency":
        wanted = PROMPTS_PER_CLIENT * concurrency
    elif load in ("rate", "mlperf_server"):
        wanted = max(2, int(rate * RATE_REPLAY_S))
    else:
        wanted = SATURATION_REQUESTS
    capped = min(wanted, max(MAX_REPLAY_OUTPUT_TOKENS // osl, 1))
    return max(capped, min(wanted, 2 * concurrency), 1)


def server_for(scenario: ServingScenario, *, cost: str = "calibrated",
               calibration: str | None = None, price_cache: dict | None = None):  # noqa: ANN201
    """The simulated server: one replica of the row's layout under the engine's preset (its
    scheduler, token budget, sequences in flight, graph padding, memory share, host time)."""
    from phasewise.serving import Pool, Server

    preset = _preset(scenario)
    return Server(model=scenario.model, pool=Pool(scenario.hardware, scenario.parallelism, 1),
                  precision=scenario.precision, scheduler=preset.scheduler,
                  max_seqs=max(preset.max_num_seqs, 1),
                  max_batched_tokens=preset.max_num_batched_tokens or None, cost=cost,
                  calibration=calibration, preset=preset, price_cache=price_cache)


def _preset(scenario: ServingScenario):  # noqa: ANN202
    """The preset at the row's version (a version before the presets' first table, or one
    they cannot read, takes the engine's default release), with the row's engine flags in
    place of the settings they name."""
    from phasewise.serving.presets import engine_settings

    par = scenario.parallelism
    try:
        preset = engine_settings(scenario.engine, scenario.hardware, tp=par.tp,
                                 ranks=par.devices)
    except InputError:
        preset = engine_settings(scenario.engine.split("@")[0], scenario.hardware, tp=par.tp,
                                 ranks=par.devices)
    return replace(preset, **dict(scenario.overrides))


def simulated_seconds(scenario: ServingScenario, server, *, seed: int = 0) -> float:  # noqa: ANN001
    """Replay the row's benchmark on ``server`` and return its figure as seconds (a
    throughput as seconds per unit), the way the row's ``measured_s`` reads."""
    from phasewise.serving import ClosedLoop, request_metrics, simulate
    from phasewise.serving.requests import Requests

    n, closed, arrival_s = scenario.requests, None, None
    if scenario.load == "concurrency":
        closed = ClosedLoop(scenario.concurrency)
    elif scenario.load in ("rate", "mlperf_server"):
        gaps = np.random.default_rng(seed).exponential(1.0 / scenario.request_rate, n)
        arrival_s = np.cumsum(gaps)
    else:
        arrival_s = np.zeros(n)
    requests = Requests(np.full(n, scenario.isl, dtype=np.int64),
                        np.full(n, scenario.osl, dtype=np.int64), arrival_s)
    m = request_metrics(simulate(server, requests, closed_loop=closed))
    if scenario.figure == "throughput":
        duration_s = float((m.arrival_s + m.e2el_s).max() - m.arrival_s.min())
        done = {"output": m.output_tokens.sum(), "requests": len(m.output_tokens),
                "total": m.output_tokens.sum() + m.input_tokens.sum()}[scenario.statistic]
        return duration_s / float(done)
    values = {"ttft": m.ttft_s, "tpot": m.tpot_s, "itl": m.itl_s, "e2el": m.e2el_s}[
        scenario.figure]
    values = values[np.isfinite(values)]
    if not len(values):
        raise InputError(f"{scenario.record_id}: the replay has no {scenario.figure} to score")
    if scenario.statistic == "mean":
        return float(values.mean())
    return float(np.percentile(values, float(scenario.statistic[1:])))


# Step prices shared by replays of one model, device, formats and engine (a serving run
# prices each step shape once; see serving.Server.price_cache).
_PRICES: dict[tuple, dict] = {}


def predict(scenario: ServingScenario, *, calibration: str | None = None) -> Prediction:
    """The row replayed with the calibrated cost model and with the speed-of-light floor."""
    key = (scenario.model.name, scenario.hardware.name, scenario.precision, scenario.engine,
           calibration)
    times = {}
    for cost in ("calibrated", "sol"):
        cache = _PRICES.setdefault((*key, cost), {})
        server = server_for(scenario, cost=cost, calibration=calibration, price_cache=cache)
        times[cost] = simulated_seconds(scenario, server)

    def in_unit(seconds: float) -> float:
        ratio = seconds / scenario.measured_s
        return scenario.value / ratio if scenario.rate else scenario.value * ratio

    return Prediction(
        record_id=scenario.record_id, source=scenario.source, phase=SERVING_PHASE,
        hardware=scenario.hardware.name, model=scenario.model.name, engine=scenario.engine,
        metric=scenario.metric, unit=scenario.unit, measured=scenario.value,
        predicted=in_unit(times["calibrated"]), floor=in_unit(times["sol"]),
        measured_s=scenario.measured_s, predicted_s=times["calibrated"], floor_s=times["sol"])


def predict_all(scenarios: list[ServingScenario], *, calibration: str | None = None,
                lines: dict[str, tuple[int, str]] | None = None
                ) -> tuple[list[Prediction], list[Problem]]:
    """Every row replayed, or skipped with the reason the simulator gives (a model that
    does not fit its devices, a budget the prompt exceeds); ``lines`` maps a record id to
    its (line, file) for the skipped rows' messages."""
    predictions, skipped = [], []
    for s in scenarios:
        try:
            predictions.append(predict(s, calibration=calibration))
        except (InputError, MappingError) as err:
            line, file = (lines or {}).get(s.record_id, (0, ""))
            skipped.append(Problem(line, s.record_id, f"{file}: {err}" if file else str(err)))
    return predictions, skipped
