"""The hardware catalog: TOML sheets in human units, each number with its source."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from phasewise.catalog._names import normalise
from phasewise.catalog.schema import check_hardware_sheet, check_link_sheet
from phasewise.errors import InputError, nearest_hint
from phasewise.files import read_toml
from phasewise.local import LOCAL_DEVICE_NAME, local_hardware_path
from phasewise.specs import HardwareSpec, Link, Price
from phasewise.specs.hardware import DEFAULT_AMORTISATION_YEARS

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
    """A link table, or a ``link = "name"`` reference to a sheet in catalog/links."""
    if not table:
        return None
    if "link" in table and "bandwidth_gb_per_s" not in table:
        return load_link_sheet(str(table["link"]))
    bandwidth = _need(table, "bandwidth_gb_per_s", where, origin, "GB/s per direction")
    return Link(name=str(table.get("name", where)), bandwidth_bytes_per_s=bandwidth * GIGA,
                latency_s=float(table.get("latency_us", 0.0)) * MICRO,
                kind=str(table.get("kind", "")), max_devices=int(table.get("max_devices", 1)),
                source=str(table.get("source", "")), topology=str(table.get("topology", "")))


def _price(table: dict[str, Any] | None, origin: str) -> Price | None:
    """[price]: an on-demand usd_per_hour (cloud list price), or a purchase_usd spread over
    amortisation_years (3 unless given) of round-the-clock use."""
    if not table:
        return None
    common = {"source": str(table.get("source", "")), "date": str(table.get("date", "")),
              "provider": str(table.get("provider", ""))}
    if "usd_per_hour" in table:
        hourly = table["usd_per_hour"]
        if not isinstance(hourly, (int, float)) or isinstance(hourly, bool) or hourly < 0:
            raise InputError(f"{origin}: [price] usd_per_hour must be a number of dollars per "
                             "device-hour, e.g. 2.49; fix it.")
        return Price(float(hourly), str(table.get("basis", "on-demand")), **common)
    if "purchase_usd" in table:
        purchase = _need(table, "purchase_usd", "price", origin, "US dollars for one device")
        years = table.get("amortisation_years", DEFAULT_AMORTISATION_YEARS)
        _need({"amortisation_years": years}, "amortisation_years", "price", origin, "years")
        return Price.bought(float(purchase), years=float(years), **common)
    raise InputError(f"{origin}: [price] needs usd_per_hour (rented) or purchase_usd (bought); "
                     "add one.")


def _native_formats(compute: dict[str, Any], peaks: dict[str, float], origin: str) -> tuple[str, ...]:
    formats = tuple(str(f) for f in compute.get("native_formats", ()))
    # "nvfp4" names NVIDIA's 16-value FP4 blocks, which run at the fp4 (MXFP4) column's rate
    unknown = [f for f in formats if f not in peaks and not (f == "nvfp4" and "fp4" in peaks)]
    if unknown:
        raise InputError(f"{origin}: [compute] native_formats names {', '.join(unknown)} without "
                         "a peak; add its <format>_tflops or drop it from the list.")
    return formats


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
    price = _price(sheet.get("price"), origin)
    design = sheet.get("architecture") or {}
    return HardwareSpec(
        name=str(sheet["name"]), display_name=str(sheet.get("display_name", sheet["name"])),
        device_class=str(sheet.get("device_class", "datacenter_gpu")), peak_flops_per_s=peaks,
        memory_bytes=capacity * GIGA, memory_bandwidth_bytes_per_s=bandwidth * GIGA,
        interconnect=_link(sheet.get("interconnect"), "interconnect", origin),
        host_link=_link(sheet.get("host_link"), "host_link", origin),
        tdp_w=(sheet.get("power") or {}).get("tdp_w"),
        price_usd_per_hour=price.usd_per_hour if price is not None else None,
        vendor=str(sheet.get("vendor", "")), aliases=tuple(sheet.get("aliases", ())),
        sources=sources, notes=str(sheet.get("notes", "")), price=price,
        native_formats=_native_formats(compute, peaks, origin),
        scale_out=_link(sheet.get("scale_out"), "scale_out", origin),
        architecture=str(design.get("name", "")),
        fp16_accumulate_speedup=_ratio(design, "fp16_accumulate_speedup", origin),
        integer_vector_share=_ratio(design, "integer_vector_share", origin),
        fp4_block_mma=bool(design.get("fp4_block_mma", False)),
        vector_bits=int(design.get("vector_bits", 0)),
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


def catalog_hardware_name(ref: str) -> str | None:
    """The catalog sheet a name, display name or alias stands for, or None; never a path."""
    return _lookup().get(normalise(ref))


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
    sheet = check_hardware_sheet(read_toml(path, what="hardware sheet"), origin)
    return hardware_from_sheet(sheet, origin)


def _link_path(ref: str) -> Path:
    path = Path(ref).expanduser()
    if path.is_file():
        return path
    match = {normalise(n): n for n in link_names()}.get(normalise(ref))
    if match is None:
        raise InputError(f"unknown link '{ref}'.{nearest_hint(ref, link_names())} "
                         f"Known: {', '.join(link_names())}.")
    return LINKS_DIR / f"{match}.toml"


@lru_cache(maxsize=64)
def load_link_sheet(ref: str) -> Link:
    """A link sheet as written: its kind (nvlink, ici, infiniband, ...), how many devices its
    domain joins (max_devices) and its topology."""
    path = _link_path(ref)
    sheet = check_link_sheet(read_toml(path, what="link sheet"), str(path))
    link = _link({k: v for k, v in sheet.items() if k != "link"}, "link", str(path))
    assert link is not None
    return Link(str(sheet.get("display_name", sheet.get("name", path.stem))),
                link.bandwidth_bytes_per_s, link.latency_s, link.kind or "network",
                link.max_devices, link.source, link.topology)


@lru_cache(maxsize=64)
def load_link(ref: str) -> Link:
    """A network link (for KV transfer between machines) by catalog name or TOML path: one
    device's share of it, whatever domain the sheet describes."""
    link = load_link_sheet(ref)
    return Link(link.name, link.bandwidth_bytes_per_s, link.latency_s, "network", 1, link.source,
                link.topology)
