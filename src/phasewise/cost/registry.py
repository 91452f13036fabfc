"""Cost models by name, as the CLI's --cost flag names them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from phasewise.cost.base import CostModel
from phasewise.cost.calibrated import Calibrated
from phasewise.cost.speed_of_light import SpeedOfLight
from phasewise.errors import InputError
from phasewise.local import LOCAL_DEVICE_NAME, local_calibration_path
from phasewise.specs import HardwareSpec

# name -> factory taking the device and the options (engine=, calibration=); a calibrated
# model resolves its profile's constants for the device and engine.
COST_MODELS: dict[str, Callable[..., CostModel]] = {
    "sol": lambda hardware, **options: SpeedOfLight(),
    "calibrated": lambda hardware, **options: Calibrated.for_device(hardware, **options),
}
DEFAULT_COST_MODEL = "calibrated"


def cost_model_for(name: str, hardware: HardwareSpec, *, engine: str | None = None,
                   calibration: Any = None) -> CostModel:
    """The cost model ``name`` for ``hardware``; ``engine`` and ``calibration`` (a profile
    file) matter to the calibrated model only."""
    if name not in COST_MODELS:
        raise InputError(f"unknown cost model '{name}'; choose one of {', '.join(COST_MODELS)}.")
    if calibration is None and hardware.name == LOCAL_DEVICE_NAME:
        calibration = local_calibration_path()  # this machine's own fit, when calibrated
    return COST_MODELS[name](hardware, engine=engine, calibration=calibration)
