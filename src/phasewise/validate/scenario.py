"""From a measurement row to the scenario phasewise prices, and back to the row's metric.

Device and model names are resolved through the catalogs' aliases after peeling off what
sources add (vendor, memory size, form-factor remarks in parentheses); weight formats
through the number-format table (GGUF types are weight-only, computed in fp16, as
llama.cpp does); the engine, with its variants, from the row's ``engine`` column (a name as
``--engine`` takes it), or for a row without one from the software its text names
(``catalog.software_text``).

Every phase metric becomes a time in seconds, so errors read the same way everywhere:
``error = predicted time / measured time - 1`` (positive: phasewise expects it slower).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from phasewise.catalog import load_hardware, load_model, model_index
from phasewise.catalog.software_text import engine_from_software
from phasewise.cost.calibration import Engine, engine_names, resolve_engine
from phasewise.errors import InputError
from phasewise.estimate.types import Estimate
from phasewise.lower import backend_of
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
# "30-core M2 Max": the chip's sheet (its GPU variants share one, see the sheets' aliases)
_CORES = re.compile(r"\b\d+[- ]core(?:\s+gpu)?\b", re.I)

# llama-bench names a model by its GGUF architecture and size class ("llama 7B",
# "qwen3moe 30B.A3B") and prints the parameter count beside it; several checkpoints share a
# label (LLaMA-1/Llama-2/CodeLlama 7B and Mistral 7B are all "llama 7B"), so the count decides.
_GGUF_LABEL = re.compile(r"^(?P<arch>[a-z][a-z0-9]*)\s+"
                         r"(?P<size>(?:\d+x)?\d+(?:\.\d+)?[bm](?:\.a\d+(?:\.\d+)?b)?|\?b)$", re.I)
# GGUF architectures whose catalog family (the HF model_type) has another name: llama.cpp's
# converter (convert_hf_to_gguf.py) writes Mistral and Mixtral as "llama", DeepSeek V2/V3 as
# "deepseek2"; the rest match once underscores are dropped (qwen3moe = qwen3_moe).
_GGUF_ARCH_FAMILIES = {"llama": ("llama", "mistral", "mixtral"),
                       "deepseek2": ("deepseekv2", "deepseekv3")}
# Words checkpoints of one network add to its name, and release tags at its end.
_CHECKPOINT_WORDS = re.compile(r"[-_ ](?:instruct|chat|it|hf|base|pt|gguf|awq|gptq|fp8|fp16|bf16"
                               r"|int4|int8|w4a16|w8a8|dynamic|nvfp4|mlx|\d+bit)(?=$|[-_ ])",
                               re.I)
# A four-digit release tag (Qwen3-30B-A3B-Instruct-2507) keeps the network; a version
# ("v0.3") may not (Mistral-7B v0.2 dropped v0.1's sliding window), so it stays.
_RELEASE_TAG = re.compile(r"[-_ ]\d{4}$")
# llama-bench prints 2 decimals (70.55 B); the catalog's published counts are rounded to
# 0.1 B (70.6): 1.5% takes both and keeps neighbours apart (Llama-2 70B is 69.0, 2.2% off).
PARAMS_TOLERANCE = 0.015
# llama-bench's type descriptions ("Q4_K - Medium", "mostly Q4_0" in 2023 builds) name the
# GGUF file types Q4_K_M and Q4_0.
_GGUF_TYPE = re.compile(r"^(?:mostly\s+)?(?P<base>[a-z0-9_]+?)"
                        r"(?:\s*-\s*(?P<size>small|medium|large))?$", re.I)

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
    no_cores = " ".join(_CORES.sub(" ", no_memory).split())
    return list(dict.fromkeys(c for c in (name, plain, no_vendor, no_memory, no_gpu, no_sxm,
                                          no_cores) if c))


def resolve_model(name: str, params_b: float | None = None) -> ModelSpec:
    """A catalog model for a source's model name ('Llama-2 70B', 'Mixtral 8x7B (MoE)'), or
    for a llama-bench label ('llama 7B', 'qwen3moe 30B.A3B') with its parameter count."""
    plain = " ".join(_PARENS.sub(" ", name).split())
    label = _GGUF_LABEL.match(plain)
    if label and params_b:  # the count decides between the checkpoints a label covers
        return _model_by_label(label["arch"], params_b, name)
    for candidate in _model_candidates(name, plain):
        try:
            return load_model(candidate)
        except InputError:
            continue
    raise MappingError(f"unknown model '{name}': no catalog model or alias matches; add an "
                       "alias in catalog/models/index.toml")


def _model_candidates(name: str, plain: str) -> list[str]:
    """The name as written, then without the organisation of a repo id ('meta-llama/...')
    and without the words checkpoints of one network add to it: the tuning ('Instruct',
    'Chat', '-it'), the packaging or quantization of the weights ('GGUF', 'AWQ', 'FP8'; the
    row's weight_dtype says the format) and a four-digit release tag ('2507'), which leave
    the shapes that price a step as they are."""
    bare = plain.rsplit("/", 1)[-1] if "/" in plain and " " not in plain else plain
    stripped = bare
    for _ in range(4):
        shorter = _RELEASE_TAG.sub("", _CHECKPOINT_WORDS.sub("", stripped)).strip(" -_")
        if shorter == stripped:
            break
        stripped = shorter
    return [c for c in dict.fromkeys((name, plain, bare, stripped)) if c]


def _model_by_label(arch: str, params_b: float, name: str) -> ModelSpec:
    """The catalog model of a GGUF architecture (its catalog family) whose published
    parameter count is within PARAMS_TOLERANCE of the row's; several only if they are the
    same network (Llama 3 and 3.1 8B), else the row is ambiguous."""
    key = re.sub(r"[^a-z0-9]", "", arch.lower())
    families = _GGUF_ARCH_FAMILIES.get(key, (key,))
    near = sorted((abs(_language_model_b(entry) / params_b - 1), model)
                  for model, entry in model_index().items()
                  if re.sub(r"[^a-z0-9]", "", str(entry.get("family", "")).lower()) in families
                  and entry.get("params_total_b")
                  and abs(_language_model_b(entry) / params_b - 1) <= PARAMS_TOLERANCE)
    if not near:
        raise MappingError(f"unknown model '{name}' ({params_b:g} B parameters): no catalog "
                           f"model of family '{arch}' has that many parameters")
    specs = [load_model(model) for _, model in near]
    if len({_network(spec) for spec in specs}) > 1:
        raise MappingError(f"ambiguous model '{name}' ({params_b:g} B parameters): "
                           f"{', '.join(spec.name for spec in specs)} differ; name the model")
    # One network under several checkpoints (LLaMA-1 and Llama-2 7B, Qwen2 and Qwen2.5 7B):
    # the catalog's first entry names it, so a row keeps its name as checkpoints are added.
    order = list(model_index())
    return min(specs, key=lambda spec: order.index(spec.name))


def _language_model_b(entry: dict) -> float:
    """A catalog entry's parameters without its vision tower: what llama-bench counts (a
    multimodal GGUF keeps the vision encoder in a separate mmproj file)."""
    return float(entry["params_total_b"]) - float(entry.get("params_vision_b", 0.0))


def _network(spec: ModelSpec) -> tuple:
    """What prices a step: the shapes, not the name or the context limit."""
    return (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads,
            spec.head_dim, spec.intermediate_size, spec.vocab_size, spec.tie_word_embeddings,
            spec.num_experts, spec.experts_per_token, spec.moe_intermediate_size)


def precision_for(weight_dtype: str) -> Precision:
    """Weights as stated; weight-only formats (GGUF types, int4) compute and cache in fp16
    (llama.cpp's defaults), the rest compute in their own format with a 16-bit KV cache:
    the rows do not state the KV format, and engines keep the model's 16-bit type unless
    told otherwise (TensorRT-LLM's v0.9 benchmark suite: --kv-dtype defaults to float16,
    also with --quantization FP8; vLLM: kv_cache_dtype 'auto' is the model's type)."""
    text = " ".join(_PARENS.sub(" ", weight_dtype).split())
    try:
        fmt = number_format(_gguf_type(text))
    except InputError:
        raise MappingError(f"unknown weight format '{weight_dtype}'") from None
    if fmt.math_format is None:
        return Precision(fmt.name, "fp16", "fp16")
    kv = fmt.name if fmt.name in ("bf16", "fp16") else "fp16"
    return Precision(fmt.name, fmt.name, kv)


def _gguf_type(text: str) -> str:
    """'Q4_K - Medium' -> 'Q4_K_M', 'mostly Q8_0' -> 'Q8_0'; other names unchanged."""
    match = _GGUF_TYPE.match(text)
    if not match or not (match["size"] or text.lower().startswith("mostly")):
        return text
    base = match["base"].upper()
    return f"{base}_{match['size'][0].upper()}" if match["size"] else base


# How sources say how a model is split over several devices when they give no TP/PP
# degree. llama.cpp's --split-mode layer (its default, "-sm layer") gives each device a
# contiguous block of layers and runs them one after another: pipeline stages; "-sm row"
# splits each weight matrix's rows over the devices: tensor parallelism.
_LAYER_SPLIT = re.compile(r"layer[- ]?split|split[- ]?mode[ =:]*layer|-sm\s+layer|pipeline",
                          re.I)
_ROW_SPLIT = re.compile(r"row[- ]?split|split[- ]?mode[ =:]*row|-sm\s+row|tensor[- ]parallel",
                        re.I)
_UNSPLIT = ("", "single device", "single gpu", "none")
_UNSTATED = ("", "multi-gpu", "multi gpu", "multiple gpus")


def parallelism_for(text: str, devices: int, engine: Engine | None = None) -> Parallelism:
    """'TP8', 'TP2 PP2', 'single device', 'layer split' -> Parallelism; checked against
    the device count. A row on several devices that names no split takes its engine's
    default: llama.cpp splits by layers (--split-mode layer, pipeline stages run in
    turn), the serving engines by tensor parallelism (their multi-GPU flag, -tp)."""
    lowered = " ".join(text.lower().split())
    tp = re.search(r"tp\s*=?\s*(\d+)", lowered)
    pp = re.search(r"pp\s*=?\s*(\d+)", lowered)
    if not (tp or pp) and devices > 1:
        if _LAYER_SPLIT.search(lowered):
            return Parallelism(1, devices)
        if _ROW_SPLIT.search(lowered):
            return Parallelism(devices, 1)
        if lowered in _UNSTATED or re.fullmatch(r"\d+\s*(?:x\s*)?gpus?", lowered):
            layered = engine is not None and engine.fitted_name == "llama.cpp"
            return Parallelism(1, devices) if layered else Parallelism(devices, 1)
    if not (tp or pp) and lowered not in _UNSPLIT:
        raise MappingError(f"unknown parallelism '{text}'; write TP<n> and/or PP<n>, "
                           "'layer split' or 'row split'")
    par = Parallelism(int(tp.group(1)) if tp else 1, int(pp.group(1)) if pp else 1)
    if devices and par.devices != devices:
        raise MappingError(f"parallelism '{text}' uses {par.devices} devices but the row says "
                           f"{devices}")
    return par


def engine_for(row, hardware: HardwareSpec) -> Engine:  # noqa: ANN001 - a Measurement
    """The engine the row states in its ``engine`` column ('llama.cpp+flash-attn+ub2048'),
    or for a row without one the engine, variants and micro-batch its software text names
    on the device's backend (``catalog.software_text``)."""
    name = row.engine or engine_from_software(row.software_stack, backend_of(hardware))
    if not name:
        raise MappingError(f"unknown engine in software_stack '{row.software_stack}'; add an "
                           f"engine column naming one of {', '.join(engine_names())}")
    try:
        return resolve_engine(name)
    except InputError as err:
        raise MappingError(str(err)) from None


def scenario_for(row) -> Scenario:  # noqa: ANN001 - a validate.measurements.Measurement
    """The scenario a measurement row describes, or a MappingError naming what is unknown."""
    hardware = resolve_device(row.hardware)
    if row.phase in ("gemm", "memory_bw"):
        return _microbenchmark(row, hardware)
    model = resolve_model(row.model, row.model_params_b)
    precision = precision_for(row.weight_dtype)
    engine = engine_for(row, hardware)
    par = parallelism_for(row.parallelism, row.num_accelerators, engine)
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


# Benchmark tools whose every token is the same token id, as a row's software names them.
# llama-batched-bench (batched-bench before the llama- prefix) adds token 0 at every
# position of every sequence, prompt and generation alike (batched-bench.cpp:
# common_batch_add(batch, 0, pos, {seq}, ...)), so its B sequences are copies of one
# another and its prompt is one token repeated.
SAME_TOKEN_TOOLS = ("batched-bench",)
UNSCORABLE_SAME_TOKEN = (
    "a MoE model under llama-batched-bench, which feeds token id 0 at every position of "
    "every sequence: its sequences are copies of one another and its prompt one token "
    "repeated, so they route to the same experts but for rounding noise, and the experts a "
    "step reads are neither uniform routing's nor one token's (one sequence's decode is "
    "scored)")


def unscorable(scenario: Scenario, software: str) -> str:
    """Why a row that maps still measures a workload the ledger cannot describe ("" if it
    can). Dense layers cost the same whatever the tokens are; routed experts do not. A MoE
    step over copies of one sequence, or a prompt of one repeated token, routes its tokens
    to the same experts but for rounding noise, so the experts it reads are neither the
    ledger's uniform routing nor one token's k: how far routing concentrates is not in the
    row. One sequence's decode step (one token, k experts) is unaffected."""
    model = scenario.model
    if model is None or not model.is_moe:
        return ""
    lowered = software.lower()
    if not any(tool in lowered for tool in SAME_TOKEN_TOOLS):
        return ""
    if scenario.kind == "decode" and scenario.workload.batch_size == 1:
        return ""
    return UNSCORABLE_SAME_TOKEN


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
