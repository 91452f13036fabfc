"""phasewise: where the time goes in the two phases of LLM inference.

The verbs are functions (``phasewise.api``): ``estimate``, ``explain``, ``compare``,
``what_if``, ``speculative``, ``disaggregate``, ``batch_sweep``, ``tp_scaling``,
``simulate`` and ``validate``, each returning a typed result; bad input raises
``InputError`` naming the parameter.
"""

from typing import Any

import phasewise.validate  # noqa: E402,F401 - the subpackage first, then its name is the verb
from phasewise.errors import InputError  # noqa: E402

# Bound after the subpackage import, so `phasewise.estimate` is the function.
from phasewise.estimate.core import estimate  # noqa: E402
from phasewise.specs import Parallelism, Precision, Workload  # noqa: E402
from phasewise.version import __version__

_LAZY = ("batch_sweep", "compare", "disaggregate", "explain", "simulate", "speculative",
         "tp_scaling", "what_if")

__all__ = ["__version__", "InputError", "Parallelism", "Precision", "Workload", "estimate",
           "validate", *_LAZY]


def validate(measurements: Any = None, **mode: Any) -> Any:
    """Score the estimates against measurement CSVs (phasewise.api.validate)."""
    from phasewise.api import validate as run

    return run(measurements, **mode)


def __getattr__(name: str) -> Any:
    """The other verbs, imported on first use (``phasewise`` itself stays quick to load)."""
    if name in _LAZY:
        from phasewise import api

        return getattr(api, name)
    raise AttributeError(f"module 'phasewise' has no attribute '{name}'")
