"""Calibration profiles: the calibrated cost model's constants, as data with provenance.

A profile holds values at levels: ``global``; ``class:<device class>`` and
``device:<catalog name>`` for device constants; ``engine:<name>`` and
``engine:<name>/class:<device class>`` for engine constants. The most specific level
present wins, then the prior from ``catalog/calibration/parameters.toml``.

What an engine does that the ledger cannot see is not fitted: ``cost.engines`` reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from phasewise.catalog.calibration_data import parameters_document, read_profile_document
from phasewise.errors import InputError, nearest_hint
from phasewise.lower.engines import (
    GENERIC_ENGINE,
    Engine,
    Traits,
    architecture_of,
    backend_of,
    engine_names,
    engines,
    resolve_engine,
    traits_for,
)
from phasewise.specs import HardwareSpec

__all__ = ["Constants", "Engine", "GENERIC_ENGINE", "ParameterDef", "Profile", "Traits",
           "constants_for", "engine_names", "engines", "level_keys",
           "load_profile", "parameter_defs", "profile_from_document", "profile_to_toml",
           "resolve_engine", "traits_for"]

@dataclass(frozen=True, slots=True)
class Constants:
    """Every constant the calibrated model uses for one device under one engine."""

    gemm_fraction: float
    bandwidth_fraction: float
    bytes_half: float
    gemm_efficiency: float
    gemm_intensity_half: float
    attention_efficiency: float
    attention_bandwidth: float
    bandwidth_efficiency: float
    dequant_bandwidth: float
    dequant_compute: float
    matvec_alu_ops: float
    kernel_overhead_s: float
    step_overhead_s: float
    parallel_step_overhead_s: float
    link_latency_factor: float
    link_efficiency: float


PARAMETER_NAMES = tuple(f.name for f in fields(Constants))


@dataclass(frozen=True, slots=True)
class ParameterDef:
    name: str
    level: str  # "device" | "engine"
    prior: float
    spread: float
    by_class: bool
    global_only: bool
    upper: float  # 0: unbounded; the fit works in ln(value)
    unit: str
    meaning: str
    by_backend: bool = False  # an engine constant fitted per compute backend, not per class
    by_arch: bool = False  # a device constant with a level per architecture under the class


@dataclass(frozen=True)
class Profile:
    """Fitted values by level key, each with the record of what it was fitted to."""

    name: str
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    records: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.name, tuple((k, tuple(sorted(v.items())))
                                      for k, v in sorted(self.values.items()))))


def parameter_defs() -> dict[str, ParameterDef]:
    """Each constant's definition (``parameters.toml``), by name."""
    doc = parameters_document()
    return {name: ParameterDef(name, str(d["level"]), float(d["prior"]), float(d["spread"]),
                               bool(d.get("by_class", False)), bool(d.get("global_only", False)),
                               float(d.get("upper", 0.0)), str(d.get("unit", "")),
                               str(d.get("meaning", "")), bool(d.get("by_backend", False)),
                               bool(d.get("by_arch", False)))
            for name, d in doc.items()}


def level_keys(hardware: HardwareSpec, engine: Engine, parameter: ParameterDef) -> list[str]:
    """Level keys from most to least specific for one constant of one device and engine."""
    cls = hardware.device_class
    if parameter.level == "device":
        arch = architecture_of(hardware) if parameter.by_arch else ""
        keys = [] if parameter.global_only else (
            [f"device:{hardware.name}"] + ([f"arch:{arch}"] if arch else []) + [f"class:{cls}"])
    elif engine.fitted_name == GENERIC_ENGINE:
        keys = []
    else:
        name = engine.fitted_name
        keys = ([f"engine:{name}/backend:{backend_of(hardware)}"] if parameter.by_backend
                else [f"engine:{name}/class:{cls}"] if parameter.by_class else []) + \
            [f"engine:{name}"]
    return keys + ["global"]


@dataclass(frozen=True, slots=True)
class ConstantSource:
    """Where one constant of one device under one engine comes from: the profile level
    that holds it (``device:h100-sxm``, ``class:datacenter_gpu``, ``engine:vllm/class:...``,
    ``engine:vllm``, ``global``) or ``prior``, and what that level was fitted to."""

    name: str
    value: float
    unit: str
    level: str
    rows: int = 0  # rows the level was fitted to (0: the prior, or not recorded)
    rms_log_residual: float | None = None  # the fit's residual on those rows


def constant_sources(profile: Profile, hardware: HardwareSpec,
                     engine: Engine) -> tuple[ConstantSource, ...]:
    """Each constant as ``constants_for`` resolves it, with the level it came from."""
    sources = []
    for name, parameter in parameter_defs().items():
        level = next((key for key in level_keys(hardware, engine, parameter)
                      if name in profile.values.get(key, {})), None)
        if level is None:
            sources.append(ConstantSource(name, parameter.prior, parameter.unit, "prior"))
            continue
        record = profile.records.get(level, {}).get(name, {})
        residual = record.get("rms_log_residual")
        sources.append(ConstantSource(
            name, profile.values[level][name], parameter.unit, level,
            int(record.get("rows", 0) or 0),
            float(residual) if isinstance(residual, (int, float)) else None))
    return tuple(sources)


def constants_for(profile: Profile, hardware: HardwareSpec, engine: Engine) -> Constants:
    """Each constant from the most specific level the profile holds, else its prior."""
    return Constants(**{c.name: c.value for c in constant_sources(profile, hardware, engine)})


def prior_profile() -> Profile:
    return Profile(name="prior")


def profile_from_document(doc: Mapping[str, Any], origin: str) -> Profile:
    """Read the nested TOML layout ([global], [class.X], [arch.X], [device.X], [engine.X],
    [engine.X.class.Y]) into level keys, checking each constant name."""
    known = parameter_defs()
    values: dict[str, dict[str, float]] = {}
    records: dict[str, dict[str, dict[str, Any]]] = {}

    def take(key: str, table: dict[str, Any]) -> None:
        for name, entry in table.items():
            if isinstance(entry, dict) and name in ("class", "backend"):
                continue
            if name not in known:
                raise InputError(f"{origin}: [{key}] has unknown constant '{name}'."
                                 f"{nearest_hint(name, list(known))} Known: {', '.join(known)}.")
            record = entry if isinstance(entry, dict) else {"value": entry}
            value = record.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0 \
                    or not math.isfinite(value):
                raise InputError(f"{origin}: [{key}] {name} needs a positive number value; fix it.")
            values.setdefault(key, {})[name] = float(value)
            records.setdefault(key, {})[name] = record

    take("global", doc.get("global", {}))
    for section, prefix in (("class", "class:"), ("arch", "arch:"), ("device", "device:")):
        for name, table in doc.get(section, {}).items():
            take(prefix + name, table)
    for name, table in doc.get("engine", {}).items():
        take(f"engine:{name}", table)
        for cls, sub in table.get("class", {}).items():
            take(f"engine:{name}/class:{cls}", sub)
        for backend, sub in table.get("backend", {}).items():
            take(f"engine:{name}/backend:{backend}", sub)
    return Profile(name=str(doc.get("fit", {}).get("name", Path(origin).stem)), values=values,
                   records=records, fit=dict(doc.get("fit", {})))


def load_profile(path: str | None = None) -> Profile:
    """The bundled default profile, or a user's calibration TOML. Parsing is memoised per
    file version (path, size, modification time), so an estimate does not re-read the
    profile and an edited file is read again."""
    stamp = None
    if path is not None:
        try:
            info = Path(path).stat()
            stamp = (info.st_size, info.st_mtime_ns)
        except OSError:
            stamp = None  # read_profile_document names the problem
    return _load_profile(path, stamp)


@lru_cache(maxsize=16)
def _load_profile(path: str | None, stamp: tuple[int, int] | None) -> Profile:
    document, origin = read_profile_document(path)
    if document is None:
        return prior_profile()
    return profile_from_document(document, origin)


def profile_to_toml(profile: Profile) -> str:
    """The nested layout profile_from_document reads: a table per level, one per constant
    holding its value and the record of what it was fitted to."""
    import tomli_w

    document: dict[str, Any] = {}
    if profile.fit:
        document["fit"] = {k: _rounded(v) for k, v in profile.fit.items()}
    for key in sorted(profile.values, key=_level_order):
        table = _level_table(document, key)
        for name in sorted(profile.values[key]):
            record = dict(profile.records.get(key, {}).get(name, {}))
            record.pop("value", None)
            table[name] = {"value": _rounded(profile.values[key][name]),
                           **{k: _rounded(v) for k, v in record.items()}}
    return PROFILE_HEADER + tomli_w.dumps(document)


PROFILE_HEADER = ("# Calibrated cost model constants, fitted by `phasewise validate "
                  "--write-calibration`.\n# Each value records the measurements it was fitted "
                  "to and the residual of those rows.\n\n")
# Significant digits a written constant keeps: far below any fit's standard error.
WRITTEN_DIGITS = 6


def _level_order(key: str) -> tuple[int, str]:
    order = ("global", "class:", "arch:", "device:", "engine:")
    return next(i for i, p in enumerate(order) if key.startswith(p)), key


def _level_table(document: dict[str, Any], key: str) -> dict[str, Any]:
    """The nested table of a level key: ``global``, ``class.X``, ``engine.X.class.Y``."""
    if key == "global":
        path = ["global"]
    elif key.startswith("engine:"):
        engine, _, rest = key.removeprefix("engine:").partition("/")
        kind, _, name = rest.partition(":")
        path = ["engine", engine] + ([kind, name] if rest else [])
    else:
        kind, _, name = key.partition(":")
        path = [kind, name]
    table = document
    for part in path:
        table = table.setdefault(part, {})
    return table


def _rounded(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{WRITTEN_DIGITS}g}")
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value
