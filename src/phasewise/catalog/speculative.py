"""Published speculative-decoding acceptance, per draft kind and task kind
(``catalog/speculative.toml``), as the per-token rate α the simulator draws.

Sources report the average acceptance length τ with k draft tokens a round; under i.i.d.
per-token acceptance (Leviathan, Kalman and Matias, ICML 2023, eq. 1)
τ = (1 − α^(k+1)) / (1 − α), solved here for α.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.files import read_toml

SPECULATIVE_PATH = Path(__file__).resolve().parent / "speculative.toml"
TASKS = ("chat", "code", "math", "summarization")
DEFAULT_TASK = "chat"  # MT-Bench's multi-turn conversation: what a chat server sees
DRAFT_KINDS = ("mtp", "head", "model")
DEFAULT_ENTRY = "default"
_KIND_NAMES = {"mtp": "model's MTP module", "head": "one-layer draft head",
               "model": "separate draft model"}
# Bisection halves the bracket [0, 1) each step: 60 steps leave it below 1e-18.
BISECTION_STEPS = 60
GIVEN_SOURCE = "given with --spec-accept"


@dataclass(frozen=True, slots=True)
class Acceptance:
    """The per-token acceptance ``alpha`` used for ``draft`` drafts on ``task`` work, and
    where it came from (``source``: the figure, its locator and how it was converted)."""

    alpha: float
    draft: str
    task: str
    source: str


def acceptance_length(alpha: float, draft_tokens: int) -> float:
    """τ = 1 + α + … + α^k = (1 − α^(k+1)) / (1 − α): tokens a verify step yields on
    average under i.i.d. acceptance (Leviathan et al. 2023, eq. 1)."""
    return sum(alpha ** i for i in range(draft_tokens + 1))


def acceptance_rate(tau: float, draft_tokens: int) -> float:
    """The α in [0, 1) with acceptance_length(α, k) = τ; τ rises strictly from 1 (α = 0)
    towards k + 1 (α → 1), so bisection finds the one root."""
    if not (isinstance(draft_tokens, int) and draft_tokens >= 1):
        raise InputError(f"draft tokens {draft_tokens!r}: give a whole number of at least 1.")
    if not (math.isfinite(tau) and 1 <= tau < draft_tokens + 1):
        raise InputError(f"acceptance length {tau!r} with {draft_tokens} draft tokens: it "
                         f"must lie in [1, {draft_tokens + 1}).")
    low, high = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if acceptance_length(middle, draft_tokens) < tau \
            else (low, middle)
    return (low + high) / 2


def check_task(task: str) -> str:
    """``task`` if it is a known task kind, else a one-line error naming the nearest."""
    name = str(task).strip().lower()
    if name in TASKS:
        return name
    near = difflib.get_close_matches(name, TASKS, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    shown = str(task).strip() or "''"
    raise InputError(f"--task {shown}: unknown task kind{hint}; choose one of "
                     f"{', '.join(TASKS)}.")


def default_acceptance(draft: str, task: str = DEFAULT_TASK) -> Acceptance:
    """The documented acceptance of a ``draft`` kind on ``task`` work: the pair's own
    figure, else the kind's default figure, else the fallback kind's (named in the
    source)."""
    task = check_task(task)
    if draft not in DRAFT_KINDS:
        raise InputError(f"draft kind {draft!r}: choose one of {', '.join(DRAFT_KINDS)}.")
    figures, fallback = _document()
    kind, note = draft, ""
    if not any(key[0] == draft for key in figures):
        kind = fallback[draft]
        note = (f"no published figure for a {_KIND_NAMES[draft]}; the "
                f"{_KIND_NAMES[kind]}'s is used, give --spec-accept for yours: ")
    figure = figures.get((kind, task))
    if figure is None:
        figure = figures[(kind, DEFAULT_ENTRY)]
        note += f"no {task} figure for a {_KIND_NAMES[kind]}; its default: "
    return Acceptance(figure["alpha"], draft, task, note + figure["summary"])


def resolve_acceptance(given: float | None, draft: str, task: str = DEFAULT_TASK) -> Acceptance:
    """``given`` (the user's --spec-accept) when there is one, else the documented default."""
    task = check_task(task)
    if given is None:
        return default_acceptance(draft, task)
    return Acceptance(float(given), draft, task, GIVEN_SOURCE)


@cache
def _document() -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, str]]:
    """The bundled figures keyed by (draft, task), each with its α and a one-line summary;
    and the fallback kind of each draft kind that has no figures."""
    document = read_toml(SPECULATIVE_PATH, what="speculative acceptance file")
    figures = {}
    for entry in document.get("figure", []):
        key = (entry["draft"], entry["task"])
        figures[key] = {"alpha": _alpha(entry), "summary": _summary(entry)}
    return figures, dict(document.get("fallback", {}))


def _alpha(entry: dict[str, Any]) -> float:
    if "acceptance_rate" in entry:
        return float(entry["acceptance_rate"])
    return acceptance_rate(float(entry["acceptance_length"]), int(entry["draft_tokens"]))


def _summary(entry: dict[str, Any]) -> str:
    """'<source>, <locator>: τ 2.69 at 3 draft tokens → α 0.739' (or the rate as given)."""
    if "acceptance_rate" in entry:
        figure = f"α {entry['acceptance_rate']:g} as published"
    else:
        figure = (f"τ {entry['acceptance_length']:g} at {entry['draft_tokens']} draft tokens "
                  f"→ α {_alpha(entry):.3f}")
    return f"{entry['source']}, {entry['locator']} ({entry['benchmark']}): {figure}"
