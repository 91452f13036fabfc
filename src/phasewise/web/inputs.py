"""The web form's inputs, checked at the edge the way the CLI checks its flags.

The form names catalog models, models in the local Hugging Face cache and catalog devices,
or carries an uploaded config.json or hardware sheet as text. It never names a path on the
server: a name is looked up in the catalog or the cache, and anything else is refused.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from phasewise.errors import InputError, nearest_hint

# An uploaded config.json or TOML sheet: the largest published config.json files (vision
# towers, long layer lists) are a few tens of kB, so 1 MiB leaves room and bounds memory.
MAX_UPLOAD_BYTES = 1 << 20
# Simulated requests one web job may ask for: a few seconds of simulation here.
MAX_WEB_REQUESTS = 5000
MAX_WEB_RATES = 8
# Candidates a web plan simulates to verify the analytic screen.
WEB_PLAN_VERIFY = 4
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class Form(BaseModel):
    """What the page sends; every value is text as the user typed it, parsed below by the
    CLI's own parsers so that the errors read the same."""

    model_config = ConfigDict(extra="forbid")

    model: str = "llama-3.1-8b"
    model_upload: str | None = Field(None, max_length=MAX_UPLOAD_BYTES)
    model_upload_name: str | None = Field(None, max_length=200)
    hardware: str = "h100-sxm"
    hardware_upload: str | None = Field(None, max_length=MAX_UPLOAD_BYTES)
    isl: str = "2048"
    osl: str = "256"
    batch_size: str = "1"
    weight_dtype: str = "auto"
    act_dtype: str = "bf16"
    kv_dtype: str = "auto"
    kv_keep: str | None = None
    tp: str = "1"
    pp: str = "1"
    ep: str = "1"
    engine: str | None = None
    cost: str | None = None
    rank_by: str = "cost"
    batch_sweep: bool = False
    scheduler: str = "continuous"
    rate: str = "4"
    num_requests: str = "200"
    max_num_seqs: str = "256"
    seed: str = "0"
    ttft_slo: str = "1s"
    tpot_slo: str = "50ms"


def blank_to_none(value: str | None) -> str | None:
    return value if value is not None and value.strip() else None


def model_spec(form: Form) -> Any:
    """The ModelSpec of an uploaded config.json, a catalog model, or a cached repo id."""
    from phasewise.catalog.hf_config import model_from_config
    from phasewise.catalog.models import (
        MODELS_DIR,
        catalog_model_name,
        find_in_hf_cache,
        model_names,
        read_config,
    )

    if form.model_upload:
        name = _upload_stem(form.model_upload_name) or "uploaded-config"
        return model_from_config(parse_config(form.model_upload), name)
    ref = form.model.strip()
    name = catalog_model_name(ref)
    if name is not None:
        return model_from_config(read_config(MODELS_DIR / f"{name}.json"), name)
    if _REPO_ID.match(ref) and ".." not in ref:
        cached = find_in_hf_cache(ref)
        if cached is not None:
            return model_from_config(read_config(cached), ref)
        raise InputError(f"model '{ref}' is not in the catalog nor in the local Hugging Face "
                         "cache; phasewise never downloads: upload its config.json.")
    raise InputError(f"unknown model '{ref}'.{nearest_hint(ref, model_names())} Search the "
                     "catalog, pick a model from the local cache, or upload a config.json.")


def parse_config(text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"uploaded config.json: not valid JSON ({err.msg} at line "
                         f"{err.lineno}); upload the model's config.json.") from None
    if not isinstance(raw, dict):
        raise InputError("uploaded config.json: the file holds no JSON object; upload the "
                         "model's config.json.")
    return raw


def _upload_stem(name: str | None) -> str | None:
    """A display name from the uploaded file's own name (never used as a path)."""
    if not name:
        return None
    stem = re.sub(r"[^\w.-]+", "-", name.rsplit("/", 1)[-1].rsplit("\\", 1)[-1])
    stem = stem.removesuffix(".json").strip("-.")
    return None if stem in ("", "config") else stem[:80]


def devices(form: Form) -> list[Any]:
    """The HardwareSpecs the form names (catalog devices, comma-separated), then the
    uploaded sheet when there is one."""
    from phasewise.commands._app import split_list

    specs = [catalog_device(name) for name in split_list(form.hardware, "--hardware", str)] \
        if form.hardware.strip() else []
    if form.hardware_upload:
        specs.append(uploaded_sheet(form.hardware_upload))
    if not specs:
        raise InputError("no device: pick a catalog device or upload a hardware sheet.")
    return specs


def catalog_device(ref: str) -> Any:
    from phasewise.catalog.hardware import (
        HARDWARE_DIR,
        catalog_hardware_name,
        hardware_from_sheet,
        hardware_names,
    )
    from phasewise.files import read_toml

    name = catalog_hardware_name(ref)
    if name is None:
        raise InputError(f"unknown hardware '{ref}'.{nearest_hint(ref, hardware_names())} "
                         "Pick a catalog device or upload a hardware sheet (TOML).")
    return hardware_from_sheet(read_toml(HARDWARE_DIR / f"{name}.toml"), name)


def uploaded_sheet(text: str) -> Any:
    from phasewise.catalog.hardware import hardware_from_sheet

    try:
        sheet = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"uploaded hardware sheet: not valid TOML ({err}); fix the sheet.") \
            from None
    return hardware_from_sheet(sheet, "uploaded hardware sheet")


def whole(text: str, flag: str) -> int:
    from phasewise.commands._app import ints
    from phasewise.commands._whatif import one

    return one(ints(text, flag), flag)


def bounded(value: int, flag: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise InputError(f"{flag} {value}: the web app takes {low} to {high:,}; run "
                         "`phasewise` from the command line for larger runs.")
    return value
