"""Published measurements as rows: read a CSV, keep its source columns, name every bad row.

The bundled file (``catalog/measurements/*.csv``) and a user's file share one layout:
``record_id, category, phase, source_name, source_url, source_locator, hardware,
num_accelerators, model, weight_dtype, software_stack, parallelism,
batch_or_concurrency, input_len, output_len, kv_depth, metric, value, unit`` plus
optional provenance and note columns. A row that cannot be read is reported, never
dropped silently, and the rest are kept.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from phasewise.errors import InputError

MEASUREMENTS_DIR = Path(__file__).resolve().parent.parent / "catalog" / "measurements"

REQUIRED_COLUMNS = ("record_id", "phase", "source_name", "hardware", "model", "weight_dtype",
                    "software_stack", "parallelism", "batch_or_concurrency", "input_len",
                    "output_len", "metric", "value", "unit")
OPTIONAL_COLUMNS = ("category", "source_url", "source_locator", "provenance",
                    "num_accelerators", "hw_specs_as_stated", "model_params_b", "kv_depth",
                    "peak_ref_value", "peak_ref_unit", "fraction_of_peak", "peak_ref_source",
                    "notes", "exclude")


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
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise InputError(f"measurements file {path}: cannot read it ({err.strerror}).") from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"measurements file {path}: missing column(s) {', '.join(missing)}; "
                         f"the header needs {', '.join(REQUIRED_COLUMNS)}.")
    unknown = tuple(c for c in header if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS)
    rows, problems, sources = [], [], {}
    for line, raw in enumerate(reader, start=2):
        try:
            row = _measurement(raw, line)
        except ValueError as err:
            problems.append(Problem(line, (raw.get("record_id") or "").strip(), str(err)))
            continue
        rows.append(row)
        sources.setdefault(row.source, row.source_url)
    return MeasurementFile(str(path), tuple(rows), tuple(problems), unknown, sources)


def _measurement(raw: dict[str, str | None], line: int) -> Measurement:
    def text(column: str) -> str:
        return (raw.get(column) or "").strip()

    record_id = text("record_id")
    if not record_id:
        raise ValueError("no record_id")
    for column in ("source_name", "hardware", "metric", "unit", "phase"):
        if not text(column):
            raise ValueError(f"empty {column}")
    value = _number(text("value"), "value")
    if value is None or value <= 0 or not math.isfinite(value):
        raise ValueError(f"value '{text('value')}' is not a positive number")
    return Measurement(
        record_id=record_id, source=text("source_name"), phase=text("phase").lower(),
        hardware=text("hardware"), model=text("model"), weight_dtype=text("weight_dtype"),
        software_stack=text("software_stack"), parallelism=text("parallelism"),
        batch=_count(text("batch_or_concurrency"), "batch_or_concurrency", default=1),
        input_len=_count(text("input_len"), "input_len", default=0),
        output_len=_count(text("output_len"), "output_len", default=0),
        kv_depth=_count(text("kv_depth"), "kv_depth", default=0),
        num_accelerators=_count(text("num_accelerators"), "num_accelerators", default=1),
        metric=text("metric"), value=value, unit=text("unit"), source_url=text("source_url"),
        source_locator=text("source_locator"), notes=text("notes"), exclude=text("exclude"),
        line=line, model_params_b=_number(text("model_params_b"), "model_params_b"))


def _number(text: str, column: str) -> float | None:
    if not text:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"{column} '{text}' is not a number") from None


def _count(text: str, column: str, *, default: int) -> int:
    number = _number(text, column)
    if number is None:
        return default
    if number < 0 or number != int(number):
        raise ValueError(f"{column} '{text}' is not a whole number")
    return int(number)
