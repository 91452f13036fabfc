"""Inference engines as documented fact: what each does that the ledger cannot see.

An engine (``catalog/calibration/engines.toml``) has traits: how it splits a prompt into
forward passes, whether its attention is fused, how its GEMMs treat block-quantized
weights and fp16 accumulation. Traits may differ by compute backend (the device's vendor
decides it, ``BACKEND_BY_VENDOR``) and by variant: a documented option or an older code path,
chosen by name (``llama.cpp+flash-attn``) or read from how a measurement describes its
software ("-fa 1", "build 1988", "May 2024"). Traits are never fitted; an engine's kernel
speeds are (``calibration``), and every variant of an engine shares them.
"""

from __future__ import annotations

import re
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

_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june",
                                       "july", "august", "september", "october", "november",
                                       "december"), start=1)}
_ISO_DATE = re.compile(r"\b(20\d\d)-(\d\d)-(\d\d)\b")
_MONTH_YEAR = re.compile(r"\b(" + "|".join(_MONTHS) + r")\s+(20\d\d)\b", re.I)
# llama.cpp's micro-batch size as its tools print or take it: "-ub 2048", "n_ubatch 2048",
# "--ubatch-size 2048", "n_ubatch = 2048".
_UBATCH_VARIANT = re.compile(r"ub\d+")  # '--engine llama.cpp+ub2048'
_UBATCH = re.compile(r"(?:-ub|--ubatch-size|n_ubatch)\s*=?\s*(\d+)")
_BUILD = re.compile(r"\bbuild\s+(?:[0-9a-f]{6,}\s+)?\(?b?(\d{3,6})\)?", re.I)


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
    """A documented option or older code path of an engine, and what selects it in a
    description of the software: any of ``when`` (a flag as written), a date before
    ``before_date``, or a build number below ``before_build``."""

    name: str
    traits: Pairs
    backend: str = ""  # the backend its traits apply on ("": every backend)
    when: tuple[str, ...] = ()
    before_date: date | None = None
    before_build: int = 0
    source: str = ""

    def selected_by(self, text: str) -> bool:
        lowered = f" {text.lower()} "
        if any(phrase.lower() in lowered for phrase in self.when):
            return True
        when = software_date(text)
        if self.before_date and when and when < self.before_date:
            return True
        build = software_build(text)
        return bool(self.before_build and build is not None and build < self.before_build)


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
    micro_batches = [v for v in variants if _UBATCH_VARIANT.fullmatch(v)]
    variants = [v for v in variants if v not in micro_batches]
    for engine in table.values():
        if key in {normalise(engine.name), *map(normalise, engine.aliases)}:
            chosen = engine.with_variants(tuple(variants)) if variants else engine
            for part in micro_batches:
                chosen = with_ubatch(chosen, int(part[2:]))
            return chosen
    raise InputError(f"unknown engine '{name}'.{nearest_hint(base, engine_names())} "
                     f"Choose one of {', '.join(engine_names())}.")


def configure(engine: Engine, software: str, backend: str = "") -> Engine:
    """``engine`` with the variants a description of its software selects ('llama.cpp
    llama-bench build 6db2b41a (1988), CUDA backend' -> llama.cpp+cublas-fp16); given the
    device's ``backend``, only variants that apply on it (a CUDA code path is not named
    for a Metal run)."""
    chosen = tuple(v.name for v in engine.variants if v.selected_by(software)
                   and (not backend or v.backend in ("", backend)))
    configured = engine.with_variants(chosen) if chosen else engine
    ubatch = software_ubatch(software)
    return with_ubatch(configured, ubatch) if ubatch else configured


def with_ubatch(engine: Engine, tokens: int) -> Engine:
    """``engine`` running prompts in micro-batches of ``tokens`` instead of its default
    (named '+ub2048', so the name resolves back to it); engines that run a prompt whole
    are left as they are."""
    if not engine.prefill_ubatch_tokens or tokens < 1:
        return engine
    return replace(engine, name=f"{engine.name}{VARIANT_SEPARATOR}ub{tokens}",
                   traits=tuple({**dict(engine.traits), "prefill_ubatch_tokens": tokens}.items()),
                   base=engine.fitted_name)


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
