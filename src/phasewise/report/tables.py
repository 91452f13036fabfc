"""Table cells: the text shown and the exact value behind it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cell:
    """A shown string, and the exact value behind it (kept in the page for copying and tests)."""

    text: str
    value: Any = None


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[Cell]]


def number(value: Any, how: Callable[[float], str] | None = None) -> Cell:
    if value is None:
        return Cell("—")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return Cell(str(value), value)
    return Cell(how(value) if how else _plain(value), value)


def _plain(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.4g}"


def key_value_table(title: str, pairs: list[tuple[str, Cell]]) -> Table:
    return Table(title, ["quantity", "value"], [[Cell(name), cell] for name, cell in pairs])


def rows_table(title: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> Table:
    """A list of flat records as a table: one column per key (nested values as text); a
    list of plain values is one column."""
    rows = [r if isinstance(r, dict) else {"value": r} for r in rows]
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    body = [[_auto_cell(row.get(c)) for c in columns] for row in rows]
    return Table(title, columns, body)


def _auto_cell(value: Any) -> Cell:
    if isinstance(value, (dict, list)):
        return Cell(_compact(value), None)
    return number(value)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)


def scalars(doc: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in doc.items():
        if isinstance(value, dict):
            out.extend(scalars(value, f"{prefix}{key}."))
        elif not isinstance(value, list):
            out.append((f"{prefix}{key}", value))
    return out
