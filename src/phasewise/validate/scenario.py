"""From a measurement row to the scenario phasewise prices, and back to the row's metric.

Device and model names are resolved through the catalogs' aliases after peeling off what
sources add (vendor, memory size, form-factor remarks in parentheses); weight formats
through the number-format table (GGUF types are weight-only, computed in fp16, as
llama.cpp does); the engine from the software named in the row.

Every phase metric becomes a time in seconds, so errors read the same way everywhere:
``error = predicted time / measured time - 1`` (positive: phasewise expects it slower).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from phasewise.catalog import load_hardware, load_model
from phasewise.cost.calibration import Engine, engines
from phasewise.errors import InputError
from phasewise.estimate.types import Estimate
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision, Workload
from phasewise.specs.precision import number_format

# Sources name devices by platform; these name the catalog sheet the platform holds.
DEVICE_REMARKS = {
    "dgx-a100": "a100-80gb-sxm",  # DGX A100 640GB: eight A100 SXM4 80GB
    "dgx-h100": "h100-sxm",
}
# Explicit device names a source uses that the catalog aliases leave ambiguous.
DEVICE_NAMES = {
    "a100 pcie": "a100-80gb-pcie",  # MAMF table: the datasheet peak (312 TFLOPS) is the same for 40/80 GB
    "a100 sxm": "a100-80gb-sxm",
}
_VENDOR = re.compile(r"\b(nvidia|amd|apple|intel|geforce|instinct|tesla)\b", re.I)
_MEMORY = re.compile(r"\b\d+\s*gi?b\b", re.I)
_PARENS = re.compile(r"\([^)]*\)")

# The unit a metric must carry, and its factor to SI.
_TIME_UNITS = {"ms": 1e-3, "ms (whole batch)": 1e-3, "ms per decode step": 1e-3, "s": 1.0,
               "seconds": 1.0, "us": 1e-6}
_RATE_UNITS = {"tokens/s": 1.0, "tok/s": 1.0, "t/s": 1.0}
_PER_GPU_UNITS = {"output tokens/s per gpu": 1.0, "tokens/s per gpu": 1.0, "tok/s/gpu": 1.0}
_FLOPS_UNITS = {"tflops": 1e12, "tflop/s": 1e12}
_BANDWIDTH_UNITS = {"gb/s": 1e9, "tb/s": 1e12}

# Engines as sources write them, and the microbenchmark stacks that have none.
_MICROBENCH_STACKS = ("gpu-stream", "stream", "torch.matmul", "mamf", "cublas", "rocblas")


class MappingError(ValueError):
    """A row phasewise cannot turn into a scenario; the message says which part and why."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """What one measurement row asks phasewise to price.

    ``kind`` is "prefill" (time of one prefill step batch), "decode" (mean decode step),
    "end_to_end" (prefill then osl - 1 decode steps), or a device microbenchmark:
    "gemm" (best matmul FLOP/s) or "memory_bw" (best streaming bytes/s).
    ``measured_s`` is the row's figure as seconds (for microbenchmarks, seconds per unit
    of work: 1 / rate).
    """

    record_id: str
    source: str
    phase: str
    kind: str
    model: ModelSpec | None
    hardware: HardwareSpec
    workload: Workload
    precision: Precision
    parallelism: Parallelism
    engine: Engine | None
    measured_s: float
    math_format: str = ""
    metric: str = ""
    value: float = 0.0
    unit: str = ""
    rate: bool = True  # the row's figure is a rate (tokens/s, FLOP/s), not a time

    @property
    def devices(self) -> int:
        return self.parallelism.devices


def resolve_device(name: str) -> HardwareSpec:
    """A catalog device for a source's device name, trying the name as written, then with
    platform remarks, vendor words, memory sizes and a trailing 'SXM' removed in turn."""
    lowered = name.lower()
    for remark, device in DEVICE_REMARKS.items():
        if remark in lowered:
            return load_hardware(device)
    for candidate in _device_candidates(name):
        key = " ".join(candidate.lower().split())
        if key in DEVICE_NAMES:
            return load_hardware(DEVICE_NAMES[key])
        try:
            return load_hardware(candidate)
        except InputError:
            continue
    raise MappingError(f"unknown device '{name}': no catalog sheet or alias matches; add an "
                       "alias to the device's sheet in catalog/hardware")


def _device_candidates(name: str) -> list[str]:
    plain = " ".join(_PARENS.sub(" ", name).split())
    no_vendor = " ".join(_VENDOR.sub(" ", plain).split())
    no_memory = " ".join(_MEMORY.sub(" ", no_vendor).split())
    no_gpu = re.sub(r"\s+gpu$", "", no_memory, flags=re.I)
    no_sxm = re.sub(r"\s+sxm\d?$", "", no_gpu, flags=re.I)
    return list(dict.fromkeys(c for c in (name, plain, no_vendor, no_memory, no_gpu, no_sxm) if c))


def resolve_model(name: str) -> ModelSpec:
    """A catalog model for a source's model name ('Llama-2 70B', 'Mixtral 8x7B (MoE)')."""
    for candidate in dict.fromkeys((name, " ".join(_PARENS.sub(" ", name).split()))):
        try:
            return load_model(candidate)
        except InputError:
            continue
    raise MappingError(f"unknown model '{name}': no catalog model or alias matches; add an "
                       "alias in catalog/models/index.toml")


def precision_for(weight_dtype: str) -> Precision:
    """Weights as stated; weight-only formats (GGUF types, int4) compute and cache in fp16
    (llama.cpp's defaults), the rest compute in their own format with a 16-bit KV cache:
    the rows do not state the KV format, and engines keep the model's 16-bit type unless
    told otherwise (TensorRT-LLM's v0.9 benchmark suite: --kv-dtype defaults to float16,
    also with --quantization FP8; vLLM: kv_cache_dtype 'auto' is the model's type)."""
    text = " ".join(_PARENS.sub(" ", weight_dtype).split())
    try:
        fmt = number_format(text)
    except InputError:
        raise MappingError(f"unknown weight format '{weight_dtype}'") from None
    if fmt.math_format is None:
        return Precision(fmt.name, "fp16", "fp16")
    kv = fmt.name if fmt.name in ("bf16", "fp16") else "fp16"
    return Precision(fmt.name, fmt.name, kv)


def parallelism_for(text: str, devices: int) -> Parallelism:
    """'TP8', 'TP2 PP2', 'single device' -> Parallelism; checked against the device count."""
    lowered = text.lower()
    tp = re.search(r"tp\s*=?\s*(\d+)", lowered)
    pp = re.search(r"pp\s*=?\s*(\d+)", lowered)
    if not (tp or pp) and lowered not in ("", "single device", "single gpu", "none"):
        raise MappingError(f"unknown parallelism '{text}'; write TP<n> and/or PP<n>")
    par = Parallelism(int(tp.group(1)) if tp else 1, int(pp.group(1)) if pp else 1)
    if devices and par.devices != devices:
        raise MappingError(f"parallelism '{text}' uses {par.devices} devices but the row says "
                           f"{devices}")
    return par


def engine_for(software_stack: str) -> Engine:
    """The engine a row names (by any alias of an engine in catalog/calibration/engines.toml)."""
    lowered = software_stack.lower()
    for engine in engines().values():
        if engine.name == "generic":
            continue
        if any(alias.lower() in lowered for alias in (engine.name, *engine.aliases)):
            return engine
    raise MappingError(f"unknown engine in software_stack '{software_stack}'; name one of "
                       f"{', '.join(e for e in engines() if e != 'unrecorded')}")


def scenario_for(row) -> Scenario:  # noqa: ANN001 - a validate.measurements.Measurement
    """The scenario a measurement row describes, or a MappingError naming what is unknown."""
    hardware = resolve_device(row.hardware)
    if row.phase in ("gemm", "memory_bw"):
        return _microbenchmark(row, hardware)
    model = resolve_model(row.model)
    precision = precision_for(row.weight_dtype)
    par = parallelism_for(row.parallelism, row.num_accelerators)
    engine = engine_for(row.software_stack)
    metric, unit = row.metric.lower(), " ".join(row.unit.lower().split())
    common = dict(record_id=row.record_id, source=row.source, phase=row.phase, model=model,
                  hardware=hardware, precision=precision, parallelism=par, engine=engine,
                  metric=row.metric, value=row.value, unit=row.unit)
    b = row.batch
    if match := re.fullmatch(r"pp(\d+)_throughput", metric):
        tokens = row.input_len or int(match.group(1))
        _need(unit, _RATE_UNITS, row)
        return Scenario(kind="prefill", workload=Workload(tokens, 1, b),
                        measured_s=b * tokens / row.value, **common)
    if match := re.fullmatch(r"tg(\d+)_throughput", metric):
        tokens = row.output_len or int(match.group(1))
        _need(unit, _RATE_UNITS, row)
        # llama-bench tg runs generate from an empty cache (or after kv_depth tokens).
        return Scenario(kind="decode", workload=Workload(max(1, row.kv_depth), tokens, b),
                        measured_s=b / row.value, **common)
    if metric in ("first_token_latency", "ttft", "prompt_phase_time"):
        factor = _need(unit, _TIME_UNITS, row)
        return Scenario(kind="prefill", workload=Workload(_len(row.input_len, "input_len"), 1, b),
                        measured_s=row.value * factor, rate=False, **common)
    if metric in ("token_phase_time_per_iteration", "tpot", "itl"):
        factor = _need(unit, _TIME_UNITS, row)
        isl = _len(row.input_len, "input_len") + row.kv_depth
        return Scenario(kind="decode", workload=Workload(isl, max(2, row.output_len), b),
                        measured_s=row.value * factor, rate=False, **common)
    if metric in ("batch_latency", "end_to_end_latency", "e2el"):
        factor = _need(unit, _TIME_UNITS, row)
        osl = _len(row.output_len, "output_len")
        return Scenario(kind="end_to_end", workload=Workload(_len(row.input_len, "input_len"),
                                                             osl, b),
                        measured_s=row.value * factor, rate=False, **common)
    if metric == "output_throughput_per_gpu":
        _need(unit, _PER_GPU_UNITS, row)
        osl = _len(row.output_len, "output_len")
        e2el = b * osl / (row.value * par.devices)
        return Scenario(kind="end_to_end", workload=Workload(_len(row.input_len, "input_len"),
                                                             osl, b),
                        measured_s=e2el, **common)
    raise MappingError(f"unknown metric '{row.metric}'")


def _microbenchmark(row, hardware: HardwareSpec) -> Scenario:  # noqa: ANN001
    unit = " ".join(row.unit.lower().split())
    if row.phase == "gemm":
        factor = _need(unit, _FLOPS_UNITS, row)
        math_format = precision_for(row.weight_dtype).math_format
        if not hardware.supports(math_format):
            raise MappingError(f"{hardware.name} has no {math_format} peak in its sheet")
    else:
        factor = _need(unit, _BANDWIDTH_UNITS, row)
        math_format = ""
    return Scenario(record_id=row.record_id, source=row.source, phase=row.phase, kind=row.phase,
                    model=None, hardware=hardware, workload=Workload(1, 1, 1),
                    precision=Precision(), parallelism=Parallelism(), engine=None,
                    measured_s=1.0 / (row.value * factor), math_format=math_format,
                    metric=row.metric, value=row.value, unit=row.unit)


def _need(unit: str, table: dict[str, float], row) -> float:  # noqa: ANN001
    if unit not in table:
        raise MappingError(f"unit '{row.unit}' does not fit metric '{row.metric}' "
                           f"(expected {' or '.join(table)})")
    return table[unit]


def _len(value: int, column: str) -> int:
    if value <= 0:
        raise MappingError(f"{column} is missing")
    return value


def predicted_seconds(scenario: Scenario, est: Estimate, *, floor: bool = False) -> float:
    """The estimate's time for what the row measured: the expected time, or the
    speed-of-light floor with ``floor``."""
    prefill = est.prefill.sol_time_s if floor else est.ttft_s
    decode = est.decode.sol_time_s if floor else est.tpot_s
    if scenario.kind == "prefill":
        return prefill
    if scenario.kind == "decode":
        return decode
    if scenario.kind == "end_to_end":
        return prefill + (scenario.workload.osl - 1) * decode
    raise ValueError(f"{scenario.kind} rows are not priced by an estimate")


def predicted_value(scenario: Scenario, seconds: float) -> float:
    """A predicted time in the row's own metric and unit (tokens/s, ms, TFLOPS...)."""
    ratio = seconds / scenario.measured_s
    return scenario.value / ratio if scenario.rate else scenario.value * ratio
