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
from dataclasses import replace
from functools import lru_cache

from phasewise.ledger import Op
from phasewise.lower.engines import Traits
from phasewise.lower.generic import dequantized, weight_elements
from phasewise.lower.kernel import Kernel
from phasewise.lower.registry import Target, register_lowering

ENGINE = "llama.cpp"
# Bytes per weight of the 16-bit buffer a dequantize-then-multiply GEMM converts into.
BUFFER_BYTES_PER_WEIGHT = 2.0
# FLOPs per attention score and head dimension: QK^T and PV are 2 FLOPs each per element.
ATTENTION_FLOPS_PER_SCORE_DIM = 4.0
# MMQ's column-tile widths: steps of 8, of 16 from 48 on (ggml-cuda/mmq.cuh).
TILE_STEP, WIDE_TILE_FROM, WIDE_TILE_STEP = 8, 48, 16


@register_lowering(ENGINE, "gemm")
def lower_gemm(op: Op, target: Target) -> Kernel:
    """A GEMM as llama.cpp dispatches it (the module docstring lists the rules)."""
    t, hardware = target.traits, target.hardware
    kernel = Kernel.of(op, dequantized=dequantized(op, target.math_format))
    vector_rate = t.matvec_alu_rate if kernel.dequantized else 1.0
    kernel = _dequant_buffer(kernel, t)
    kernel = _tiles(kernel, t)
    kernel = _weight_passes(kernel, t)
    peak_factor, rules = _fp16_accumulate(t, target.math_format), list(kernel.rules)
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
    t = target.traits
    kernel = Kernel.of(op)
    peak_factor = _fp16_accumulate(t, target.math_format)
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


def _fp16_accumulate(t: Traits, math_format: str) -> float:
    return t.gemm_peak_factor if math_format == "fp16" else 1.0


def _dequant_buffer(kernel: Kernel, t: Traits) -> Kernel:
    """Over the threshold, a conversion kernel, then a 16-bit GEMM on the converted copy."""
    op = kernel.op
    if not (kernel.dequantized and 0 < t.dequant_buffer_above_tokens < op.m):
        return kernel
    buffer_bytes = weight_elements(op) * BUFFER_BYTES_PER_WEIGHT
    return replace(kernel, memory_bytes=op.memory_bytes - op.weights + buffer_bytes,
                   weight_bytes=buffer_bytes, extra_bytes=op.weights + buffer_bytes,
                   launches=2 * op.calls, dequantized=False,
                   rules=kernel.rules + ("dequant_buffer_above_tokens",))


def _tiles(kernel: Kernel, t: Traits) -> Kernel:
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


def _weight_passes(kernel: Kernel, t: Traits) -> Kernel:
    passes = weight_passes(kernel.op, t)
    if passes <= 1:
        return kernel
    # a matrix-vector kernel reads the weights again for later tokens
    rule = "moe_matvec_below_tokens" if kernel.op.expert_load else "matvec_tokens_per_pass"
    return replace(kernel, memory_bytes=kernel.memory_bytes + (passes - 1) * kernel.weight_bytes,
                   weight_bytes=kernel.weight_bytes * passes, passes=passes,
                   rules=kernel.rules + (rule,))


def fp4_block_gemm(op: Op, traits: Traits) -> bool:
    """A GEMM of MXFP4-block weights the engine multiplies on the device's block-scaled
    FP4 matrix units (``Traits.mxfp4_fp4_mma``): not one it runs as matrix-vector kernels."""
    return (traits.mxfp4_fp4_mma and op.kind == "gemm" and op.block_format == "MXFP4"
            and not is_matvec(op, traits))


def is_matvec(op: Op, traits: Traits) -> bool:
    """A GEMM the engine runs as matrix-vector kernels on the vector ALUs: at most
    ``Traits.matvec_max_tokens`` tokens per call (routed experts: a forward pass of at
    most that many tokens, or of fewer than ``moe_matvec_below_tokens``)."""
    most = traits.matvec_max_tokens
    if op.kind != "gemm" or not most or not op.weights:
        return False
    if op.expert_load:
        below = traits.moe_matvec_below_tokens
        return op.tokens <= most or bool(below and op.tokens < below)
    return op.m <= most


def weight_passes(op: Op, traits: Traits) -> float:
    """How many times a GEMM's kernel reads its weights from memory: once, unless the
    engine runs it as matrix-vector products that stream them again for later tokens
    (``Traits.matvec_tokens_per_pass`` for dense GEMMs of few tokens, ``Traits.
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

