"""Cost models by name, as the CLI's --cost flag names them."""

from __future__ import annotations

from typing import Callable

from phasewise.cost.base import CostModel
from phasewise.cost.speed_of_light import SpeedOfLight
from phasewise.errors import InputError
from phasewise.specs import HardwareSpec

# name -> factory taking the device (a calibrated model picks the device's profile)
COST_MODELS: dict[str, Callable[[HardwareSpec], CostModel]] = {
    "sol": lambda hardware: SpeedOfLight(),
}
DEFAULT_COST_MODEL = "sol"


def cost_model_for(name: str, hardware: HardwareSpec) -> CostModel:
    if name not in COST_MODELS:
        raise InputError(f"unknown cost model '{name}'; choose one of {', '.join(COST_MODELS)}.")
    return COST_MODELS[name](hardware)
