"""Number formats and the per-class precision of a run (weights, activations, KV cache).

A format has a storage size in bits per element *including* its block scales, and a math
format: the peak FLOP/s column of a hardware sheet that a matmul in this format runs at.
Weight-only formats (int4, the GGUF block formats) are dequantized into the activation
format, so their math format is the activation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from phasewise.errors import InputError, nearest_hint

MODULE_CLASSES = ("embed", "attention", "mlp", "experts", "lm_head")
# A format given as "auto" is the checkpoint's own (Precision.for_model); a checkpoint that
# declares none is bf16.
CHECKPOINT = "auto"
UNQUANTIZED = "bf16"


@dataclass(frozen=True, slots=True)
class NumberFormat:
    name: str
    bits_per_element: float
    math_format: str | None  # None: weight-only storage, computed in the activation format
    source: str
    # A file type that stores a MoE's routed experts in another format than the rest
    # (llama.cpp's MXFP4_MOE): their bits per weight (None: as every other weight) and
    # their block format (kernels with native support multiply it as it is stored).
    expert_bits_per_element: float | None = None
    expert_block_format: str = ""

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8

    @property
    def expert_bytes_per_element(self) -> float:
        bits = self.expert_bits_per_element
        return (self.bits_per_element if bits is None else bits) / 8


_GGML_BLOCKS = (
    "ggml block layouts (ggml/src/ggml-common.h): bytes per block of 32 (or 256 for k-quants) "
    "weights including fp16 scales and mins"
)
_LLAMA_BENCH_MIX = (
    "mixture of k-quant tensor types chosen by llama.cpp's quantize; average bits per weight "
    "from llama-bench's reported size for Llama-3-8B (8.03 B params): {gib} GiB"
)

_QUANTIZE_MIX = (
    "mixture of k-quant tensor types chosen by llama.cpp's quantize; average bits per weight "
    "from the size its type table lists for Llama-3-8B (8.03 B params; tools/quantize/"
    "quantize.cpp, QUANT_OPTIONS): {gib} GiB"
)
_QUANTIZE_BPW = (
    "llama.cpp's quantize type table (tools/quantize/quantize.cpp, QUANT_OPTIONS): {bpw} bits "
    "per weight, block scales included"
)

FORMATS: dict[str, NumberFormat] = {
    f.name: f
    for f in (
        NumberFormat("fp32", 32, "fp32", "IEEE 754 binary32"),
        NumberFormat("tf32", 32, "tf32", "stored as fp32; tensor-core math in tf32"),
        NumberFormat("bf16", 16, "bf16", "bfloat16"),
        NumberFormat("fp16", 16, "fp16", "IEEE 754 binary16"),
        NumberFormat("fp8", 8, "fp8", "OCP FP8 (e4m3/e5m2); per-tensor scales negligible"),
        NumberFormat("fp8_block", 8 + 32 / (128 * 128), "fp8",
                     "FP8 e4m3 with one fp32 scale per 128×128 block (DeepSeek-V3's "
                     "quantization_config weight_block_size [128, 128])"),
        NumberFormat("int8", 8, "int8", "8-bit integer; per-channel scales negligible"),
        NumberFormat("fp6", 6.25, "fp6", "MXFP6: 32 e2m3/e3m2 values share one 8-bit scale "
                     "(OCP Microscaling Formats (MX) v1.0 spec)"),
        NumberFormat("fp4", 4.25, "fp4", "MXFP4: 32 e2m1 values share one 8-bit scale (OCP MX spec)"),
        NumberFormat("nvfp4", 4.5, "fp4", "NVFP4: 16 e2m1 values share one fp8 scale"),
        NumberFormat("int4", 4.125, None, "GPTQ/AWQ int4, group size 128 with an fp16 scale per group"),
        NumberFormat("int4_g64", 4.25, None, "int4, group size 64 with a 16-bit scale per group"),
        NumberFormat("int4_g32", 4.5, None, "int4, group size 32 with a 16-bit scale per group "
                     "(compressed-tensors pack-quantized, e.g. Kimi-K2.5's experts)"),
        # GGUF tensor types: real bits per weight including block scales.
        NumberFormat("F32", 32, None, "GGUF F32"),
        NumberFormat("F16", 16, None, "GGUF F16"),
        NumberFormat("BF16", 16, None, "GGUF BF16"),
        NumberFormat("Q8_0", 8.5, None, _GGML_BLOCKS + ": Q8_0 34 B / 32"),
        NumberFormat("Q6_K", 6.5625, None, _GGML_BLOCKS + ": Q6_K 210 B / 256"),
        NumberFormat("Q5_0", 5.5, None, _GGML_BLOCKS + ": Q5_0 22 B / 32"),
        NumberFormat("Q5_1", 6.0, None, _GGML_BLOCKS + ": Q5_1 24 B / 32"),
        NumberFormat("Q5_K", 5.5, None, _GGML_BLOCKS + ": Q5_K 176 B / 256"),
        NumberFormat("Q4_0", 4.5, None, _GGML_BLOCKS + ": Q4_0 18 B / 32"),
        NumberFormat("Q4_1", 5.0, None, _GGML_BLOCKS + ": Q4_1 20 B / 32"),
        NumberFormat("Q4_K", 4.5, None, _GGML_BLOCKS + ": Q4_K 144 B / 256"),
        NumberFormat("Q3_K", 3.4375, None, _GGML_BLOCKS + ": Q3_K 110 B / 256"),
        NumberFormat("Q2_K", 2.625, None, _GGML_BLOCKS + ": Q2_K 84 B / 256"),
        NumberFormat("Q8_K", 9.125, None, _GGML_BLOCKS + ": Q8_K 292 B / 256"),
        NumberFormat("Q6_K_M", 6.57, None, _LLAMA_BENCH_MIX.format(gib=6.14)),
        NumberFormat("Q5_K_M", 5.70, None, _LLAMA_BENCH_MIX.format(gib=5.33)),
        NumberFormat("Q5_K_S", 5.52, None, _LLAMA_BENCH_MIX.format(gib=5.16)),
        NumberFormat("Q4_K_M", 4.89, None, _LLAMA_BENCH_MIX.format(gib=4.58)),
        NumberFormat("Q4_K_S", 4.67, None, _LLAMA_BENCH_MIX.format(gib=4.37)),
        NumberFormat("Q3_K_M", 3.91, None, _LLAMA_BENCH_MIX.format(gib=3.66)),
        NumberFormat("Q3_K_S", 3.65, None, _QUANTIZE_MIX.format(gib=3.41)),
        NumberFormat("Q3_K_L", 4.31, None, _QUANTIZE_MIX.format(gib=4.03)),
        NumberFormat("Q2_K_S", 3.17, None, _QUANTIZE_MIX.format(gib=2.96)),
        NumberFormat("MXFP4_MOE", 8.5, None, _GGML_BLOCKS + ": llama.cpp's MXFP4_MOE file type "
                     "(llama-quant.cpp: 'MoE tensors -> MXFP4, other tensors -> Q8_0', the "
                     "output too): Q8_0 34 B / 32 for every weight but the routed experts, "
                     "MXFP4 17 B / 32 for those (one e8m0 scale byte and 32 e2m1 values)",
                     expert_bits_per_element=4.25, expert_block_format="MXFP4"),
        # The i-quants and ternary types: bits per weight as llama.cpp's quantize lists them.
        *(NumberFormat(name, bpw, None, _QUANTIZE_BPW.format(bpw=bpw)) for name, bpw in (
            ("IQ1_S", 1.56), ("IQ1_M", 1.75), ("IQ2_XXS", 2.06), ("IQ2_XS", 2.31),
            ("IQ2_S", 2.5), ("IQ2_M", 2.7), ("IQ3_XXS", 3.06), ("IQ3_XS", 3.3),
            ("IQ3_S", 3.44), ("IQ3_M", 3.66), ("IQ4_XS", 4.25), ("IQ4_NL", 4.5),
            ("TQ1_0", 1.69), ("TQ2_0", 2.06))),
    )
}

_ALIASES = {
    "float32": "fp32", "f32": "fp32", "float": "fp32",
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "f16": "F16",
    "fp8_e4m3": "fp8", "e4m3": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8",
    "mxfp4": "fp4", "mxfp6": "fp6", "w4a16": "int4", "awq": "int4", "gptq": "int4",
    "mxfp4 moe": "MXFP4_MOE", "mxfp4-moe": "MXFP4_MOE",
}


def number_format(name: str) -> NumberFormat:
    """Look a format up by name, case-insensitively for the plain formats."""
    if not isinstance(name, str):
        raise InputError(f"a number format is a name such as bf16 or Q4_K_M, got {name!r}.")
    if name in FORMATS:
        return FORMATS[name]
    key = _ALIASES.get(name.lower(), name.lower())
    if key in FORMATS:
        return FORMATS[key]
    upper = name.upper()
    if upper in FORMATS:
        return FORMATS[upper]
    raise InputError(
        f"unknown number format '{name}'.{nearest_hint(name, list(FORMATS))} "
        f"Known: {', '.join(FORMATS)}."
    )


# Matmul formats narrower than 16 bits: they run at their own rate only when both operands
# are in them.
LOW_PRECISION_MATH = ("fp8", "int8", "fp6", "fp4")


@dataclass(frozen=True, slots=True)
class Precision:
    """Formats per byte class: weights, activations and KV cache.

    ``kv_keep`` is the fraction of each sequence's cached tokens the KV cache keeps
    (eviction or compression in the style of H2O and SnapKV): the cache holds that fraction,
    and a step reads and attends to it; 1 keeps everything.

    ``module_weights`` gives some module classes ("embed", "attention", "mlp", "experts",
    "lm_head") a format of their own, as a checkpoint's quantization_config does (NVFP4
    experts beside bf16 attention); the others take ``weights``. ``source`` says where the
    formats came from.
    """

    weights: str = CHECKPOINT
    activations: str = "bf16"
    kv_cache: str = CHECKPOINT
    kv_keep: float = 1.0
    module_weights: tuple[tuple[str, str], ...] = ()
    source: str = ""
    # The peak column a device runs the GEMMs at when it differs from what the formats alone
    # imply ("" otherwise): set by specs.compute.precision_on for one device.
    compute: str = ""
    # Attention projections in a format of their own (module name, format), as a checkpoint
    # that quantizes o_proj but not the other MLA projections stores them; the ledger weighs
    # each mixer's bytes per weight by its projections' parameters.
    projection_weights: tuple[tuple[str, str], ...] = ()
    # The format collectives move the hidden states in ("": the activations', as the
    # calibration's fit assumed; ledger.build.COLLECTIVES_IN_16_BITS): a served step sets
    # the engines' 16-bit one (serving.pricing).
    collectives: str = ""
    _class_bytes: dict[str, float] = field(default_factory=dict, init=False, repr=False,
                                           compare=False)
    _projection_bytes: dict[str, float] = field(default_factory=dict, init=False, repr=False,
                                                compare=False)

    def __post_init__(self) -> None:
        for name in ("weights", "activations", "kv_cache"):
            value = getattr(self, name)
            if name != "activations" and value == CHECKPOINT:
                continue
            object.__setattr__(self, name, number_format(value).name)
        modules = tuple((cls, number_format(fmt).name) for cls, fmt in self.module_weights)
        unknown = [cls for cls, _ in modules if cls not in MODULE_CLASSES]
        if unknown:
            raise InputError(f"unknown module class {unknown[0]!r} in module_weights; known: "
                             f"{', '.join(MODULE_CLASSES)}.")
        object.__setattr__(self, "module_weights", modules)
        projections = tuple((part, number_format(fmt).name) for part, fmt in self.projection_weights)
        object.__setattr__(self, "projection_weights", projections)
        object.__setattr__(self, "_projection_bytes", {
            part: number_format(fmt).bytes_per_element for part, fmt in projections})
        own = dict(modules)
        object.__setattr__(self, "_class_bytes", {
            cls: (number_format(own[cls]).bytes_per_element if cls in own
                  else self.expert_weight_bytes if cls == "experts" else self.weight_bytes)
            for cls in MODULE_CLASSES})
        if number_format(self.activations).math_format is None:
            raise InputError(
                f"activations cannot be stored in the weight-only format '{self.activations}'; "
                "use bf16, fp16, fp32 or fp8 for the activations."
            )
        if isinstance(self.kv_keep, bool) or not isinstance(self.kv_keep, (int, float)) \
                or not 0 < self.kv_keep <= 1:
            raise InputError(f"kv_keep {self.kv_keep!r} is not a fraction of the cache; give a "
                             "number in (0, 1], e.g. 0.25 to keep a quarter of cached tokens.")

    def for_model(self, model: Any) -> Precision:
        """These formats with ``auto`` replaced by the checkpoint's own (``model.checkpoint``,
        a ``CheckpointFormats``): its format per module class and its KV-cache format, else
        bf16. Explicit formats win over the checkpoint's."""
        if self.weights != CHECKPOINT and self.kv_cache != CHECKPOINT:
            return self
        checkpoint = getattr(model, "checkpoint", None)
        weights, modules, source = self.weights, self.module_weights, self.source
        projections = self.projection_weights
        if weights == CHECKPOINT:
            weights, modules, source = UNQUANTIZED, (), "bf16 (the checkpoint declares no format)"
            if checkpoint is not None:
                modules = tuple(checkpoint.weights)
                experts = dict(modules).get("experts") if model.is_moe else None
                weights = experts or dict(modules).get("mlp") or UNQUANTIZED
                source = checkpoint.source
                projections = tuple(checkpoint.projections)
        kv = self.kv_cache
        if kv == CHECKPOINT:
            kv = (checkpoint.kv_cache if checkpoint is not None else None) or UNQUANTIZED
        return Precision(weights, self.activations, kv, self.kv_keep, modules, source,
                         projection_weights=projections, collectives=self.collectives)

    @property
    def _weights_format(self) -> NumberFormat:
        return number_format(UNQUANTIZED if self.weights == CHECKPOINT else self.weights)

    @property
    def weight_bytes(self) -> float:
        return self._weights_format.bytes_per_element

    def weight_format_for(self, module_class: str) -> str:
        """The format of ``module_class``'s weights: its own, else ``weights``."""
        return dict(self.module_weights).get(module_class, self.weights)

    @property
    def projection_bytes(self) -> dict[str, float]:
        """Bytes per weight of the attention projections with a format of their own."""
        return self._projection_bytes

    def weight_bytes_for(self, module_class: str) -> float:
        """Bytes per weight of ``module_class``; routed experts of a file type that stores
        them apart (MXFP4_MOE) take that file type's expert format."""
        return self._class_bytes[module_class]

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes per routed-expert weight: the weights' own, unless their format is a file
        type that stores the experts apart (MXFP4_MOE)."""
        return self._weights_format.expert_bytes_per_element

    @property
    def expert_block_format(self) -> str:
        """The block format of routed experts a file type stores apart ('MXFP4' for
        MXFP4_MOE), '' otherwise."""
        return self._weights_format.expert_block_format

    @property
    def activation_bytes(self) -> float:
        return number_format(self.activations).bytes_per_element

    @property
    def collective_bytes(self) -> float | None:
        """Bytes per element of the collectives' format where one is set, else None."""
        return number_format(self.collectives).bytes_per_element if self.collectives else None

    @property
    def kv_bytes(self) -> float:
        return number_format(UNQUANTIZED if self.kv_cache == CHECKPOINT
                             else self.kv_cache).bytes_per_element

    def kept_tokens(self, cached_tokens: int) -> int:
        """Cached tokens the KV cache holds after eviction: round(kv_keep × cached)."""
        return cached_tokens if self.kv_keep == 1 else round(cached_tokens * self.kv_keep)

    @property
    def math_format(self) -> str:
        """The peak-FLOP/s column GEMMs run at: fp8 only when weights and activations both are
        (unless a device's choice, ``compute``, says otherwise)."""
        if self.compute:
            return self.compute
        weight_math = self._weights_format.math_format
        act_math = number_format(self.activations).math_format
        if weight_math in LOW_PRECISION_MATH and act_math == weight_math:
            return weight_math
        if act_math in LOW_PRECISION_MATH and weight_math != act_math:
            # fp8 activations against 16-bit weights run at the wider format's rate.
            return weight_math if weight_math in ("bf16", "fp16", "fp32") else "bf16"
        return act_math  # type: ignore[return-value]
