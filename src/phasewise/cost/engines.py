"""Engines live in ``phasewise.lower.engines`` (their traits are what lowering reads);
these names stay importable from here."""

from phasewise.lower.engines import (
                                     BACKENDS,
                                     GENERIC_ENGINE,
                                     Engine,
                                     Traits,
                                     Variant,
                                     architecture_of,
                                     backend_of,
                                     engine_names,
                                     engines,
                                     fp16_accumulate_speedup,
                                     resolve_engine,
                                     traits_for,
                                     with_ubatch,
)

__all__ = ["BACKENDS", "GENERIC_ENGINE", "Engine", "Traits", "Variant", "architecture_of",
           "backend_of", "engine_names", "engines", "fp16_accumulate_speedup",
           "resolve_engine", "traits_for", "with_ubatch"]
