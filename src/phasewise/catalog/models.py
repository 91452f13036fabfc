"""The model catalog: published config.json files, plus user paths and the local HF cache."""

from __future__ import annotations

import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from phasewise.catalog._names import normalise
from phasewise.catalog.gguf_meta import config_from_gguf
from phasewise.catalog.hf_config import model_from_config
from phasewise.errors import InputError, nearest_hint
from phasewise.files import read_json
from phasewise.specs import ModelSpec

MODELS_DIR = Path(__file__).parent / "models"
# A checkpoint's hf_quant_config.json (TensorRT Model Optimizer) lies beside its config as
# <name>.hf_quant_config.json: data for that model, not a model of its own.
QUANT_CONFIG_SUFFIX = ".hf_quant_config.json"
# Longer than any catalog name, repo id or path a user types.
MAX_NAME_CHARS = 1024


@lru_cache(maxsize=1)
def model_index() -> dict[str, dict[str, Any]]:
    """index.toml: per catalog name its HF repo, aliases and published parameter counts."""
    path = MODELS_DIR / "index.toml"
    index = tomllib.loads(path.read_text()) if path.exists() else {}
    for config in MODELS_DIR.glob("*.json"):
        if not config.name.endswith(QUANT_CONFIG_SUFFIX):
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


def catalog_model_name(ref: str) -> str | None:
    """The catalog name a name, alias or HF repo id stands for, or None; never a path."""
    return _lookup().get(normalise(ref))


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
    """A config.json as a dict: bounded and UTF-8 (files.read_json). NaN and Infinity are
    read, as published configs hold them in keys the arithmetic does not use; the config
    reader checks every number it does use."""
    config = read_json(path, what="config.json", allow_non_finite=True)
    if not isinstance(config, dict):
        raise InputError(f"{path}: a config.json is one JSON object ({{...}}), this holds a "
                         f"{type(config).__name__}; pass the model's config.json.")
    return config


def _folder_title(config_path: Path) -> str:
    """A model folder's name; inside the HF cache (models--org--name/snapshots/<hash>) the
    repo id, not the snapshot hash."""
    folder = config_path.resolve().parent
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.removeprefix("models--").replace("--", "/")
    return folder.name


def resolve_model_path(ref: str) -> tuple[Path, str]:
    """(config.json path, display name) for a catalog name, alias, path or cached repo id."""
    if len(ref) > MAX_NAME_CHARS:
        raise InputError(f"model name of {len(ref):,} characters: no model or path is that "
                         "long; see `phasewise catalog models`.")
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(f"{ref}: folder holds no config.json; pass the config file or "
                             "a folder with one.")
        return path / "config.json", _folder_title(path / "config.json")
    if path.is_file() or path.exists():
        return path, path.stem if path.name != "config.json" else _folder_title(path)
    name = _lookup().get(normalise(ref))
    if name is not None:
        return MODELS_DIR / f"{name}.json", name
    if "/" in ref and not ref.endswith(".json"):
        cached = find_in_hf_cache(ref)
        if cached is not None:
            return cached, ref
        # A repo id names its organisation first; the catalog knows the model by its name.
        name = _lookup().get(normalise(ref.rsplit("/", 1)[-1]))
        if name is not None:
            return MODELS_DIR / f"{name}.json", name
        looked = ", ".join(str(d) for d in hf_cache_dirs())
        raise InputError(f"model '{ref}' is not in the catalog nor in the local Hugging Face "
                         f"cache (looked in {looked}; set HF_HUB_CACHE or HF_HOME to "
                         "another); phasewise never downloads: fetch its config.json "
                         "yourself and pass the path.")
    raise InputError(f"unknown model '{ref}'.{nearest_hint(ref, model_names())} "
                     "See `phasewise catalog models`, or pass a path to a config.json.")


@lru_cache(maxsize=256)
def load_model(ref: str) -> ModelSpec:
    """A ModelSpec from a catalog name, a config.json path or folder, or a cached HF repo id."""
    path, name = resolve_model_path(ref)
    if path.suffix.lower() == ".gguf":
        config, formats = config_from_gguf(path)
        return model_from_config({**config, "quantization_config": formats}, name)
    return model_from_config(read_config(path), name, sidecar=_quant_sidecar(path))


def _quant_sidecar(config: Path) -> dict[str, Any] | None:
    """ModelOpt's hf_quant_config.json beside a checkpoint's config.json (in the catalog,
    ``<name>.hf_quant_config.json``)."""
    beside = (config.parent / "hf_quant_config.json" if config.name == "config.json"
              else config.with_name(f"{config.stem}.hf_quant_config.json"))
    return read_config(beside) if beside.is_file() else None
