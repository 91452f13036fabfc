"""An accelerator as the cost model needs it: peak rates, memory, links, power, price.

Everything is SI (FLOP/s, bytes, bytes/s, seconds, watts); the TOML sheets in
``catalog/hardware`` use human units and ``catalog.hardware`` converts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from phasewise.errors import InputError

DEVICE_CLASSES = ("datacenter_gpu", "workstation_gpu", "consumer_gpu", "apple_gpu", "cpu",
                  "tpu", "accelerator")

# A 16-bit float matmul runs at the same rate in bf16 and fp16 on every device that has
# both; devices with only one of them (V100, T4, M1) run the other's work in that one.
_SAME_RATE = {"bf16": "fp16", "fp16": "bf16"}


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    bandwidth_bytes_per_s: float  # per direction, per device
    latency_s: float
    kind: str = ""
    max_devices: int = 1
    source: str = ""


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    name: str
    display_name: str
    device_class: str
    peak_flops_per_s: dict[str, float]  # dense peak per math format
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    interconnect: Link | None = None
    host_link: Link | None = None
    tdp_w: float | None = None
    price_usd_per_hour: float | None = None
    vendor: str = ""
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    # The sheet's [architecture] table: facts of the chip's design that engines' kernels
    # meet and the peak figures do not show.
    architecture: str = ""  # one memory-controller and cache design ("nvidia-ada"); "": own
    fp16_accumulate_speedup: float = 1.0  # fp16-accumulate matmul rate over the fp16 peak
    integer_vector_share: float = 1.0  # 32-bit integer vector rate over the fp32 figure
    fp4_block_mma: bool = False  # has block-scaled FP4 matrix instructions (MXFP4 kernels)

    def __post_init__(self) -> None:
        if self.device_class not in DEVICE_CLASSES:
            raise InputError(f"hardware '{self.name}': device_class '{self.device_class}' is not "
                             f"one of {', '.join(DEVICE_CLASSES)}.")
        if not self.peak_flops_per_s or min(self.peak_flops_per_s.values()) <= 0:
            raise InputError(f"hardware '{self.name}': give at least one positive peak rate in "
                             "[compute], e.g. bf16_tflops = 100.")
        if self.memory_bytes <= 0 or self.memory_bandwidth_bytes_per_s <= 0:
            raise InputError(f"hardware '{self.name}': memory capacity_gb and bandwidth_gb_per_s "
                             "must be positive.")

    def __hash__(self) -> int:
        return hash((self.name, self.memory_bytes, self.memory_bandwidth_bytes_per_s,
                     tuple(sorted(self.peak_flops_per_s.items()))))

    def supports(self, math_format: str) -> bool:
        return math_format in self.peak_flops_per_s or _SAME_RATE.get(math_format) in self.peak_flops_per_s

    def peak_flops(self, math_format: str) -> float:
        """Dense peak FLOP/s for a matmul in ``math_format``."""
        if math_format in self.peak_flops_per_s:
            return self.peak_flops_per_s[math_format]
        if _SAME_RATE.get(math_format) in self.peak_flops_per_s:
            return self.peak_flops_per_s[_SAME_RATE[math_format]]
        have = ", ".join(self.peak_flops_per_s)
        raise InputError(f"{self.display_name} has no {math_format} math (it has {have}); "
                         f"choose one of those with --act-dtype/--weight-dtype.")

    @property
    def vector_flops(self) -> float:
        """Rate for non-matmul work (softmax, norms): the fp32 vector figure where given."""
        return self.peak_flops_per_s.get("fp32", min(self.peak_flops_per_s.values()))

    def ridge_point(self, math_format: str) -> float:
        """FLOP per byte where the roofline turns: peak FLOP/s / memory bandwidth."""
        return self.peak_flops(math_format) / self.memory_bandwidth_bytes_per_s
