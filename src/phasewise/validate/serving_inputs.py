"""A serving row's names as catalog inputs: its system (``b200_sxm``, ``gb200``) as a hardware
sheet, its model path (an HF repo id, quantized checkpoints included) as a catalog model, and
its quantization labels as the formats that device runs."""

from __future__ import annotations

from phasewise.catalog import load_hardware, load_model
from phasewise.catalog.checkpoints import network_of
from phasewise.catalog.models import catalog_model_name
from phasewise.catalog.quant_modes import serving_precision
from phasewise.catalog.system_names import resolve_system
from phasewise.specs import HardwareSpec, ModelSpec, Precision
from phasewise.validate.scenario import resolve_model


def row_device(system: str) -> HardwareSpec:
    """The hardware sheet of a row's system name (catalog/system_names.toml, then the sheets'
    aliases); an unknown one raises InputError naming the nearest known system."""
    return load_hardware(resolve_system(system))


def row_model(model_path: str) -> ModelSpec:
    """The catalog model of a row's model path: a catalog name, HF repo id or alias
    (models/index.toml), a quantized checkpoint of a catalog network (models/checkpoints.toml),
    else the name with its organisation and packaging words peeled off
    (validate.scenario.resolve_model)."""
    name = catalog_model_name(model_path) or network_of(model_path)
    return load_model(name) if name else resolve_model(model_path)


def row_precision(gemm_label: str, moe_label: str, kv_label: str, device: HardwareSpec,
                  model: ModelSpec, engine: str) -> Precision:
    """The formats the row's labels describe on ``device`` (catalog/quant_modes.toml)."""
    return serving_precision(gemm_label, moe_label, device, model, engine=engine,
                             kv_label=kv_label)
