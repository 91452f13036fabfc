"""Published measurements as rows: read a CSV, keep its source columns, name every bad row.

The bundled file (``catalog/measurements/*.csv``) and a user's file share one layout:
``record_id, category, phase, source_name, source_url, source_locator, hardware,
num_accelerators, model, weight_dtype, software_stack, engine, parallelism,
batch_or_concurrency, input_len, output_len, kv_depth, metric, value, unit`` plus
optional provenance and note columns. ``engine`` names the engine with its variants and
micro-batch as ``--engine`` takes it (``llama.cpp+flash-attn+ub2048``); a row that leaves
it empty has it read from its ``software_stack`` text. A row that cannot be read is reported, never
dropped silently, and the rest are kept.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from phasewise.errors import InputError
from phasewise.files import read_text

MEASUREMENTS_DIR = Path(__file__).resolve().parent.parent / "catalog" / "measurements"

REQUIRED_COLUMNS = ("record_id", "phase", "source_name", "hardware", "model", "weight_dtype",
                    "software_stack", "parallelism", "batch_or_concurrency", "input_len",
                    "output_len", "metric", "value", "unit")
OPTIONAL_COLUMNS = ("engine", "category", "source_url", "source_locator", "provenance",
                    "num_accelerators", "hw_specs_as_stated", "model_params_b", "kv_depth",
                    "peak_ref_value", "peak_ref_unit", "fraction_of_peak", "peak_ref_source",
                    "notes", "exclude", "load", "request_rate", "num_prompts")


# The phases a row may measure: the model's two phases, a whole request, and the device
# microbenchmarks (best matmul rate, streaming bandwidth).
PHASES = ("prefill", "decode", "end_to_end", "gemm", "memory_bw")
# Longer than any field of the bundled files (the longest, a source locator, is ~1,600
# characters); a longer one is not a measurement's text.
MAX_FIELD_CHARS = 16_384
# Past this no batch, length or device count of a published run lies.
MAX_COUNT = 100_000_000

# How a serving benchmark loads the server: a closed loop of N clients ("concurrency"),
# Poisson arrivals at a rate ("rate", and MLPerf's Server scenario at its target rate), or
# every request queued at once with the engine choosing the batch (MLPerf Offline,
# trtllm-bench's and vLLM's offline "max throughput" runs). Empty: a static batch or a
# single stream, priced by the estimate.
LOADS = ("concurrency", "rate", "mlperf_server", "mlperf_offline", "max_throughput")
RATE_LOADS = ("rate", "mlperf_server")
# batch_or_concurrency as sources write a load in place of a number.
_LOAD_WORDS = {"max throughput": "max_throughput", "max-throughput": "max_throughput",
               "max": "max_throughput", "maximum throughput": "max_throughput",
               "saturation": "max_throughput", "offline": "mlperf_offline",
               "server": "mlperf_server"}


@dataclass(frozen=True, slots=True)
class Measurement:
    """One published figure, with the columns that say where it comes from."""

    record_id: str
    source: str
    phase: str
    hardware: str
    model: str
    weight_dtype: str
    software_stack: str
    parallelism: str
    batch: int
    input_len: int
    output_len: int
    kv_depth: int
    num_accelerators: int
    metric: str
    value: float
    unit: str
    source_url: str = ""
    source_locator: str = ""
    notes: str = ""
    exclude: str = ""  # why the row is left out of fits and scores (the source's own doubt)
    line: int = 0
    model_params_b: float | None = None  # as the source prints it (llama-bench's params column)
    load: str = ""  # one of LOADS for a serving run; "" for a static batch or one stream
    request_rate: float = 0.0  # requests per second, for a rate or an MLPerf Server run
    num_prompts: int = 0  # requests the benchmark sent (0: not stated)
    engine: str = ""  # the engine, variants and micro-batch as --engine takes them


@dataclass(frozen=True, slots=True)
class Problem:
    """A row that was skipped, and why."""

    line: int
    record_id: str
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" ({self.record_id})" if self.record_id else "")
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class MeasurementFile:
    path: str
    rows: tuple[Measurement, ...]
    problems: tuple[Problem, ...] = ()
    unknown_columns: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)  # source name -> url


def bundled_paths() -> list[Path]:
    return sorted(MEASUREMENTS_DIR.glob("*.csv"))


def load_bundled() -> list[MeasurementFile]:
    return [load_measurements(p) for p in bundled_paths()]


def load_measurements(path: str | Path) -> MeasurementFile:
    """Every readable row of a measurements CSV, and a Problem for each row that is not."""
    path = Path(path)
    text = read_text(path, what="measurements file")
    reader = csv.DictReader(text.splitlines())
    try:
        header = reader.fieldnames or []
    except csv.Error as err:
        raise InputError(f"measurements file {path}: the header is not CSV ({err}).") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"measurements file {path}: missing column(s) {', '.join(missing)}; "
                         f"the header needs {', '.join(REQUIRED_COLUMNS)}.")
    unknown = tuple(c for c in header if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
    rows, problems, sources, first_line = [], [], {}, {}
    for line, raw in _rows(reader, problems):
        record_id = (raw.get("record_id") or "").strip()
        try:
            row = _measurement(raw, line)
            if record_id in first_line:
                raise ValueError(f"duplicate record_id (first at line {first_line[record_id]})")
        except ValueError as err:
            problems.append(Problem(line, record_id[:MAX_FIELD_CHARS], str(err)))
            continue
        first_line[record_id] = line
        rows.append(row)
        sources.setdefault(row.source, row.source_url)
    if not rows and not problems:
        raise InputError(f"measurements file {path}: a header and no rows; add one row per "
                         "published figure.")
    return MeasurementFile(str(path), tuple(rows), tuple(problems), unknown, sources)


def _rows(reader: csv.DictReader, problems: list[Problem]) -> Iterator[tuple[int, dict]]:
    """(line, row) for each CSV row; a row the csv module cannot read (a field over its
    size limit, a NUL byte) becomes a Problem and the rest are read on."""
    while True:
        before = reader.line_num
        try:
            raw = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            problems.append(Problem(before + 1, "", f"not readable as CSV ({err})"))
            continue
        yield reader.line_num, raw


def _measurement(raw: dict[str, str | None], line: int) -> Measurement:
    def text(column: str) -> str:
        return (raw.get(column) or "").strip()

    too_long = [c for c, v in raw.items() if c and v and len(v) > MAX_FIELD_CHARS]
    if too_long:
        raise ValueError(f"{too_long[0]} is longer than {MAX_FIELD_CHARS:,} characters")
    record_id = text("record_id")
    if not record_id:
        raise ValueError("no record_id")
    for column in ("source_name", "hardware", "metric", "unit", "phase"):
        if not text(column):
            raise ValueError(f"empty {column}")
    if text("phase").lower() not in PHASES:
        raise ValueError(f"unknown phase '{text('phase')}'; one of {', '.join(PHASES)}")
    value = _number(text("value"), "value")
    if value is None or value <= 0 or not math.isfinite(value):
        raise ValueError(f"value '{text('value')}' is not a positive number")
    load, batch_text = _load(text("load"), text("batch_or_concurrency"))
    rate = _number(text("request_rate"), "request_rate") or 0.0
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"request_rate '{text('request_rate')}' is not a positive number")
    if load in RATE_LOADS and not rate > 0:
        raise ValueError(f"a '{load}' row needs a request_rate (requests per second)")
    return Measurement(
        record_id=record_id, source=text("source_name"), phase=text("phase").lower(),
        hardware=text("hardware"), model=text("model"), weight_dtype=text("weight_dtype"),
        software_stack=text("software_stack"), parallelism=text("parallelism"),
        batch=_count(batch_text, "batch_or_concurrency", default=1),
        input_len=_count(text("input_len"), "input_len", default=0),
        output_len=_count(text("output_len"), "output_len", default=0),
        kv_depth=_count(text("kv_depth"), "kv_depth", default=0),
        num_accelerators=_count(text("num_accelerators"), "num_accelerators", default=1,
                                minimum=1),
        metric=text("metric"), value=value, unit=text("unit"), source_url=text("source_url"),
        source_locator=text("source_locator"), notes=text("notes"), exclude=text("exclude"),
        line=line, model_params_b=_number(text("model_params_b"), "model_params_b"),
        load=load, request_rate=rate,
        num_prompts=_count(text("num_prompts"), "num_prompts", default=0),
        engine=text("engine"))


def _load(load: str, batch: str) -> tuple[str, str]:
    """The row's load and the count left in batch_or_concurrency: the load column as
    given, or a load the batch column names in words ("max throughput", "Offline")."""
    load = load.lower().replace("-", "_").replace(" ", "_")
    if load and load not in LOADS:
        raise ValueError(f"load '{load}' is not one of {', '.join(LOADS)}")
    words = " ".join(batch.lower().split())
    if words in _LOAD_WORDS:
        named = _LOAD_WORDS[words]
        if load and load != named:
            raise ValueError(f"batch_or_concurrency '{batch}' says {named} but load says {load}")
        return named, ""
    if not batch:
        if load == "concurrency":
            raise ValueError("a concurrency row needs the number of clients in "
                             "batch_or_concurrency")
        return load, ""
    try:
        _number(batch, "batch_or_concurrency")
    except ValueError:
        raise ValueError(f"batch_or_concurrency '{batch}' is neither a number nor a load; write "
                         "the batch or concurrency, or one of 'max throughput', 'Offline', "
                         f"'Server' (or set load to one of {', '.join(LOADS)})") from None
    return load, batch


def _number(text: str, column: str) -> float | None:
    if not text:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"{column} '{text}' is not a number") from None


def _count(text: str, column: str, *, default: int, minimum: int = 0) -> int:
    number = _number(text, column)
    if number is None:
        return default
    if not math.isfinite(number) or number != int(number) or number < 0:
        raise ValueError(f"{column} '{text}' is not a whole number")
    if number < minimum:
        raise ValueError(f"{column} {text} is below {minimum}")
    if number > MAX_COUNT:
        raise ValueError(f"{column} {text} is beyond any real measurement (limit {MAX_COUNT:,})")
    return int(number)
