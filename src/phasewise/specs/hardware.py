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
    topology: str = ""  # how the domain is wired: "NVSwitch, 72 GPUs", "3D torus", ...


# A bought device's price is spread over this many years of round-the-clock use unless its
# sheet says otherwise: three years is the straight-line depreciation life hyperscalers and
# GPU clouds used for servers before 2022 and the common planning horizon for a workstation.
DEFAULT_AMORTISATION_YEARS = 3.0
HOURS_PER_YEAR = 365.0 * 24.0


@dataclass(frozen=True, slots=True)
class Price:
    """What one device-hour costs, and where that figure comes from.

    ``basis`` is "on-demand" (a cloud list price per device-hour), "purchase" (a bought
    part: purchase_usd / (amortisation_years · 8,760 h), power and hosting excluded) or
    "override" (--price)."""

    usd_per_hour: float
    basis: str
    source: str = ""
    date: str = ""
    provider: str = ""
    purchase_usd: float | None = None
    amortisation_years: float | None = None

    @classmethod
    def bought(cls, purchase_usd: float, *, years: float = DEFAULT_AMORTISATION_YEARS,
               source: str = "", date: str = "", provider: str = "") -> Price:
        """usd_per_hour = purchase_usd / (years · 365 · 24): the part used round the clock."""
        return cls(purchase_usd / (years * HOURS_PER_YEAR), "purchase", source, date, provider,
                   purchase_usd, years)

    @property
    def label(self) -> str:
        """One line for a report: the hourly figure, its basis, who and when."""
        if self.basis == "purchase" and self.purchase_usd is not None:
            what = (f"${self.purchase_usd:,.0f} purchase over {self.amortisation_years:g} years "
                    f"= ${self.usd_per_hour:,.3f}/h")
        else:
            what = f"${self.usd_per_hour:,.3f}/h {self.basis}"
        who = self.provider or self.source.split(" (")[0][:60]
        where = ", ".join(x for x in (who, self.date) if x)
        return what + (f" ({where})" if where else "")


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
    price: Price | None = None  # the hourly price with its basis, source and date
    native_formats: tuple[str, ...] = ()  # formats the matrix units take; () = every peak
    scale_out: Link | None = None  # the NIC a layout wider than the interconnect's domain uses
    # The sheet's [architecture] table: facts of the chip's design that engines' kernels
    # meet and the peak figures do not show.
    architecture: str = ""  # one memory-controller and cache design ("nvidia-ada"); "": own
    fp16_accumulate_speedup: float = 1.0  # fp16-accumulate matmul rate over the fp16 peak
    integer_vector_share: float = 1.0  # 32-bit integer vector rate over the fp32 figure
    fp4_block_mma: bool = False  # has block-scaled FP4 matrix instructions (MXFP4 kernels)
    vector_bits: int = 0  # SIMD width the sheet's fp32 figure was reached with (0: not said)

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
        if self.price is not None and self.price.usd_per_hour != self.price_usd_per_hour:
            # the hourly figure was changed (a what-if, a test): its provenance no longer applies
            object.__setattr__(self, "price", None)

    def __hash__(self) -> int:
        return hash((self.name, self.memory_bytes, self.memory_bandwidth_bytes_per_s,
                     tuple(sorted(self.peak_flops_per_s.items()))))

    def supports(self, math_format: str) -> bool:
        return self._rate_format(math_format) is not None

    def _rate_format(self, math_format: str) -> str | None:
        """The sheet's figure a matmul in ``math_format`` runs at: its own, the other 16-bit
        format's, or on a CPU without a 16-bit figure the fp32 one (a CPU without 16-bit
        matrix instructions widens 16-bit operands to fp32, as ggml's vec_dot_f16 does
        through F16C)."""
        rates = self.peak_flops_per_s
        for fmt in (math_format, _SAME_RATE.get(math_format)):
            if fmt in rates:
                return fmt
        if self.device_class == "cpu" and math_format in _SAME_RATE and "fp32" in rates:
            return "fp32"
        return None

    def peak_flops(self, math_format: str) -> float:
        """Dense peak FLOP/s for a matmul in ``math_format``."""
        fmt = self._rate_format(math_format)
        if fmt is not None:
            return self.peak_flops_per_s[fmt]
        have = ", ".join(self.peak_flops_per_s)
        raise InputError(f"{self.display_name} has no {math_format} math (it has {have}); "
                         "choose weight and activation formats that run in one of those.")

    def computes_natively(self, math_format: str) -> bool:
        """Whether the matrix units take ``math_format`` as it is (the sheet's native_formats,
        or every format it gives a peak for when it lists none). "nvfp4" asks for NVIDIA's
        16-value FP4 blocks with fp8 scales, which some FP4 units (MXFP4 only) do not take."""
        if not self.native_formats:
            return self.supports("fp4" if math_format == "nvfp4" else math_format)
        return math_format in self.native_formats or _SAME_RATE.get(math_format) in self.native_formats

    @property
    def vector_flops(self) -> float:
        """Rate for non-matmul work (softmax, norms): the fp32 vector figure where given."""
        return self.peak_flops_per_s.get("fp32", min(self.peak_flops_per_s.values()))

    def ridge_point(self, math_format: str) -> float:
        """FLOP per byte where the roofline turns: peak FLOP/s / memory bandwidth."""
        return self.peak_flops(math_format) / self.memory_bandwidth_bytes_per_s
