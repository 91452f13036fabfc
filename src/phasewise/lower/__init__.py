"""Lowering: the kernels each engine runs for the ledger's operators.

``ledger`` says what the model computes; ``lower`` what an engine makes of it (one module
per engine, its behaviour as data in ``catalog/calibration/engines.toml``); ``cost`` prices
the kernels and knows no engine by name.
"""

from phasewise.lower import generic, llama_cpp, serving_engines  # noqa: F401 - registrations
from phasewise.lower.engines import (
                                     GENERIC_ENGINE,
                                     Engine,
                                     Traits,
                                     backend_of,
                                     engine_names,
                                     engines,
                                     resolve_engine,
                                     traits_for,
)
from phasewise.lower.kernel import Kernel
from phasewise.lower.registry import LOWERINGS, Target, lower, lowering, register_lowering
from phasewise.lower.steps import split_prefill

__all__ = ["GENERIC_ENGINE", "LOWERINGS", "Engine", "Kernel", "Target", "Traits", "backend_of",
           "engine_names", "engines", "lower", "lowering", "register_lowering",
           "resolve_engine", "split_prefill", "traits_for"]
