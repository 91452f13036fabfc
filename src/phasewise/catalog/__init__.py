"""The embedded data: model configs, hardware sheets, links, calibration profiles."""

from phasewise.catalog._names import normalise
from phasewise.catalog.hardware import (
                                        hardware_names,
                                        hardware_sheet,
                                        link_names,
                                        load_hardware,
                                        load_link,
)
from phasewise.catalog.hf_config import model_from_config
from phasewise.catalog.models import load_model, model_index, model_names

__all__ = ["hardware_names", "hardware_sheet", "link_names", "load_hardware", "load_link",
           "load_model", "model_from_config", "model_index", "model_names", "normalise"]
