"""System names of benchmark tools and simulators (aiconfigurator's ``b200_sxm``, InferenceX's
``b200-trt``), mapped to the hardware sheet each stands for (``system_names.toml``)."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

from phasewise.catalog._names import normalise
from phasewise.catalog.hardware import catalog_hardware_name, hardware_names
from phasewise.errors import InputError, nearest_hint

SYSTEM_NAMES_FILE = Path(__file__).with_name("system_names.toml")


@lru_cache(maxsize=1)
def system_table() -> dict[str, dict[str, str]]:
    """name → {sheet, source} as the file writes them, each source spelled out."""
    data = tomllib.loads(SYSTEM_NAMES_FILE.read_text())
    sources = data.get("sources", {})
    return {name: {"sheet": row["sheet"], "source": sources.get(row["source"], row["source"])}
            for name, row in data.get("names", {}).items()}


@lru_cache(maxsize=1)
def _by_key() -> dict[str, str]:
    return {normalise(name): row["sheet"] for name, row in system_table().items()}


def system_sheet(name: str) -> str | None:
    """The catalog sheet a system name stands for: a row of the table, else a sheet's name or
    alias; None when neither knows it."""
    return _by_key().get(normalise(name)) or catalog_hardware_name(name)


def resolve_system(name: str) -> str:
    """The sheet for ``name``, or an InputError naming the system and the nearest known one."""
    sheet = system_sheet(name)
    if sheet is None:
        known = sorted({*system_table(), *hardware_names()})
        hint = nearest_hint(name, known) or f" Known systems include {', '.join(sorted(system_table()))}."
        raise InputError(f"unknown system '{name}': no hardware sheet or system name matches."
                         f"{hint} Add it to catalog/system_names.toml with its sheet.")
    return sheet
