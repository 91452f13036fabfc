"""The hardware catalog: TOML sheets in human units, each number with its source."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from phasewise.catalog._names import normalise
from phasewise.errors import InputError, nearest_hint
from phasewise.files import read_toml
from phasewise.local import LOCAL_DEVICE_NAME, local_hardware_path
from phasewise.specs import HardwareSpec, Link

HARDWARE_DIR = Path(__file__).parent / "hardware"
LINKS_DIR = Path(__file__).parent / "links"

TERA, GIGA, MICRO = 1e12, 1e9, 1e-6
FLOPS_SUFFIX = "_tflops"


def hardware_names() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.toml"))


def link_names() -> list[str]:
    return sorted(p.stem for p in LINKS_DIR.glob("*.toml"))


def _need(table: dict[str, Any], key: str, where: str, origin: str, hint: str) -> Any:
    value = table.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise InputError(f"{origin}: [{where}] needs a positive number {key} ({hint}); add it.")
    return value


def _link(table: dict[str, Any] | None, where: str, origin: str) -> Link | None:
    if not table:
        return None
    bandwidth = _need(table, "bandwidth_gb_per_s", where, origin, "GB/s per direction")
    return Link(name=str(table.get("name", where)), bandwidth_bytes_per_s=bandwidth * GIGA,
                latency_s=float(table.get("latency_us", 0.0)) * MICRO,
                kind=str(table.get("kind", "")), max_devices=int(table.get("max_devices", 1)),
                source=str(table.get("source", "")))


def hardware_from_sheet(sheet: dict[str, Any], origin: str) -> HardwareSpec:
    """Convert a sheet to SI and check the fields the cost model needs are there."""
    compute = sheet.get("compute") or {}
    peaks = {key.removesuffix(FLOPS_SUFFIX): float(value) * TERA
             for key, value in compute.items() if key.endswith(FLOPS_SUFFIX)}
    if not peaks:
        raise InputError(f"{origin}: [compute] needs at least one peak rate such as "
                         "bf16_tflops = 989.4; add it.")
    memory = sheet.get("memory") or {}
    capacity = _need(memory, "capacity_gb", "memory", origin, "GB")
    bandwidth = _need(memory, "bandwidth_gb_per_s", "memory", origin, "GB/s")
    if "name" not in sheet:
        raise InputError(f"{origin}: the sheet needs a top-level name = \"...\"; add it.")
    sources = {section: str(table["source"]) for section, table in sheet.items()
               if isinstance(table, dict) and "source" in table}
    price = (sheet.get("price") or {}).get("usd_per_hour")
    design = sheet.get("architecture") or {}
    return HardwareSpec(
        name=str(sheet["name"]), display_name=str(sheet.get("display_name", sheet["name"])),
        device_class=str(sheet.get("device_class", "datacenter_gpu")), peak_flops_per_s=peaks,
        memory_bytes=capacity * GIGA, memory_bandwidth_bytes_per_s=bandwidth * GIGA,
        interconnect=_link(sheet.get("interconnect"), "interconnect", origin),
        host_link=_link(sheet.get("host_link"), "host_link", origin),
        tdp_w=(sheet.get("power") or {}).get("tdp_w"),
        price_usd_per_hour=float(price) if price is not None else None,
        vendor=str(sheet.get("vendor", "")), aliases=tuple(sheet.get("aliases", ())),
        sources=sources, notes=str(sheet.get("notes", "")),
        architecture=str(design.get("name", "")),
        fp16_accumulate_speedup=_ratio(design, "fp16_accumulate_speedup", origin),
        integer_vector_share=_ratio(design, "integer_vector_share", origin),
        fp4_block_mma=bool(design.get("fp4_block_mma", False)),
    )


def _ratio(table: dict[str, Any], key: str, origin: str) -> float:
    """A positive rate ratio of the [architecture] table (1 where the sheet gives none)."""
    if key not in table:
        return 1.0
    return float(_need(table, key, "architecture", origin, "a ratio of two rates"))


@lru_cache(maxsize=1)
def _lookup() -> dict[str, str]:
    table: dict[str, str] = {}
    for path in HARDWARE_DIR.glob("*.toml"):
        table[normalise(path.stem)] = path.stem
    for path in sorted(HARDWARE_DIR.glob("*.toml")):
        sheet = read_toml(path)
        for key in [sheet.get("display_name", ""), *sheet.get("aliases", ())]:
            if key:
                table.setdefault(normalise(key), path.stem)
    return table


def resolve_hardware_path(ref: str) -> Path:
    if ref == LOCAL_DEVICE_NAME:
        local = local_hardware_path()
        if not local.is_file():
            raise InputError(f"no measured sheet for this machine at {local}; run `phasewise "
                             "calibrate` first (it measures the ceilings and writes it).")
        return local
    path = Path(ref).expanduser()
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise InputError(f"hardware sheet {ref} does not exist; check the path.")
        return path
    name = _lookup().get(normalise(ref))
    if name is None:
        raise InputError(f"unknown hardware '{ref}'.{nearest_hint(ref, hardware_names())} "
                         "See `phasewise catalog hardware`, or pass a path to a TOML sheet.")
    return HARDWARE_DIR / f"{name}.toml"


def hardware_sheet(ref: str) -> dict[str, Any]:
    """The sheet as written, with its sources, for `phasewise catalog hardware NAME`."""
    return read_toml(resolve_hardware_path(ref))


def load_hardware(ref: str) -> HardwareSpec:
    """A HardwareSpec from a catalog name or alias, a path to a user's TOML sheet, or
    ``local``: the sheet `phasewise calibrate` measured on this machine."""
    return _load_sheet(resolve_hardware_path(ref))


@lru_cache(maxsize=256)
def _load_sheet(path: Path) -> HardwareSpec:
    origin = path.stem if path.parent == HARDWARE_DIR else str(path)
    return hardware_from_sheet(read_toml(path), origin)


@lru_cache(maxsize=64)
def load_link(ref: str) -> Link:
    """A network link (for KV transfer between machines) by catalog name or TOML path."""
    path = Path(ref).expanduser()
    if not path.is_file():
        match = {normalise(n): n for n in link_names()}.get(normalise(ref))
        if match is None:
            raise InputError(f"unknown link '{ref}'.{nearest_hint(ref, link_names())} "
                             f"Known: {', '.join(link_names())}.")
        path = LINKS_DIR / f"{match}.toml"
    sheet = read_toml(path)
    link = _link(sheet, "link", str(path))
    assert link is not None
    return Link(str(sheet.get("display_name", sheet.get("name", path.stem))),
                link.bandwidth_bytes_per_s, link.latency_s, "network", 1, link.source)
