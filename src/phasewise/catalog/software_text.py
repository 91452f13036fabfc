"""The engine a measurement's free-text software description names, at the import boundary.

A bundled measurement row states its engine explicitly (the ``engine`` column: a name as
``--engine`` takes it, ``llama.cpp+flash-attn+ub2048``), and lowering reads only that. A
row without one (a user's file, a table copied from elsewhere) has only its
``software_stack`` text ("llama.cpp llama-bench build 6db2b41a (1988), CUDA backend, -fa
1"); this module turns that text into the same name, once, where the row is read. It reads
the engine table (``catalog/calibration/engines.toml``) as data: an engine by any of its
aliases, a variant by a phrase of its ``when`` list, a date before its ``before_date`` or a
build below its ``before_build`` (on the device's backend only), and a stated prompt
micro-batch ("-ub 2048", "n_ubatch 1024") for an engine that splits prompts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from phasewise.catalog.calibration_data import engines_document

_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june",
                                       "july", "august", "september", "october", "november",
                                       "december"), start=1)}
_ISO_DATE = re.compile(r"\b(20\d\d)-(\d\d)-(\d\d)\b")
_MONTH_YEAR = re.compile(r"\b(" + "|".join(_MONTHS) + r")\s+(20\d\d)\b", re.I)
# llama.cpp's micro-batch size as its tools print or take it: "-ub 2048", "n_ubatch 2048",
# "--ubatch-size 2048", "n_ubatch = 2048".
_UBATCH = re.compile(r"(?:-ub|--ubatch-size|n_ubatch)\s*=?\s*(\d+)")
_BUILD = re.compile(r"\bbuild\s+(?:[0-9a-f]{6,}\s+)?\(?b?(\d{3,6})\)?", re.I)
# Engines a row cannot name: the fallback of the table, not a software's name.
_UNNAMED = ("generic",)


def engine_from_software(text: str, backend: str = "", engine: str = "") -> str:
    """The engine name (``base+variant…+ubN``) ``text`` describes on ``backend``, for
    ``engine`` when given, else for the first engine whose name or alias it contains; ""
    when it names none."""
    table = engines_document()
    base = engine or named_engine(text)
    if not base:
        return ""
    entry = table[base]
    variants = [name for name, variant in entry.get("variant", {}).items()
                if _selects(variant, text) and (not backend or
                                                variant.get("backend", "") in ("", backend))]
    ubatch = software_ubatch(text)
    if ubatch and entry.get("prefill_ubatch_tokens"):
        variants.append(f"ub{ubatch}")
    return "+".join((base, *variants))


def named_engine(text: str) -> str:
    """The first engine of the table whose name or an alias ``text`` contains ("")."""
    lowered = text.lower()
    for name, entry in engines_document().items():
        if name in _UNNAMED:
            continue
        if any(alias.lower() in lowered for alias in (name, *entry.get("aliases", ()))):
            return name
    return ""


def _selects(variant: Mapping[str, Any], text: str) -> bool:
    lowered = f" {text.lower()} "
    if any(phrase.lower() in lowered for phrase in variant.get("when", ())):
        return True
    before = variant.get("before_date")
    when = software_date(text)
    if before and when and when < date.fromisoformat(str(before)):
        return True
    build, below = software_build(text), int(variant.get("before_build", 0))
    return bool(below and build is not None and build < below)


def software_ubatch(text: str) -> int | None:
    """The prompt micro-batch a description states ('-ub 2048', 'n_ubatch 2048'), or None."""
    match = _UBATCH.search(text)
    return int(match[1]) if match else None


def software_date(text: str) -> date | None:
    """The date a description gives ('2023-09-09', 'May 2024'; a month counts from its
    first day), or None."""
    if match := _ISO_DATE.search(text):
        return date(int(match[1]), int(match[2]), int(match[3]))
    if match := _MONTH_YEAR.search(text):
        return date(int(match[2]), _MONTHS[match[1].lower()], 1)
    return None


def software_build(text: str) -> int | None:
    """A build number ('build 6db2b41a (1988)', 'build b3891'), or None."""
    match = _BUILD.search(text)
    return int(match[1]) if match else None
