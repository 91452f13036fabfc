"""Typed schemas of the TOML files phasewise reads: hardware sheets, link sheets and
calibration profiles.

Each schema is a table of the keys a file may hold, per section, with each value's kind
and range. Checking a document against it names the first problem in one line: a key or
section the schema does not know (a typo must not pass unnoticed, so the nearest known
name is offered), a value of the wrong type, a number that is not finite or is out of its
range, or a document of another kind altogether (a hardware sheet given as a calibration
profile). Adding a key to the sheets means adding one line to ``HARDWARE_SHEET`` here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from phasewise.errors import InputError, nearest_hint


@dataclass(frozen=True, slots=True)
class Field:
    """One key: its kind (``number``, ``whole``, ``text``, ``texts`` or ``flag``), and for
    numbers the inclusive range a real file's value lies in."""

    kind: str
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False  # above zero, not just at least ``minimum``

    def check(self, value: Any, where: str) -> None:
        if self.kind in ("number", "whole"):
            _check_number(value, where, self)
        elif self.kind == "text" and not isinstance(value, str):
            raise InputError(f"{where} must be text in quotes, got {_shown(value)}; fix it.")
        elif self.kind == "text" and len(value) > (self.maximum or MAX_TEXT_CHARS):
            raise InputError(f"{where} is {len(value):,} characters long, past "
                             f"{int(self.maximum or MAX_TEXT_CHARS):,}; shorten it.")
        elif self.kind == "texts" and not (isinstance(value, list)
                                           and all(isinstance(v, str) for v in value)):
            raise InputError(f"{where} must be a list of texts such as [\"a\", \"b\"], got "
                             f"{_shown(value)}; fix it.")
        elif self.kind == "flag" and not isinstance(value, bool):
            raise InputError(f"{where} must be true or false, got {_shown(value)}; fix it.")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_number(value: Any, where: str, spec: Field) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where} must be a number, got {_shown(value)}; fix it.")
    if not math.isfinite(value):
        raise InputError(f"{where} is {value}; give a finite number.")
    if spec.kind == "whole" and value != int(value):
        raise InputError(f"{where} must be a whole number, got {value}; fix it.")
    low = spec.minimum if spec.minimum is not None else -math.inf
    high = spec.maximum if spec.maximum is not None else math.inf
    if value < low or value > high or (spec.positive and value <= 0):
        bounds = (f"above {low:g}" if spec.positive else f"at least {low:g}",
                  f"at most {high:g}" if math.isfinite(high) else "")
        raise InputError(f"{where} = {value:g} is out of range: give a number "
                         f"{' and '.join(b for b in bounds if b)}.")


def _positive(maximum: float) -> Field:
    return Field("number", 0.0, maximum, positive=True)


# Names are short; sources and notes run to a paragraph or two (the longest bundled one
# is under 2,000 characters).
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 16_384
NAME, TEXT, TEXTS = Field("text", maximum=MAX_NAME_CHARS), Field("text"), Field("texts")
SOURCE = {"source": TEXT, "note": TEXT, "notes": TEXT, "date": NAME}

# Bounds: above every device a sheet describes by orders of magnitude (the largest today:
# ~20 PFLOP/s of fp4, 288 GB of HBM at 8 TB/s; CPU hosts with up to 24 TB of memory), so
# only a typo or a unit error lands outside them.
MAX_TFLOPS = 1e6
MAX_CAPACITY_GB = 1e6
MAX_BANDWIDTH_GB_PER_S = 1e6
MAX_LATENCY_US = 1e7
MAX_DEVICES_PER_DOMAIN = 100_000
MAX_POWER_W = 1e6
MAX_USD_PER_HOUR = 1e5

LINK_KEYS = {"name": NAME, "display_name": NAME, "kind": NAME, "scope": NAME, "topology": NAME,
             "bandwidth_gb_per_s": _positive(MAX_BANDWIDTH_GB_PER_S),
             "latency_us": Field("number", 0.0, MAX_LATENCY_US),
             "max_devices": Field("whole", 1, MAX_DEVICES_PER_DOMAIN), **SOURCE}
MAX_PURCHASE_USD = 1e8

# Every key a hardware sheet may hold: top-level keys, then each [section]'s. Keys of
# [compute] are peak rates named <format>_tflops (matched by COMPUTE_KEY) plus its source.
HARDWARE_SHEET: dict[str, Any] = {
    "name": NAME, "display_name": NAME, "vendor": NAME, "device_class": NAME,
    "aliases": TEXTS, "released": Field("whole", 1970, 2200), "notes": TEXT,
    "compute": {"native_formats": TEXTS, **SOURCE},
    "memory": {"capacity_gb": _positive(MAX_CAPACITY_GB),
               "bandwidth_gb_per_s": _positive(MAX_BANDWIDTH_GB_PER_S), "kind": NAME,
               **SOURCE},
    "interconnect": LINK_KEYS,
    "host_link": LINK_KEYS,
    "power": {"tdp_w": _positive(MAX_POWER_W), **SOURCE},
    "price": {"usd_per_hour": Field("number", 0.0, MAX_USD_PER_HOUR),
              "purchase_usd": Field("number", 0.0, MAX_PURCHASE_USD),
              "amortisation_years": _positive(100.0), "basis": TEXT, "provider": TEXT,
              **SOURCE},
    "scale_out": {**LINK_KEYS, "link": TEXT},
    "architecture": {"name": TEXT, "fp16_accumulate_speedup": _positive(100.0),
                     "fp4_block_mma": Field("flag"),
                     "integer_vector_share": Field("number", 0.0, 1.0),
                     "vector_bits": Field("whole", 64, 4096), **SOURCE},
    "apple": {"cpu_cores": Field("whole", 1, 10_000), "gpu_cores": Field("whole", 1, 10_000),
              **SOURCE},
    "cpu": {"cores": Field("whole", 1, 100_000), "base_ghz": _positive(100.0), **SOURCE},
}
COMPUTE_KEY = re.compile(r"^[a-z0-9]+_tflops$")
PEAK_RATE = _positive(MAX_TFLOPS)

LINK_SHEET: dict[str, Any] = LINK_KEYS

# A calibration profile's sections; constants inside are checked by name where the
# profile is read (cost.calibration), against parameters.toml.
CALIBRATION_SECTIONS = ("fit", "global", "class", "arch", "device", "engine")

# A calibrated constant's bounds: a per-step or per-kernel overhead of more than a second
# describes no accelerator; no efficiency, count or byte threshold reaches 1e12.
MAX_OVERHEAD_S = 1.0
MAX_CONSTANT = 1e12


def _constants(doc: dict[str, Any], origin: str) -> list[tuple[str, str, Any]]:
    """(where, name, value) of every constant of a profile's level tables: [global],
    [class.X], [arch.X], [device.X], [engine.X] and its class and backend sub-tables."""
    tables = [(f"{origin} [global]", doc.get("global"))]
    for section in ("class", "arch", "device", "engine"):
        for name, table in (doc.get(section) or {}).items():
            tables.append((f"{origin} [{section}.{name}]", table))
            if section == "engine" and isinstance(table, dict):
                for sub in ("class", "backend"):
                    tables += [(f"{origin} [engine.{name}.{sub}.{k}]", t)
                               for k, t in (table.get(sub) or {}).items()]
    out = []
    for where, table in tables:
        for name, entry in (table or {}).items() if isinstance(table, dict) else ():
            if isinstance(entry, dict) and name in ("class", "backend"):
                continue
            out.append((where, name, entry.get("value") if isinstance(entry, dict) else entry))
    return out


_KIND_MARKS = {
    "hardware sheet": ("compute", "memory"),
    "calibration profile": ("global", "fit"),
}
_HOW_TO_PASS = {"hardware sheet": "--hardware", "calibration profile": "--calibration"}


def _refuse_other_kind(doc: dict[str, Any], origin: str, expected: str) -> None:
    """A file of another kind than ``expected`` (a sheet given as a profile) is named."""
    for kind, marks in _KIND_MARKS.items():
        if kind != expected and any(isinstance(doc.get(m), dict) for m in marks) and \
                not any(isinstance(doc.get(m), dict) for m in _KIND_MARKS[expected]):
            raise InputError(f"{origin}: this is a {kind}, not a {expected}; pass it with "
                             f"{_HOW_TO_PASS[kind]}.")


def _unknown(key: str, known: list[str], where: str) -> InputError:
    return InputError(f"{where}: unknown key '{key}'.{nearest_hint(key, known)} Known: "
                      f"{', '.join(known)}.")


def _check_table(table: dict[str, Any], schema: dict[str, Any], origin: str,
                 section: str = "") -> None:
    where = f"{origin} [{section}]" if section else origin
    for key, value in table.items():
        spec = schema.get(key)
        if spec is None and section == "compute" and COMPUTE_KEY.match(key):
            spec = PEAK_RATE
        if spec is None:
            known = list(schema) + (["<format>_tflops"] if section == "compute" else [])
            raise _unknown(key, known, where)
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise InputError(f"{where}: '{key}' must be a [{key}] section, got "
                                 f"{_shown(value)}; fix it.")
            _check_table(value, spec, origin, key)
        elif isinstance(value, dict):
            raise InputError(f"{where}: '{key}' must be a value, not a section; fix it.")
        else:
            spec.check(value, f"{where} {key}")


def check_hardware_sheet(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    """The sheet, if every key is known and every value of its kind and range."""
    _refuse_other_kind(doc, origin, "hardware sheet")
    _check_table(doc, HARDWARE_SHEET, origin)
    return doc


def check_link_sheet(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    _check_table(doc, LINK_SHEET, origin)
    return doc


def check_calibration(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    """A calibration profile: known sections only, each a table (the constants in them are
    checked where the profile is read)."""
    _refuse_other_kind(doc, origin, "calibration profile")
    for section, value in doc.items():
        if section not in CALIBRATION_SECTIONS:
            raise _unknown(section, list(CALIBRATION_SECTIONS), origin)
        if not isinstance(value, dict):
            raise InputError(f"{origin}: '{section}' must be a [{section}] section; fix it.")
    for where, name, value in _constants(doc, origin):
        limit = MAX_OVERHEAD_S if name.endswith("_s") else MAX_CONSTANT
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or not 0 < value <= limit:
            raise InputError(f"{where} {name} = {_shown(value)}: give a positive finite number "
                             f"of at most {limit:g}.")
    if not any(doc.get(s) for s in CALIBRATION_SECTIONS if s != "fit"):
        raise InputError(f"{origin}: the calibration profile holds no constants; give a file "
                         "`phasewise calibrate` or `phasewise validate --write-calibration` "
                         "wrote.")
    return doc
