"""Typed results of the measure layer: device ceilings, profile points, a profile document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Ceilings(_Frozen):
    """What the local device really reaches: the roofs measured points are set against.

    ``copy_bytes_per_s`` counts the bytes read and the bytes written (STREAM's convention);
    ``read_bytes_per_s`` is a reduction that only reads. MBU is taken against the copy figure.
    """

    device: str  # "cpu" or "cuda:N"
    device_name: str
    device_class: str  # a specs.DEVICE_CLASSES entry
    threads: int
    clock: str  # timing.CLOCKS: how each repeat was timed
    versions: dict[str, str]
    memory_bytes: float
    gemm_flops_per_s: dict[str, float]  # median of square GEMMs, per math format
    gemm_size: int
    copy_bytes_per_s: float
    read_bytes_per_s: float
    buffer_bytes: int
    warmup: int
    repeats: int
    notes: list[str] = []
    vector_bits: int = 0  # SIMD width torch's CPU kernels ran with (0: a GPU, or not said)


class LayerTime(_Frozen):
    """One layer group's share of a measured step beside the ledger's count for it."""

    layers: str  # the ledger's label of the group: "mamba2/- ×27", or the parts outside
    time_s: float  # the group's share of the step's measured median
    flops: float
    memory_bytes: float
    sol_time_s: float
    expected_time_s: float | None = None


class ProfilePoint(_Frozen):
    """One measured step beside the ledger's arithmetic and the cost model's prediction."""

    phase: str  # "prefill" | "decode"
    label: str  # llama-bench style: pp512, tg@1024
    batch_size: int
    new_tokens: int  # per sequence
    context_tokens: int  # cached before the step
    time_s: float  # median
    min_time_s: float
    repeats: int
    tokens_per_s: float
    flops: float  # from the ledger
    bytes: dict[str, float]  # from the ledger, by class
    memory_bytes: float
    arithmetic_intensity: float
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    mfu: float  # against the measured GEMM ceiling of the run's format
    mbu: float  # against the measured copy bandwidth
    predicted_bound: str
    sol_time_s: float  # speed of light on the measured ceilings
    expected_time_s: float | None = None  # the calibrated cost model, when one is given
    cuda_graph: bool = False
    layers: list[LayerTime] = []  # by layer group, from instrumented passes

    @property
    def ttft_s(self) -> float | None:
        return self.time_s if self.phase == "prefill" else None

    @property
    def tpot_s(self) -> float | None:
        return self.time_s if self.phase == "decode" else None


class Profile(_Frozen):
    """One ``phasewise profile`` run: inputs, ceilings, and the points measured so far."""

    schema_version: int = SCHEMA_VERSION
    tool_version: str
    model: str
    model_spec: dict[str, Any] = {}  # the ModelSpec's fields, so the run can be re-priced
    weights: str  # "random (seed N)" or the file it came from
    dtype: str
    device: str
    ceilings: Ceilings
    points: list[ProfilePoint] = []
    complete: bool = False  # False while running or after an interruption
