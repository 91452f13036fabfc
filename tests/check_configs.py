"""Read every evaluation config through phasewise and score it against published figures.

    python tests/check_configs.py                  # the configs in tests/data/configs
    python tests/check_configs.py --with-catalog   # and every catalog model with a card count
    python tests/check_configs.py --json           # one JSON document instead of the table

A config is right when it loads, its total and active parameters lie within the tolerance of
the published counts (3%, or one unit of the last digit of a coarse figure such as a name's
"A3B"), its KV bytes per token equal the hand derivation in the manifest, and, where the
manifest derives one, its weight bytes per parameter lie within 1% of the checkpoint format's. Cards differ on
whether "active" counts the embedding table and the head, so the active count may match under
any of the three readings; the table says which one did. Exit code 0 always: this measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
CONFIGS = HERE / "data" / "configs"


@dataclass
class Row:
    name: str
    kind: str
    total_b: float | None = None
    card_total_b: float | None = None
    active_b: float | None = None
    card_active_b: float | None = None
    active_reading: str = ""
    kv_bytes_per_token: float | None = None
    hand_kv_bytes_per_token: int | None = None
    weight_bytes_per_param: float | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    error: str = ""

    @property
    def verdict(self) -> str:
        if self.error:
            return self.error.split(":")[0]
        if not self.checks:
            return "loads"
        return "pass" if all(self.checks.values()) else "FAIL"


# The checkpoint's weight bytes per parameter against the manifest's hand derivation from
# the format (bits per weight with its scales, the excluded modules at 16 bits).
FORMAT_TOLERANCE = 0.01


def tolerance_b(published_b: float, basis: str) -> float:
    """3% of a card's figure; a name's figure only says the count lies within one unit of
    its last digit."""
    text = f"{published_b:g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    unit = 10.0 ** -decimals
    return max(0.03 * published_b, unit if basis == "name" else 0.0)


def active_readings(active: float, embedding: float) -> dict[str, float]:
    """The active count under each publisher's convention: everything a token touches, less
    the input embedding (a row lookup), or less the embedding and the head."""
    return {"all": active, "no input embedding": active - embedding,
            "no embeddings": active - 2 * embedding}


def score(row: Row, entry: dict, counts, spec) -> None:
    """Fill ``row`` with our figures and the verdict of each check the entry allows."""
    basis = entry.get("card_basis", "card")
    row.total_b = counts.total / 1e9
    row.active_b = counts.active / 1e9
    row.kv_bytes_per_token = counts.kv_bytes_per_token
    from phasewise.ledger.memory import weight_bytes_per_device
    from phasewise.specs import Parallelism, Precision

    row.weight_bytes_per_param = weight_bytes_per_device(spec, Precision(), Parallelism()) \
        / counts.total
    if entry.get("weight_bytes_per_param") is not None:
        hand = float(entry["weight_bytes_per_param"])
        row.checks["format"] = abs(row.weight_bytes_per_param / hand - 1) <= FORMAT_TOLERANCE
    if row.card_total_b is not None:
        row.checks["total"] = (abs(row.total_b - row.card_total_b)
                               <= tolerance_b(row.card_total_b, basis))
    if row.card_active_b is not None:
        embedding = getattr(counts, "embedding", spec.vocab_size * spec.hidden_size) / 1e9
        limit = tolerance_b(row.card_active_b, basis)
        hits = [reading for reading, value in active_readings(row.active_b, embedding).items()
                if abs(value - row.card_active_b) <= limit]
        row.active_reading = hits[0] if hits else ""
        row.checks["active"] = bool(hits)
    if row.hand_kv_bytes_per_token is not None:
        row.checks["kv"] = row.kv_bytes_per_token == row.hand_kv_bytes_per_token


def check(name: str, ref: str, entry: dict) -> Row:
    """Load ``ref`` through phasewise as a user would and score it; never raise."""
    from phasewise.catalog.models import load_model
    from phasewise.errors import InputError
    from phasewise.ledger.params import param_counts

    card_total_b = entry.get("card_total_b", entry.get("params_total_b"))
    if card_total_b is not None:  # the language model: a vision tower counts apart
        card_total_b -= entry.get("params_vision_b", 0.0)
    row = Row(name, entry.get("kind", entry.get("family", "")), card_total_b=card_total_b,
              card_active_b=entry.get("card_active_b", entry.get("params_active_b")),
              hand_kv_bytes_per_token=entry.get("kv_bytes_per_token"))
    try:
        spec = load_model(ref)
        score(row, entry, param_counts(spec), spec)
    except InputError as err:
        row.error = f"refused: {err}"
    except Exception as err:  # noqa: BLE001 - a crash is what this script measures
        row.error = f"crash: {type(err).__name__}: {err}"
    return row


def evaluation_rows() -> list[Row]:
    manifest = tomllib.loads((CONFIGS / "manifest.toml").read_text())
    return [check(name, str(CONFIGS / f"{name}.json"), entry) for name, entry in manifest.items()]


def frontier_kv() -> dict[str, int]:
    """The hand-derived KV bytes per token of the frontier catalog models, from their test."""
    sys.path.insert(0, str(HERE))
    from test_frontier_models import FRONTIER

    return {model.ref: model.kv_bytes_per_token for model in FRONTIER}


def catalog_rows() -> list[Row]:
    from phasewise.catalog.models import model_index

    kv = frontier_kv()
    return [check(name, name, entry | ({"kv_bytes_per_token": kv[name]} if name in kv else {}))
            for name, entry in model_index().items() if entry.get("params_total_b")]


def fmt_b(value: float | None) -> str:
    return "" if value is None else f"{value:,.2f}"


def error_pct(ours: float | None, card: float | None) -> str:
    return "" if ours is None or not card else f"{100 * (ours / card - 1):+.1f}%"


def print_table(rows: list[Row]) -> None:
    header = ("name", "kind", "total B", "card", "err", "active B", "card", "reading",
              "KV B/token", "hand KV", "B/param", "verdict")
    lines = [header]
    for r in rows:
        lines.append((r.name, r.kind[:34], fmt_b(r.total_b), fmt_b(r.card_total_b),
                      error_pct(r.total_b, r.card_total_b), fmt_b(r.active_b),
                      fmt_b(r.card_active_b), r.active_reading,
                      "" if r.kv_bytes_per_token is None else f"{r.kv_bytes_per_token:,.0f}",
                      "" if r.hand_kv_bytes_per_token is None else f"{r.hand_kv_bytes_per_token:,}",
                      "" if r.weight_bytes_per_param is None else f"{r.weight_bytes_per_param:.3f}",
                      r.verdict + (f" ({', '.join(k for k, ok in r.checks.items() if not ok)})"
                                   if r.verdict == "FAIL" else "")))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=False)).rstrip())
    for r in rows:
        if r.error:
            print(f"{r.name}: {r.error}")


def summary(rows: list[Row]) -> dict[str, int]:
    verdicts = [r.verdict for r in rows]
    return {"configs": len(rows), "right": verdicts.count("pass"),
            "wrong": verdicts.count("FAIL"), "load only": verdicts.count("loads"),
            "refused": verdicts.count("refused"), "crashed": verdicts.count("crash")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--with-catalog", action="store_true",
                        help="also score every catalog model with a published count")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args(argv)
    rows = evaluation_rows() + (catalog_rows() if args.with_catalog else [])
    totals = summary(rows)
    if args.json:
        print(json.dumps({"summary": totals,
                          "rows": [asdict(r) | {"verdict": r.verdict} for r in rows]}, indent=2))
        return 0
    print_table(rows)
    checked = totals["right"] + totals["wrong"] + totals["refused"] + totals["crashed"]
    share = 100 * totals["right"] / checked if checked else 0.0
    print(f"\n{totals['right']} of {checked} checked configs right ({share:.0f}%); "
          + ", ".join(f"{v} {k}" for k, v in totals.items() if k not in ("configs", "right")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
