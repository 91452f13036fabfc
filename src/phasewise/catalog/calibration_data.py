"""The one reader of the calibration data under ``catalog/calibration/``.

Three bundled files: ``parameters.toml`` (each constant of the calibrated cost model, its
prior and its spread), ``default.toml`` (the bundled fit) and ``engines.toml`` (each
engine's documented behaviour, which its lowering reads). A user's calibration file is read
through ``read_profile_document`` too. The bundled files are package data that never change
while the program runs, so each is parsed once (``functools.cache`` on a function of no
arguments: a constant, not state a caller can change).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasewise.catalog.schema import check_calibration
from phasewise.errors import InputError
from phasewise.files import read_toml

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"
PARAMETERS_PATH = CALIBRATION_DIR / "parameters.toml"
DEFAULT_PROFILE_PATH = CALIBRATION_DIR / "default.toml"
ENGINES_PATH = CALIBRATION_DIR / "engines.toml"


@cache
def parameters_document() -> Mapping[str, Any]:
    """``parameters.toml``: one table per constant (level, prior, spread, unit, meaning)."""
    return MappingProxyType(read_toml(PARAMETERS_PATH, what="calibration file"))


@cache
def engines_document() -> Mapping[str, Any]:
    """``engines.toml``: one table per engine, with its backend and variant tables."""
    return MappingProxyType(read_toml(ENGINES_PATH, what="engine file"))


@cache
def _default_profile_document() -> Mapping[str, Any] | None:
    if not DEFAULT_PROFILE_PATH.is_file():
        return None
    return MappingProxyType(read_toml(DEFAULT_PROFILE_PATH, what="calibration file"))


def read_profile_document(path: str | None = None) -> tuple[Mapping[str, Any] | None, str]:
    """A calibration profile's TOML document and where it came from: the bundled default
    (None when the package ships none) or the user's file at ``path``."""
    if not path:
        return _default_profile_document(), str(DEFAULT_PROFILE_PATH)
    where = Path(path).expanduser()
    if not where.is_file():
        raise InputError(f"calibration file {path} does not exist; check the path.")
    # Checked where it enters, for the Python API as for the CLI's --calibration: known
    # sections only, and a file of another kind (a hardware sheet) named as such.
    return check_calibration(read_toml(where, what="calibration file"), str(where)), str(where)
