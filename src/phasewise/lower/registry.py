"""Lowerings by engine and operator kind, the way PyTorch Inductor keeps ``lowerings[aten.mm]``.

``LOWERINGS[engine][kind]`` is a function ``(op, target) -> Kernel``. The generic engine
has one for every kind; an engine registers only the kinds it runs otherwise
(``@register_lowering("llama.cpp", "gemm")``) and takes the generic entry for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from phasewise.ledger import Op
from phasewise.lower.engines import GENERIC_ENGINE, Traits
from phasewise.lower.kernel import Kernel
from phasewise.specs import HardwareSpec

GENERIC = GENERIC_ENGINE


@dataclass(frozen=True, slots=True)
class Target:
    """What a lowering knows besides the operator: the device, the math format the
    operator runs in, and the engine's documented traits on the device's backend."""

    hardware: HardwareSpec
    math_format: str
    traits: Traits


Lowering = Callable[[Op, Target], Kernel]
LOWERINGS: dict[str, dict[str, Lowering]] = {GENERIC: {}}


def register_lowering(engine: str, kind: str) -> Callable[[Lowering], Lowering]:
    """Register ``fn`` as how ``engine`` lowers operators of ``kind``."""
    def register(fn: Lowering) -> Lowering:
        LOWERINGS.setdefault(engine, {})[kind] = fn
        return fn
    return register


def lowering(engine: str, kind: str) -> Lowering:
    """The engine's lowering of ``kind``, or the generic one where it registers none."""
    return LOWERINGS.get(engine, {}).get(kind) or LOWERINGS[GENERIC][kind]


def lower(op: Op, hardware: HardwareSpec, math_format: str, traits: Traits = Traits()) -> Kernel:
    """The kernel ``traits.engine``'s lowering runs for ``op`` on ``hardware``."""
    return lowering(traits.engine, op.kind)(op, Target(hardware, math_format, traits))
