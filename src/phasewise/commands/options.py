"""The options the verbs share, declared once: one default for the prompt and output lengths,
one parser of the tensor-parallel degree, one ``--engine`` whose help lists the engines of
the engine data. A verb passes only what it adds (a sweep, a distribution, a preset)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import typer

from phasewise.commands._app import MAX_DEVICES, ints
from phasewise.specs import Workload

# The CLI's lengths are the Python API's (``Workload``): `phasewise estimate` and
# `phasewise.estimate()` describe the same request by default.
_WORKLOAD_DEFAULTS = {f.name: f.default for f in fields(Workload)}
DEFAULT_ISL = str(_WORKLOAD_DEFAULTS["isl"])
DEFAULT_OSL = str(_WORKLOAD_DEFAULTS["osl"])
DEFAULT_TP = "1"
# How a length flag takes a distribution (simulate, plan, bench).
LENGTH_FORMS = "N, uniform:LO:HI, normal:MEAN:STD, lognormal:MEAN:SIGMA or file:PATH"


# What a length flag takes, by verb: one count, a comma list that sweeps, a distribution.
_LENGTH_HELP = {"one": ".", "sweep": " (a comma list sweeps).", "distribution": f": {LENGTH_FORMS}."}


def isl_option(form: str = "one") -> Any:
    """--isl: prompt tokens per request, as ``form`` (a key of _LENGTH_HELP) reads them."""
    return typer.Option(DEFAULT_ISL, "--isl",
                        help=f"Input (prompt) tokens per request{_LENGTH_HELP[form]}")


def osl_option(form: str = "one") -> Any:
    more = ", as --isl." if form == "distribution" else _LENGTH_HELP[form]
    return typer.Option(DEFAULT_OSL, "--osl", help=f"Output tokens per request{more}")


def tp_option(default: str = DEFAULT_TP, *, purpose: str = "Tensor-parallel degree") -> Any:
    """--tp: one degree, or a comma list where the verb sweeps or searches it; read by
    ``tp_degrees`` (``one_tp`` where the verb runs one layout)."""
    return typer.Option(default, "--tp", help=f"{purpose}.")


def tp_degrees(text: str) -> list[int]:
    """The degrees of a --tp value: '4' -> [4], '1,2,4,8' -> [1, 2, 4, 8]."""
    return ints(text, "--tp", maximum=MAX_DEVICES)


def one_tp(text: str) -> int:
    """A verb that runs one layout: the single degree of --tp."""
    from phasewise.commands._whatif import one

    return int(one(tp_degrees(text), "--tp"))


def engine_names_text() -> str:
    """The engines of the engine data (``catalog/calibration/engines.toml``), for help."""
    from phasewise.lower import GENERIC_ENGINE, engine_names

    return ", ".join(n for n in engine_names() if n != GENERIC_ENGINE)


def engine_option(*, more: str = "") -> Any:
    """--engine: the engine whose lowering and fitted constants the calibrated model uses,
    named from the engine data; ``more`` is what the verb adds (a preset, a list)."""
    from phasewise.lower import GENERIC_ENGINE

    return typer.Option(None, "--engine", help="Inference engine whose lowering and fitted "
                                               f"constants the calibrated model uses: "
                                               f"{engine_names_text()}, or {GENERIC_ENGINE} "
                                               "(default); a variant after a '+' "
                                               f"(llama.cpp+flash-attn){more}. `phasewise "
                                               "catalog engines` lists them and which are "
                                               "fitted to measurements.")
