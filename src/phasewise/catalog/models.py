"""The model catalog: published config.json files, plus user paths and the local HF cache."""

from __future__ import annotations

import json
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from phasewise.catalog._names import normalise
from phasewise.catalog.hf_config import model_from_config
from phasewise.errors import InputError, nearest_hint
from phasewise.specs import ModelSpec

MODELS_DIR = Path(__file__).parent / "models"


@lru_cache(maxsize=1)
def model_index() -> dict[str, dict[str, Any]]:
    """index.toml: per catalog name its HF repo, aliases and published parameter counts."""
    path = MODELS_DIR / "index.toml"
    index = tomllib.loads(path.read_text()) if path.exists() else {}
    for config in MODELS_DIR.glob("*.json"):
        index.setdefault(config.stem, {})
    return index


def model_names() -> list[str]:
    return sorted(model_index())


@lru_cache(maxsize=1)
def _lookup() -> dict[str, str]:
    table: dict[str, str] = {}
    for name, entry in model_index().items():
        for key in [name, entry.get("hf_repo", ""), *entry.get("aliases", [])]:
            if key:
                table.setdefault(normalise(key), name)
    return table


def hf_cache_dirs() -> list[Path]:
    """Where the Hugging Face hub caches models, in the order huggingface_hub looks."""
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def find_in_hf_cache(repo_id: str) -> Path | None:
    """config.json of ``repo_id`` in the local HF cache (the snapshot refs/main names),
    found by huggingface_hub's own cache lookup; never the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        raise InputError(f"'{repo_id}' looks like a Hugging Face repo id; finding it in the "
                         "local cache needs huggingface_hub: pip install 'phasewise[hf]', "
                         "or pass the path to its config.json.") from None
    for cache in hf_cache_dirs():
        try:
            found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache)
        except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
            return None
        if isinstance(found, str):
            return Path(found)
    return None


def read_config(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); "
                         "fix the file or pass another config.json.") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror}).") from None


def resolve_model_path(ref: str) -> tuple[Path, str]:
    """(config.json path, display name) for a catalog name, alias, path or cached repo id."""
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(f"{ref}: folder holds no config.json; pass the config file or "
                             "a folder with one.")
        return path / "config.json", path.resolve().name
    if path.is_file():
        return path, path.stem if path.name != "config.json" else path.resolve().parent.name
    name = _lookup().get(normalise(ref))
    if name is not None:
        return MODELS_DIR / f"{name}.json", name
    if "/" in ref and not ref.endswith(".json"):
        cached = find_in_hf_cache(ref)
        if cached is not None:
            return cached, ref
        raise InputError(f"model '{ref}' is not in the catalog nor in the local Hugging Face "
                         f"cache ({hf_cache_dirs()[-1]}); phasewise never downloads: fetch "
                         "its config.json yourself and pass the path.")
    raise InputError(f"unknown model '{ref}'.{nearest_hint(ref, model_names())} "
                     "See `phasewise catalog models`, or pass a path to a config.json.")


@lru_cache(maxsize=256)
def load_model(ref: str) -> ModelSpec:
    """A ModelSpec from a catalog name, a config.json path or folder, or a cached HF repo id."""
    path, name = resolve_model_path(ref)
    return model_from_config(read_config(path), name)
