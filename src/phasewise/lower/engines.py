"""Inference engines as documented fact: what each does that the ledger cannot see.

An engine (``catalog/calibration/engines.toml``) has traits: how it splits a prompt into
forward passes, whether its attention is fused, how its GEMMs treat block-quantized
weights and fp16 accumulation. Traits may differ by compute backend (the device's vendor
decides it, ``BACKEND_BY_VENDOR``) and by variant: a documented option or an older code path,
chosen by name (``llama.cpp+flash-attn``; a measurement row states it in its ``engine``
column). Traits are never fitted; an engine's kernel speeds are (``calibration``), and
every variant of an engine shares them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from functools import lru_cache
from typing import Any

from phasewise.catalog import normalise
from phasewise.catalog.calibration_data import ENGINES_PATH, engines_document
from phasewise.errors import InputError, nearest_hint
from phasewise.specs import HardwareSpec

GENERIC_ENGINE = "generic"
VARIANT_SEPARATOR = "+"

# Traits any engine's table in engines.toml may set; an engine's lowering module registers
# the kernel-dispatch keys of its own (``register_dispatch``).
COMMON_TRAITS = ("prefill_ubatch_tokens", "fp16_accumulate", "allreduce_rounds")
BACKENDS = ("cuda", "hip", "metal", "cpu", "other")
# The compute backend by GPU vendor, as llama.cpp builds it: ggml-cuda on NVIDIA GPUs, the
# same code built with HIP on AMD GPUs (GGML_USE_HIPBLAS), ggml-metal on Apple GPUs, the
# CPU backend otherwise.
BACKEND_BY_VENDOR = {"NVIDIA": "cuda", "AMD": "hip", "Apple": "metal"}
_META = ("display_name", "aliases", "source", "backend", "variant", "when", "before_date",
         "before_build")

# A variant of the prompt micro-batch: 'ub' and a token count ('llama.cpp+ub2048').
UBATCH_PREFIX = "ub"


@dataclass(frozen=True, slots=True)
class Traits:
    """What an engine does on one device that the ledger cannot see (documented, not fitted):
    the data its lowering (``lower/<engine>.py``) reads.

    ``prefill_ubatch_tokens``: a longer prompt runs as consecutive micro-batches (0: whole).
    ``gemm_peak_factor``: 16-bit GEMMs run at this multiple of the sheet's fp16 peak (the
    engine accumulates in fp16 on a device whose fp16-accumulate rate is higher).
    ``allreduce_rounds``: latency-bound rounds of the engine's own tensor-parallel
    all-reduce, whatever the device count (0: the ledger's, NCCL's tree).
    ``kernels``: the engine's kernel dispatch on this device, as its lowering module reads
    it from engines.toml (``register_dispatch``; None where it registers none).
    """

    prefill_ubatch_tokens: int = 0
    gemm_peak_factor: float = 1.0
    allreduce_rounds: int = 0
    engine: str = GENERIC_ENGINE  # the engine whose lowering (``lower/``) reads these traits
    kernels: Any = None


# How an engine's lowering reads its kernel-dispatch traits: the keys it owns in
# engines.toml, and a function of the resolved values and the device.
DispatchReader = Callable[[dict[str, Any], HardwareSpec], Any]
DISPATCH: dict[str, tuple[tuple[str, ...], DispatchReader]] = {}


def register_dispatch(engine: str, keys: tuple[str, ...], reader: DispatchReader) -> None:
    """Declare the engines.toml keys ``engine``'s lowering reads, and how it reads them."""
    DISPATCH[engine] = (keys, reader)


def trait_keys(engine: str) -> tuple[str, ...]:
    """The traits an engine's tables may set: the common ones and its lowering's own."""
    return COMMON_TRAITS + DISPATCH.get(engine, ((), None))[0]


Pairs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Variant:
    """A documented option or older code path of an engine, and what says a run used it
    (documentation shown by ``catalog --engine``; ``catalog.software_text`` reads it from a
    description of the software): any of ``when`` (a flag as written), a date before
    ``before_date``, or a build number below ``before_build``."""

    name: str
    traits: Pairs
    backend: str = ""  # the backend its traits apply on ("": every backend)
    when: tuple[str, ...] = ()
    before_date: date | None = None
    before_build: int = 0
    source: str = ""


@dataclass(frozen=True, slots=True)
class Engine:
    """An engine, possibly with variants applied; ``base`` names the fitted engine."""

    name: str
    display_name: str
    aliases: tuple[str, ...]
    source: str
    traits: Pairs = ()
    backend_traits: tuple[tuple[str, Pairs], ...] = ()
    variants: tuple[Variant, ...] = ()
    applied: tuple[str, ...] = ()
    base: str = ""

    @property
    def fitted_name(self) -> str:
        """The engine whose fitted constants this one uses (variants share them)."""
        return self.base or self.name

    @property
    def prefill_ubatch_tokens(self) -> int:
        return int(dict(self.traits).get("prefill_ubatch_tokens", 0))

    def trait_values(self, backend: str) -> dict[str, Any]:
        """The engine's traits, then its table for ``backend``, then each applied variant
        whose backend this is."""
        values = {**dict(self.traits), **dict(dict(self.backend_traits).get(backend, ()))}
        for variant in self.variants:
            if variant.name in self.applied and variant.backend in ("", backend):
                values.update(dict(variant.traits))
        return values

    def with_variants(self, names: tuple[str, ...]) -> Engine:
        known = {v.name for v in self.variants}
        unknown = [n for n in names if n not in known]
        if unknown:
            choices = ", ".join(sorted(known)) or "none"
            raise InputError(f"engine '{self.fitted_name}' has no variant "
                             f"'{unknown[0]}'; its variants: {choices}.")
        ordered = tuple(v.name for v in self.variants if v.name in names)
        base = self.fitted_name
        return replace(self, name=VARIANT_SEPARATOR.join((base, *ordered)), applied=ordered,
                       base=base)


@lru_cache(maxsize=1)
def engines() -> dict[str, Engine]:
    """Every engine of ``engines.toml``, by name (a pure function of the bundled file)."""
    return {name: _engine(name, d) for name, d in engines_document().items()}


def _engine(name: str, table: dict[str, Any]) -> Engine:
    backends = table.get("backend", {})
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise InputError(f"{ENGINES_PATH}: [{name}] names unknown backend(s) "
                         f"{', '.join(unknown)}; use {', '.join(BACKENDS)}.")
    variants = tuple(_variant(name, v, t) for v, t in table.get("variant", {}).items())
    return Engine(name, str(table.get("display_name", name)), tuple(table.get("aliases", ())),
                  str(table.get("source", "")), _trait_pairs(name, name, table),
                  tuple((b, _trait_pairs(name, f"{name}.backend.{b}", t))
                        for b, t in backends.items()),
                  variants)


def _variant(engine: str, name: str, table: dict[str, Any]) -> Variant:
    backend = str(table.get("backend", ""))
    if backend and backend not in BACKENDS:
        raise InputError(f"{ENGINES_PATH}: [{engine}.variant.{name}] backend '{backend}' is "
                         f"not one of {', '.join(BACKENDS)}.")
    before = table.get("before_date")
    return Variant(name, _trait_pairs(engine, f"{engine}.variant.{name}", table), backend,
                   tuple(table.get("when", ())),
                   date.fromisoformat(str(before)) if before else None,
                   int(table.get("before_build", 0)), str(table.get("source", "")))


def _trait_pairs(engine: str, where: str, table: dict[str, Any]) -> Pairs:
    known, pairs = trait_keys(engine), []
    for key, value in table.items():
        if key in known:
            pairs.append((key, tuple(value) if isinstance(value, list) else value))
        elif key not in _META and not key.endswith("_source"):
            raise InputError(f"{ENGINES_PATH}: [{where}] has unknown trait '{key}'; known: "
                             f"{', '.join(known)}.")
    return tuple(pairs)


def engine_names() -> list[str]:
    return [name for name in engines() if name != "unrecorded"]


def resolve_engine(name: str | None) -> Engine:
    """An engine by name or alias ('TensorRT-LLM' -> trtllm), with variants after a '+'
    ('llama.cpp+flash-attn'); None is the generic engine."""
    table = engines()
    if name is None:
        return table[GENERIC_ENGINE]
    base, *variants = (part.strip() for part in name.split(VARIANT_SEPARATOR))
    key = normalise(base)
    micro_batches = [v for v in variants if _is_ubatch(v)]
    variants = [v for v in variants if v not in micro_batches]
    for engine in table.values():
        if key in {normalise(engine.name), *map(normalise, engine.aliases)}:
            chosen = engine.with_variants(tuple(variants)) if variants else engine
            for part in micro_batches:
                chosen = with_ubatch(chosen, int(part.removeprefix(UBATCH_PREFIX)))
            return chosen
    raise InputError(f"unknown engine '{name}'.{nearest_hint(base, engine_names())} "
                     f"Choose one of {', '.join(engine_names())}.")


def _is_ubatch(part: str) -> bool:
    count = part.removeprefix(UBATCH_PREFIX)
    return part.startswith(UBATCH_PREFIX) and count.isdigit()


def with_ubatch(engine: Engine, tokens: int) -> Engine:
    """``engine`` running prompts in micro-batches of ``tokens`` instead of its default
    (named '+ub2048', so the name resolves back to it); engines that run a prompt whole
    are left as they are."""
    if not engine.prefill_ubatch_tokens or tokens < 1:
        return engine
    return replace(engine, name=f"{engine.name}{VARIANT_SEPARATOR}{UBATCH_PREFIX}{tokens}",
                   traits=tuple({**dict(engine.traits), "prefill_ubatch_tokens": tokens}.items()),
                   base=engine.fitted_name)


def backend_of(hardware: HardwareSpec) -> str:
    """The compute backend engines use on ``hardware``: a device of class cpu uses "cpu",
    others their vendor's (``BACKEND_BY_VENDOR``), "other" for a vendor not listed."""
    if hardware.device_class == "cpu":
        return "cpu"
    return BACKEND_BY_VENDOR.get(hardware.vendor, "other")


def fp16_accumulate_speedup(hardware: HardwareSpec) -> float:
    """How much faster the device runs fp16 matmuls accumulating in fp16 than at the
    sheet's fp16 (fp32-accumulate) peak (the sheet's [architecture] table; 1 where equal)."""
    return hardware.fp16_accumulate_speedup


def architecture_of(hardware: HardwareSpec) -> str:
    """The device's architecture (the sheet's [architecture] name; "" where it has none)."""
    return hardware.architecture


def traits_for(engine: Engine, hardware: HardwareSpec) -> Traits:
    """The engine's documented behaviour on ``hardware``'s backend."""
    values = engine.trait_values(backend_of(hardware))
    reader = DISPATCH.get(engine.fitted_name, ((), None))[1]
    return Traits(
        prefill_ubatch_tokens=int(values.get("prefill_ubatch_tokens", 0)),
        gemm_peak_factor=fp16_accumulate_speedup(hardware) if values.get("fp16_accumulate")
        else 1.0,
        allreduce_rounds=int(values.get("allreduce_rounds", 0)),
        engine=engine.fitted_name,
        kernels=reader(values, hardware) if reader else None)
