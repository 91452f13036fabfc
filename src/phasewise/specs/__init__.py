"""Immutable descriptions of the three inputs: model, hardware, workload (+ precision, parallelism)."""

from phasewise.specs.hardware import DEVICE_CLASSES, HardwareSpec, Link, Price
from phasewise.specs.model import (
                                   MLP,
                                   Attention,
                                   CheckpointFormats,
                                   CompressedAttention,
                                   DenseMLP,
                                   LatentAttention,
                                   Layer,
                                   LayerGroup,
                                   LinearAttention,
                                   LinearMixer,
                                   LinearMLP,
                                   Mamba1,
                                   Mamba2,
                                   Mixer,
                                   ModelSpec,
                                   MoE,
                                   ParallelMixers,
)
from phasewise.specs.precision import FORMATS, NumberFormat, Precision, number_format
from phasewise.specs.workload import Parallelism, Workload

__all__ = ["DEVICE_CLASSES", "FORMATS", "HardwareSpec", "LayerGroup", "Link", "ModelSpec",
           "MLP", "Attention", "CheckpointFormats", "CompressedAttention", "DenseMLP",
           "LatentAttention", "Layer", "LinearAttention", "LinearMixer", "LinearMLP", "Mamba1",
           "Mamba2", "Mixer", "ParallelMixers", "MoE",
           "NumberFormat", "Parallelism", "Precision", "Price", "Workload", "number_format"]
