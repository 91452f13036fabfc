"""How llama.cpp (ggml) runs the ledger's operators: its kernel dispatch, as data.

Every rule below is keyed by a trait of ``engines.toml``'s ``[llama.cpp]`` tables (per
compute backend and per variant), whose ``*_source`` entries cite the ggml code that
makes the choice. A GEMM:

- over ``dequant_buffer_above_tokens`` tokens (HIP, older CUDA) first converts its
  block-quantized weights into a 16-bit buffer in a kernel of its own (extra bytes: the
  stored weights read, 2 bytes per weight written), then multiplies the 16-bit copy;
- of routed experts over ``moe_tile_above_tokens`` tokens computes each expert's tokens in
  column tiles whose width MMQ picks against all the pass's tokens (``moe_tile_tokens``):
  empty columns are computed too; a dense GEMM over ``gemm_tile_above_tokens`` tokens
  computes whole tiles of ``gemm_tile_tokens`` (Metal's kernel_mul_mm);
- of few tokens may read its weights more than once (``matvec_tokens_per_pass``; routed
  experts under ``moe_matvec_below_tokens``: once per routed token);
- of at most ``matvec_max_tokens`` tokens runs matrix-vector kernels on the vector ALUs
  (MMVQ, mul_mv), whose per-block unpacking is shared by a pass's tokens
  (``matvec_unpack_share``), in integer instructions where ``matvec_integer`` says so;
- of MXFP4 weights multiplies them on block-scaled FP4 matrix units (``mxfp4_fp4_mma``);
- in fp16 accumulates in fp16 on CUDA and HIP (``fp16_accumulate``).

Attention without ``-fa`` runs as two matmuls and a soft-max with the scores in memory
(``attention_score_bytes`` per score), scoring every new token against every KV cell of
the pass and masking the causal rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from phasewise.ledger import Op
from phasewise.lower.engines import Traits, register_dispatch
from phasewise.lower.generic import dequantized, fp16_accumulate, weight_elements
from phasewise.lower.kernel import Kernel
from phasewise.lower.registry import Target, register_lowering
from phasewise.specs import HardwareSpec

ENGINE = "llama.cpp"
# Bytes per weight of the 16-bit buffer a dequantize-then-multiply GEMM converts into.
BUFFER_BYTES_PER_WEIGHT = 2.0
# FLOPs per attention score and head dimension: QK^T and PV are 2 FLOPs each per element.
ATTENTION_FLOPS_PER_SCORE_DIM = 4.0
# MMQ's column-tile widths: steps of 8, of 16 from 48 on (ggml-cuda/mmq.cuh).
TILE_STEP, WIDE_TILE_FROM, WIDE_TILE_STEP = 8, 48, 16


@dataclass(frozen=True, slots=True)
class Dispatch:
    """llama.cpp's kernel choices on one device, from its engines.toml tables (per backend
    and variant; each key's ``*_source`` there cites the ggml code).

    ``dequant_buffer_above_tokens``: GEMMs over this many tokens first dequantize
    block-quantized weights into a 16-bit buffer, then multiply it (0: never).
    ``attention_score_bytes``: bytes per attention score an unfused attention moves
    through memory (scores written, soft-maxed, read back); 0 for fused attention.
    ``moe_tile_tokens``: routed-expert GEMMs of more than ``moe_tile_above_tokens`` tokens
    run each expert's tokens in column tiles whose width MMQ picks against all the pass's
    tokens, at most this many; empty columns are computed too (0: tiles fit the tokens).
    ``gemm_tile_tokens``: dense GEMMs of more than ``gemm_tile_above_tokens`` tokens compute
    whole tiles of this many tokens (0: the tile fits the tokens).
    ``matvec_tokens_per_pass``: dense GEMMs of m tokens, m at most the table's length (and
    not over a tile threshold), stream the weights once for every
    ``matvec_tokens_per_pass[m - 1]`` tokens (empty: one pass, whatever m).
    ``moe_matvec_below_tokens``: routed-expert GEMMs of a pass of fewer tokens run one
    matrix-vector product per routed (token, expert) pair (0: never).
    ``matvec_max_tokens``: GEMMs of at most this many tokens per call (routed experts: a
    pass of at most this many, or fewer than ``moe_matvec_below_tokens``) run
    matrix-vector kernels on the vector ALUs (0: none).
    ``mxfp4_fp4_mma``: GEMMs of MXFP4-block weights not run as matrix-vector kernels
    multiply on the device's block-scaled FP4 matrix units (the engine has the kernel and
    the device, ``HardwareSpec.fp4_block_mma``, the instructions).
    ``matvec_unpack_share``: the share of a matrix-vector kernel's ALU work on a quantized
    weight that unpacks it, done once per pass and shared by the pass's tokens.
    ``matvec_alu_rate``: the matrix-vector kernels' ALU rate over the device's fp32 vector
    figure: its integer share (``HardwareSpec.integer_vector_share``) where the kernels
    unpack and multiply in 32-bit integers (engines.toml ``matvec_integer``), else 1.
    ``vector_share``: the build's SIMD width over the one the sheet's fp32 figure was reached
    with (engines.toml ``vector_bits`` over ``HardwareSpec.vector_bits``; 1 where either is
    unsaid or the build is as wide): every matrix-vector kernel's rate scales by it.
    """

    dequant_buffer_above_tokens: int = 0
    attention_score_bytes: float = 0.0
    moe_tile_tokens: int = 0
    moe_tile_above_tokens: int = 0
    gemm_tile_tokens: int = 0
    gemm_tile_above_tokens: int = 0
    matvec_tokens_per_pass: tuple[int, ...] = ()
    moe_matvec_below_tokens: int = 0
    matvec_max_tokens: int = 0
    mxfp4_fp4_mma: bool = False
    matvec_unpack_share: float = 0.0
    matvec_alu_rate: float = 1.0
    vector_share: float = 1.0


# The engines.toml keys the llama.cpp lowering reads (matvec_integer sets matvec_alu_rate,
# vector_bits sets vector_share).
DISPATCH_KEYS = ("dequant_buffer_above_tokens", "attention_score_bytes", "moe_tile_tokens",
                 "moe_tile_above_tokens", "gemm_tile_tokens", "gemm_tile_above_tokens",
                 "matvec_tokens_per_pass", "moe_matvec_below_tokens", "matvec_max_tokens",
                 "mxfp4_fp4_mma", "matvec_unpack_share", "matvec_integer", "vector_bits")


def read_dispatch(values: dict[str, Any], hardware: HardwareSpec) -> Dispatch:
    """The dispatch the resolved engines.toml values give on ``hardware``."""
    return Dispatch(
        dequant_buffer_above_tokens=int(values.get("dequant_buffer_above_tokens", 0)),
        attention_score_bytes=float(values.get("attention_score_bytes", 0.0)),
        moe_tile_tokens=int(values.get("moe_tile_tokens", 0)),
        moe_tile_above_tokens=int(values.get("moe_tile_above_tokens", 0)),
        gemm_tile_tokens=int(values.get("gemm_tile_tokens", 0)),
        gemm_tile_above_tokens=int(values.get("gemm_tile_above_tokens", 0)),
        matvec_tokens_per_pass=tuple(int(t) for t in values.get("matvec_tokens_per_pass", ())),
        moe_matvec_below_tokens=int(values.get("moe_matvec_below_tokens", 0)),
        matvec_max_tokens=int(values.get("matvec_max_tokens", 0)),
        mxfp4_fp4_mma=bool(values.get("mxfp4_fp4_mma")) and hardware.fp4_block_mma,
        matvec_unpack_share=float(values.get("matvec_unpack_share", 0.0)),
        matvec_alu_rate=hardware.integer_vector_share if values.get("matvec_integer")
        else 1.0,
        vector_share=vector_share(int(values.get("vector_bits", 0)), hardware))


def vector_share(build_bits: int, hardware: HardwareSpec) -> float:
    """The build's SIMD width over the sheet's (1 where either is unsaid; never above 1: a
    wider build than the sheet measured cannot run on it)."""
    if build_bits <= 0 or hardware.vector_bits <= 0:
        return 1.0
    return min(1.0, build_bits / hardware.vector_bits)


register_dispatch(ENGINE, DISPATCH_KEYS, read_dispatch)


def dispatch_of(traits: Traits) -> Dispatch:
    """The llama.cpp dispatch the traits carry (none set: every rule off)."""
    return traits.kernels if isinstance(traits.kernels, Dispatch) else Dispatch()


@register_lowering(ENGINE, "gemm")
def lower_gemm(op: Op, target: Target) -> Kernel:
    """A GEMM as llama.cpp dispatches it (the module docstring lists the rules)."""
    t, hardware = dispatch_of(target.traits), target.hardware
    kernel = Kernel.of(op, dequantized=dequantized(op, target.math_format))
    vector_rate = (t.matvec_alu_rate if kernel.dequantized else 1.0) * t.vector_share
    kernel = _dequant_buffer(kernel, t)
    kernel = _tiles(kernel, t)
    kernel = _weight_passes(kernel, t)
    peak_factor = fp16_accumulate(target.traits, target.math_format)
    rules = list(kernel.rules)
    matvec = is_matvec(op, t)
    if matvec:  # on the vector ALUs, whatever rate the matrix units would reach
        rules.append("matvec_max_tokens")
    elif peak_factor != 1.0:
        rules.append("fp16_accumulate")
    if fp4_block_gemm(op, t):  # the same quantized GEMM, on FP4 instead of int8 MMA
        peak_factor *= hardware.peak_flops("fp4") / hardware.peak_flops("int8")
        rules.append("mxfp4_fp4_mma")
    # a matrix-vector kernel unpacks each quantized block once per pass over the weights and
    # multiplies it into every token the pass serves: that share of its per-token work is
    # spread over the pass's tokens
    per_pass = max(1.0, op.m / kernel.passes) if op.m else 1.0
    share = t.matvec_unpack_share
    return replace(kernel, unit="vector" if matvec else "matrix", peak_factor=peak_factor,
                   alu_share=1.0 - share + share / per_pass, vector_rate=vector_rate,
                   rules=tuple(rules))


@register_lowering(ENGINE, "attention")
def lower_attention(op: Op, target: Target) -> Kernel:
    """Attention fused (``-fa 1``) or as matmuls with the scores in memory."""
    t = dispatch_of(target.traits)
    kernel = Kernel.of(op)
    peak_factor = fp16_accumulate(target.traits, target.math_format)
    rules = ("fp16_accumulate",) if peak_factor != 1.0 else ()
    if t.attention_score_bytes <= 0:
        return replace(kernel, peak_factor=peak_factor, rules=rules)
    flops, extra = op.flops, 0.0
    if op.k:
        # the kernels score every new token against every cell of the cache and mask the
        # causal rest: m · keys scores per head where the ledger counts m · n causal pairs
        masked = op.keys / op.n if op.keys and op.n else 1.0
        flops = op.flops * max(masked, 1.0)
        scores = flops / (ATTENTION_FLOPS_PER_SCORE_DIM * op.k)
        extra = t.attention_score_bytes * scores
    return replace(kernel, unit="attention-unfused", flops=flops, extra_bytes=extra,
                   peak_factor=peak_factor, rules=rules + ("attention_score_bytes",))


def _dequant_buffer(kernel: Kernel, t: Dispatch) -> Kernel:
    """Over the threshold, a conversion kernel, then a 16-bit GEMM on the converted copy."""
    op = kernel.op
    if not (kernel.dequantized and 0 < t.dequant_buffer_above_tokens < op.m):
        return kernel
    buffer_bytes = weight_elements(op) * BUFFER_BYTES_PER_WEIGHT
    return replace(kernel, memory_bytes=op.memory_bytes - op.weights + buffer_bytes,
                   weight_bytes=buffer_bytes, extra_bytes=op.weights + buffer_bytes,
                   launches=2 * op.calls, dequantized=False,
                   rules=kernel.rules + ("dequant_buffer_above_tokens",))


def _tiles(kernel: Kernel, t: Dispatch) -> Kernel:
    """Routed experts in MMQ's column tiles; dense GEMMs in whole token tiles."""
    op = kernel.op
    if t.moe_tile_tokens and op.expert_load and op.tokens > t.moe_tile_above_tokens:
        padding = moe_tile_padding(op.tokens, op.expert_load, t.moe_tile_tokens)
        return replace(kernel, flops=op.flops * padding,
                       rules=kernel.rules + ("moe_tile_tokens",))
    if t.gemm_tile_tokens and not op.expert_load and op.m > t.gemm_tile_above_tokens:
        tile = t.gemm_tile_tokens
        return replace(kernel, flops=op.flops * math.ceil(op.m / tile) * tile / op.m,
                       rules=kernel.rules + ("gemm_tile_tokens",))
    return kernel


def _weight_passes(kernel: Kernel, t: Dispatch) -> Kernel:
    passes = weight_passes(kernel.op, t)
    if passes <= 1:
        return kernel
    # a matrix-vector kernel reads the weights again for later tokens
    rule = "moe_matvec_below_tokens" if kernel.op.expert_load else "matvec_tokens_per_pass"
    return replace(kernel, memory_bytes=kernel.memory_bytes + (passes - 1) * kernel.weight_bytes,
                   weight_bytes=kernel.weight_bytes * passes, passes=passes,
                   rules=kernel.rules + (rule,))


def fp4_block_gemm(op: Op, traits: Dispatch) -> bool:
    """A GEMM of MXFP4-block weights the engine multiplies on the device's block-scaled
    FP4 matrix units (``Dispatch.mxfp4_fp4_mma``): not one it runs as matrix-vector kernels."""
    return (traits.mxfp4_fp4_mma and op.kind == "gemm" and op.block_format == "MXFP4"
            and not is_matvec(op, traits))


def is_matvec(op: Op, traits: Dispatch) -> bool:
    """A GEMM the engine runs as matrix-vector kernels on the vector ALUs: at most
    ``Dispatch.matvec_max_tokens`` tokens per call (routed experts: a forward pass of at
    most that many tokens, or of fewer than ``moe_matvec_below_tokens``)."""
    most = traits.matvec_max_tokens
    if op.kind != "gemm" or not most or not op.weights:
        return False
    if op.expert_load:
        below = traits.moe_matvec_below_tokens
        return op.tokens <= most or bool(below and op.tokens < below)
    return op.m <= most


def weight_passes(op: Op, traits: Dispatch) -> float:
    """How many times a GEMM's kernel reads its weights from memory: once, unless the
    engine runs it as matrix-vector products that stream them again for later tokens
    (``Dispatch.matvec_tokens_per_pass`` for dense GEMMs of few tokens, ``Dispatch.
    moe_matvec_below_tokens`` for routed experts: then each expert is read once per token
    routed to it, ``op.m`` times on average)."""
    if op.kind != "gemm" or not op.weights or op.m <= 0:
        return 1.0
    if op.expert_load:
        below = traits.moe_matvec_below_tokens
        return max(1.0, op.m) if below and op.tokens < below else 1.0
    table = traits.matvec_tokens_per_pass
    tokens = math.ceil(op.m)
    tiled = traits.gemm_tile_tokens and op.m > traits.gemm_tile_above_tokens
    if not table or tiled or tokens > len(table):
        return 1.0
    return float(math.ceil(tokens / table[tokens - 1]))


def moe_tile_width(tokens: float, widest: int) -> int:
    """The column-tile width a routed-expert GEMM picks for a forward pass of ``tokens``
    tokens: llama.cpp's MMQ tries widths in steps of 8 (of 16 from 48 on) up to ``widest``
    and keeps the first that needs the fewest tiles for all the pass's tokens
    (ggml-cuda/mmq.cuh, mul_mat_q_case)."""
    best, fewest = TILE_STEP, math.inf
    for width in range(TILE_STEP, widest + 1, TILE_STEP):
        if width >= WIDE_TILE_FROM and width % WIDE_TILE_STEP:
            continue
        tiles = math.ceil(tokens / width)
        if tiles < fewest:
            best, fewest = width, tiles
    return best


@lru_cache(maxsize=4096)
def moe_tile_padding(tokens: float, expert_load: float, widest: int) -> float:
    """The columns routed-expert GEMMs compute over the tokens routed to them: each
    expert's x tokens (Poisson with mean ``expert_load``, uniform routing) fill ⌈x / w⌉
    tiles of the pass's width w, so an expert costs w · E[⌈x / w⌉] columns for its
    ``expert_load`` tokens. (Memoised: a pure function of three numbers that the fit
    evaluates for every MoE row.)"""
    width = moe_tile_width(tokens, widest)
    spread = 12.0 * math.sqrt(expert_load) + 12.0
    log_load = math.log(expert_load)
    first, last = max(1, int(expert_load - spread)), int(expert_load + spread) + 2
    tiles = sum(math.exp(x * log_load - expert_load - math.lgamma(x + 1.0))
                * math.ceil(x / width) for x in range(first, last))
    return max(1.0, width * tiles / expert_load)

