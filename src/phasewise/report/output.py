"""Documents and tables to text."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from typing import Any

from phasewise.errors import InputError


def to_json(document: Any) -> str:
    """The document as JSON. JSON has no NaN or infinity: a document holding one (inputs
    past any real range that slipped through) is refused with the figure's place, never
    written as invalid JSON."""
    try:
        return json.dumps(document, indent=2, sort_keys=False, default=str,
                          allow_nan=False) + "\n"
    except ValueError:
        where = _non_finite(document) or "a figure"
        raise InputError(f"{where} of this result is not a finite number: the inputs lie "
                         "past any real range; check them.") from None


def _non_finite(document: Any, path: str = "") -> str:
    """The dotted path of the first NaN or infinite float in ``document``, or ''."""
    if isinstance(document, float) and not math.isfinite(document):
        return path or "the result"
    items = document.items() if isinstance(document, dict) else \
        enumerate(document) if isinstance(document, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return ""


def flatten(document: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are left out (they do not fit one row)."""
    flat: dict[str, Any] = {}
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif not isinstance(value, list):
            flat[name] = value
    return flat


def rows_to_csv(rows: Iterable[dict[str, Any]]) -> str:
    rows = list(rows)
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def rows_to_markdown(rows: Iterable[dict[str, Any]]) -> str:
    rows = list(rows)
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
