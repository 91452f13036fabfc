"""The expected time: each ledger operator priced with fitted efficiencies and overheads.

For one operator of ``calls`` kernel calls (DESIGN.md, cost models):

    compute_s = FLOPs / (peak · peak_factor · gemm_fraction · e)
        e = gemm_efficiency · I / (I + gemm_intensity_half · ridge) · (dequant_compute if
            block-quantized), I the GEMM's FLOPs per weight byte and ridge the ridge point
            the device reaches (peak · peak_factor · gemm_fraction ÷ (bandwidth ·
            bandwidth_fraction)), for GEMMs; attention_efficiency for fused attention,
            gemm_efficiency for unfused attention (its matmuls are GEMMs), 1 for
            elementwise work
    compute_s = FLOPs · (matvec_alu_ops · (1 − s + s / t) if block-quantized, else 1)
                / vector peak
            for a GEMM the engine runs as matrix-vector kernels on the vector ALUs
            (``Traits.matvec_max_tokens``: llama.cpp's MMVQ and Metal mul_mv), t its tokens
            per pass over the weights and s the share of the work that unpacks a block,
            done once per pass (``Traits.matvec_unpack_share``)
    memory_s  = (bytes + calls · bytes_half) / (bandwidth · bandwidth_fraction
                 · bandwidth_efficiency · (dequant_bandwidth if block-quantized weights)
                 · (attention_bandwidth for attention))
        i.e. bandwidth ramps as s / (s + bytes_half) with s the bytes per call; attention
        streams the KV cache (decode) at its own share of the weight-streaming rate
    serial_s  = serial bytes / (bandwidth · bandwidth_fraction · bandwidth_efficiency)
    time_s    = max(compute_s, memory_s) + serial_s + kernels · kernel_overhead_s
    collectives: bytes / (link bandwidth · link_efficiency)
                 + hops · link latency · link_latency_factor + calls · kernel_overhead_s
    step      = Σ operators + step_overhead_s
                + parallel_step_overhead_s if the step runs on more than one device (the
                  engine's processes synchronise: the step's inputs go to every worker)

The engine's documented traits (``engines.Traits``) change what an operator does, not
how fast: ``peak_factor`` is the fp16-accumulate speed-up of an engine that accumulates in
fp16 on a device that runs it faster; a GEMM over the engine's dequant-buffer threshold
first converts its block-quantized weights to a 16-bit buffer in a kernel of its own
(serial bytes: the stored weights read, 2 bytes per weight written), then multiplies the
16-bit copy; an unfused attention runs its two matmuls at the engine's GEMM rate and moves
each score through memory (``attention_score_bytes``, serial bytes), scoring every new
token against every KV cell the pass holds and masking the rest: the ledger's FLOPs (its
causal pairs) times keys / n, m · keys scores per head; an engine with its own all-reduce
kernel pays its rounds per call (``allreduce_rounds``) instead of the ledger's tree rounds; a
GEMM whose kernel computes whole tiles of tokens (llama.cpp's routed-expert MMQ tiles,
``moe_tile_tokens``; its Metal matrix kernel's 32-token tiles, ``gemm_tile_tokens``) is
priced at the FLOPs of the tiles, empty columns included; a GEMM the engine runs as
matrix-vector products that stream the weights more than once (llama.cpp's Metal kernels
for a few tokens; its CUDA MMQ's 4-token tiles before mid-2024, ``weight_passes``) reads its
weight bytes that many times; a quantized GEMM of MXFP4-block weights the engine multiplies
on the device's block-scaled FP4 matrix units instead of its int8 ones (llama.cpp's CUDA MMQ
on CC 12.x Blackwell since December 2025, ``mxfp4_fp4_mma``) runs at the device's fp4 over
int8 tensor rate times the rate a quantized GEMM otherwise gets.

The GEMM's shape term sets its FLOPs per weight byte I (2m / bytes per weight for m tokens
per call; routed tokens per expert for MoE) against the ridge point the device reaches (its
best matmul rate ÷ its best streaming rate): a GEMM turns compute-bound near I = ridge, and
one well below it costs gemm_intensity_half × its weight bytes at the device's streaming
rate over the engine's GEMM efficiency, on any device, whatever its matmul ceiling, in any
weight format. ``gemm_fraction`` and
``bandwidth_fraction`` belong to the device (what its best kernels reach), the rest to
the engine. The formula is written once, in ``priced_parts``, for
scalars and numpy arrays alike, so the fit prices operators exactly as estimates do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, NamedTuple

from phasewise.cost.base import (StepTiming, Timing, hardware_for_collective, link_for,
                                 math_format_for, sum_timings)
from phasewise.cost.calibration import (ConstantSource, Constants, Engine, Profile, Traits,
                                        constant_sources, constants_for, load_profile,
                                        resolve_engine, traits_for)
from phasewise.ledger import Ledger, Op, SeqGroup, Step
from phasewise.specs import HardwareSpec

# Bytes per element of the math formats a GEMM can run in; weights stored in fewer bytes
# than their math format (int4, the GGUF block formats, int8 weight-only) are dequantized
# on the fly, which costs bandwidth and compute efficiency.
MATH_FORMAT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0,
                     "int8": 1.0, "fp4": 0.5}
# Bytes per weight of the 16-bit buffer a dequantize-then-multiply GEMM converts into.
BUFFER_BYTES_PER_WEIGHT = 2.0
# FLOPs per attention score and head dimension: QK^T and PV are 2 FLOPs each per element.
ATTENTION_FLOPS_PER_SCORE_DIM = 4.0
# The ledger's tensor-parallel all-reduce, whose rounds an engine's own kernel may set.
ALLREDUCE_OP = "tp.allreduce"
KIND_GEMM, KIND_ATTENTION, KIND_ELEMENTWISE, KIND_COMMUNICATION = range(4)
_KINDS = {"gemm": KIND_GEMM, "attention": KIND_ATTENTION, "elementwise": KIND_ELEMENTWISE,
          "communication": KIND_COMMUNICATION}


@dataclass(frozen=True, slots=True)
class OpFeatures:
    """What the formula needs of one operator on one device (floats, or numpy columns)."""

    kind: Any
    flops: Any
    memory_bytes: Any
    calls: Any
    kernels: Any  # kernel launches: calls, twice over for a dequantize-then-multiply GEMM
    weight_intensity: Any  # FLOPs per weight byte (GEMMs)
    dequantized: Any  # 1 where the GEMM dequantizes block-quantized weights as it reads them
    matvec: Any  # 1 where the engine runs the GEMM as matrix-vector kernels on vector ALUs
    alu_share: Any  # the share of matvec_alu_ops a matrix-vector FLOP costs at its tokens per pass
    unfused: Any  # 1 for attention run as separate matmuls and soft-max (scores in memory)
    serial_bytes: Any  # bytes moved by kernels of their own before or after the operator's
    peak_factor: Any  # fp16-accumulate speed-up of the engine on the device (1: none)
    network_bytes: Any
    hops: Any
    peak_flops_per_s: Any
    vector_flops_per_s: Any  # the rate of the engine's matrix-vector ALU work
    ridge_flops_per_byte: Any
    bandwidth_bytes_per_s: Any
    link_bytes_per_s: Any
    link_latency_s: Any


def op_features(op: Op, hardware: HardwareSpec, math_format: str,
                traits: Traits = Traits()) -> OpFeatures:
    kind = _KINDS[op.kind]
    link_bw, link_latency = 1.0, 0.0
    if kind == KIND_COMMUNICATION:
        link = link_for(hardware)
        link_bw, link_latency = link.bandwidth_bytes_per_s, link.latency_s
    peak = hardware.vector_flops if kind == KIND_ELEMENTWISE else hardware.peak_flops(math_format)
    bandwidth = hardware.memory_bandwidth_bytes_per_s
    ridge = hardware.peak_flops(math_format) / bandwidth if kind == KIND_GEMM else 1.0
    dequantized = _dequantized(op, math_format)
    buffered = dequantized and 0 < traits.dequant_buffer_above_tokens < op.m
    memory_bytes, weight_bytes, serial_bytes, kernels = op.memory_bytes, op.weights, 0.0, op.calls
    if buffered:  # a conversion kernel, then a 16-bit GEMM on the converted copy
        buffer_bytes = weight_elements(op) * BUFFER_BYTES_PER_WEIGHT
        serial_bytes = op.weights + buffer_bytes
        memory_bytes, weight_bytes, kernels = op.memory_bytes - op.weights + buffer_bytes, \
            buffer_bytes, 2 * op.calls
    unfused = kind == KIND_ATTENTION and traits.attention_score_bytes > 0
    flops = op.flops
    if unfused and op.k:
        # the kernels score every new token against every cell of the cache and mask the
        # causal rest: m · keys scores per head where the ledger counts m · n causal pairs
        masked = op.keys / op.n if op.keys and op.n else 1.0
        flops = op.flops * max(masked, 1.0)
        scores = flops / (ATTENTION_FLOPS_PER_SCORE_DIM * op.k)
        serial_bytes = traits.attention_score_bytes * scores
    hops = op.hops
    if op.name == ALLREDUCE_OP and traits.allreduce_rounds and _peer_link(hardware):
        hops = op.calls * traits.allreduce_rounds
    if traits.moe_tile_tokens and op.expert_load and op.tokens > traits.moe_tile_above_tokens:
        flops = op.flops * moe_tile_padding(op.tokens, op.expert_load, traits.moe_tile_tokens)
    elif (traits.gemm_tile_tokens and kind == KIND_GEMM and not op.expert_load
          and op.m > traits.gemm_tile_above_tokens):
        tile = traits.gemm_tile_tokens
        flops = op.flops * math.ceil(op.m / tile) * tile / op.m
    passes = weight_passes(op, traits)
    if passes > 1:  # a matrix-vector kernel reads the weights again for later tokens
        memory_bytes += (passes - 1) * weight_bytes
        weight_bytes *= passes
    intensity = flops / weight_bytes if weight_bytes else 1e30
    peak_factor = traits.gemm_peak_factor if (
        kind in (KIND_GEMM, KIND_ATTENTION) and math_format == "fp16") else 1.0
    if fp4_block_gemm(op, traits):  # the same quantized GEMM, on FP4 instead of int8 MMA
        peak_factor *= hardware.peak_flops("fp4") / hardware.peak_flops("int8")
    # a matrix-vector kernel unpacks each quantized block once per pass over the weights and
    # multiplies it into every token the pass serves: that share of its per-token work is
    # spread over the pass's tokens
    per_pass = max(1.0, op.m / passes) if op.kind == "gemm" and op.m else 1.0
    share = traits.matvec_unpack_share
    alu_share = 1.0 - share + share / per_pass
    return OpFeatures(kind, flops, memory_bytes, op.calls, kernels, intensity,
                      1.0 if dequantized and not buffered else 0.0,
                      1.0 if is_matvec(op, traits) else 0.0, alu_share,
                      1.0 if unfused else 0.0,
                      serial_bytes, peak_factor, op.network, hops, peak,
                      hardware.vector_flops * (traits.matvec_alu_rate if dequantized else 1.0),
                      ridge, bandwidth, link_bw, link_latency)


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
    best, fewest = 8, math.inf
    for width in range(8, widest + 1, 8):
        if width >= 48 and width % 16:
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
    ``expert_load`` tokens."""
    width = moe_tile_width(tokens, widest)
    spread = 12.0 * math.sqrt(expert_load) + 12.0
    log_load = math.log(expert_load)
    first, last = max(1, int(expert_load - spread)), int(expert_load + spread) + 2
    tiles = sum(math.exp(x * log_load - expert_load - math.lgamma(x + 1.0))
                * math.ceil(x / width) for x in range(first, last))
    return max(1.0, width * tiles / expert_load)


def _peer_link(hardware: HardwareSpec) -> bool:
    """Devices joined by a scale-up link (NVLink, Infinity Fabric), which engines' own
    all-reduce kernels need: they read peers' memory directly (vLLM turns them off on
    PCIe-only machines of more than two GPUs)."""
    return hardware.interconnect is not None and hardware.interconnect.kind != "pcie"


def weight_elements(op: Op) -> float:
    """The weights a GEMM multiplies, over its calls: FLOPs ÷ 2m, which counts each routed
    expert a MoE GEMM touches as well as a dense GEMM's n × k."""
    return op.flops / (2.0 * op.m) if op.m else op.k * op.n * op.calls


def _dequantized(op: Op, math_format: str) -> bool:
    """A GEMM whose weights take fewer bytes per element than its math format."""
    if op.kind != "gemm" or not op.weights or not op.k or not op.n:
        return False
    bytes_per_weight = op.weights / weight_elements(op)
    return bytes_per_weight < 0.95 * MATH_FORMAT_BYTES.get(math_format, 2.0)


class Parts(NamedTuple):
    """An operator's time by cause; it takes max(compute, memory) + serial + network +
    overhead seconds (``time``)."""

    compute_s: Any
    memory_s: Any
    serial_s: Any
    network_s: Any
    overhead_s: Any

    def time(self, maximum: Callable = max) -> Any:
        return maximum(self.compute_s, self.memory_s) + self.serial_s + self.network_s + \
            self.overhead_s


def priced_parts(f: OpFeatures, c: Any, *,
                 equals: Callable = lambda a, b: 1.0 if a == b else 0.0) -> Parts:
    """An operator's parts; ``c`` holds the constants (a ``Constants`` or columns of them).
    Written with arithmetic only, so the same lines price one operator or a numpy column
    of thousands."""
    gemm, attention = equals(f.kind, KIND_GEMM), equals(f.kind, KIND_ATTENTION)
    elementwise, network = equals(f.kind, KIND_ELEMENTWISE), equals(f.kind, KIND_COMMUNICATION)
    # The half point sits at the ridge the device reaches (its best matmul rate, at the
    # engine's accumulate rate, over its best streaming): below it a GEMM costs
    # gemm_intensity_half x its weight bytes at that streaming rate, whatever the matmul rate.
    ridge = f.ridge_flops_per_byte * f.peak_factor * c.gemm_fraction / c.bandwidth_fraction
    shape = f.weight_intensity / (f.weight_intensity + c.gemm_intensity_half * ridge)
    dequant_compute = 1.0 + f.dequantized * (c.dequant_compute - 1.0)
    attention_rate = f.unfused * c.gemm_efficiency + (1.0 - f.unfused) * c.attention_efficiency
    # A matrix-vector kernel runs on the vector ALUs: its FLOPs times the operations each
    # costs (dequantizing included) at the vector rate, on the scale of the matmul peak.
    alu_ops = 1.0 + f.dequantized * (c.matvec_alu_ops * f.alu_share - 1.0)
    vector_rate = f.vector_flops_per_s / (f.peak_flops_per_s * f.peak_factor * alu_ops)
    efficiency = (gemm * (1.0 - f.matvec) * c.gemm_efficiency * shape * dequant_compute
                  * c.gemm_fraction + gemm * f.matvec * vector_rate
                  + attention * attention_rate * c.gemm_fraction + elementwise + network)
    compute_s = f.flops / (f.peak_flops_per_s * f.peak_factor * efficiency)
    streaming = f.bandwidth_bytes_per_s * c.bandwidth_fraction * c.bandwidth_efficiency
    dequant_bandwidth = 1.0 + f.dequantized * (c.dequant_bandwidth - 1.0)
    attention_bandwidth = 1.0 + attention * (c.attention_bandwidth - 1.0)
    memory_s = (1.0 - network) * (f.memory_bytes + f.calls * c.bytes_half) / (
        streaming * dequant_bandwidth * attention_bandwidth)
    serial_s = f.serial_bytes / streaming
    network_s = network * (f.network_bytes / (f.link_bytes_per_s * c.link_efficiency)
                           + f.hops * f.link_latency_s * c.link_latency_factor)
    overhead_s = f.kernels * c.kernel_overhead_s
    return Parts(compute_s, memory_s, serial_s, network_s, overhead_s)


# Resolved models by (profile identity, device, engine): estimates resolve the same few
# again and again; the profile is held with its entry so its identity cannot be reused.
RESOLVED_CACHE_SIZE = 1024
_RESOLVED: dict[tuple[int, HardwareSpec, Engine], tuple[Profile, Calibrated]] = {}


@dataclass(frozen=True)
class Calibrated:
    """Expected time on one device under one engine, from a calibration profile."""

    constants: Constants
    engine: str = "generic"
    profile: str = "default"
    name: str = "calibrated"
    traits: Traits = Traits()
    sources: tuple[ConstantSource, ...] = ()  # where each constant came from (for_device)

    @classmethod
    def for_device(cls, hardware: HardwareSpec, *, engine: str | Engine | None = None,
                   calibration: str | Profile | None = None) -> Calibrated:
        """The bundled profile (or a calibration file, or a fitted Profile) resolved for
        ``hardware`` under ``engine`` (generic when None)."""
        chosen = engine if isinstance(engine, Engine) else resolve_engine(engine)
        profile = calibration if isinstance(calibration, Profile) else load_profile(calibration)
        key = (id(profile), hardware, chosen)
        held = _RESOLVED.get(key)
        if held is not None and held[0] is profile:
            return held[1]
        if len(_RESOLVED) >= RESOLVED_CACHE_SIZE:
            _RESOLVED.clear()
        model = cls(constants_for(profile, hardware, chosen), chosen.name, profile.name,
                    traits=traits_for(chosen, hardware),
                    sources=constant_sources(profile, hardware, chosen))
        _RESOLVED[key] = (profile, model)
        return model

    def op_parts(self, op: Op, hardware: HardwareSpec, math_format: str) -> Parts:
        """The operator's time by cause (``priced_parts`` with this engine and device)."""
        return priced_parts(op_features(op, hardware, math_format, self.traits), self.constants)

    def op_time(self, op: Op, hardware: HardwareSpec, math_format: str) -> Timing:
        return _timing(op, self.op_parts(op, hardware, math_format))

    def step_fixed_s(self, ledger: Ledger) -> float:
        """A forward pass's fixed time: the step overhead, and the parallel one on more
        than one device."""
        c = self.constants
        return c.step_overhead_s + (c.parallel_step_overhead_s if ledger.devices > 1 else 0.0)

    def step_time(self, ledger: Ledger, hardware: HardwareSpec) -> StepTiming:
        priced = tuple((op, self.op_time(op, hardware_for_collective(hardware, op, ledger),
                                        math_format_for(op, ledger.math_format)))
                       for op in ledger.ops)
        step_s = self.step_fixed_s(ledger)
        overhead = Timing(step_s, 0.0, 0.0, 0.0, step_s, "overhead", 0.0, 0.0, 0.0)
        return StepTiming(sum_timings([t for _, t in priced] + [overhead]), priced)

    def engine_steps(self, step: Step) -> tuple[Step, ...]:
        """The forward passes the engine runs for ``step``: a prompt longer than the
        engine's micro-batch (llama.cpp's n_ubatch) is split into consecutive chunks, each
        attending to the chunks before it; other steps run as they are."""
        return split_prefill(step, self.traits.prefill_ubatch_tokens)


def _timing(op: Op, p: Parts) -> Timing:
    """An operator's Timing from its parts: memory includes its serial kernels, and the
    bound is the largest part."""
    memory_s = p.memory_s + p.serial_s
    parts = {"compute": p.compute_s, "memory": memory_s, "network": p.network_s,
             "overhead": p.overhead_s}
    bound = max(parts, key=parts.__getitem__)
    return Timing(p.time(), p.compute_s, memory_s, p.network_s, p.overhead_s, bound,
                  op.flops, op.memory_bytes, op.network)


def split_prefill(step: Step, ubatch_tokens: int) -> tuple[Step, ...]:
    """A one-group prompt step of more than ``ubatch_tokens`` new tokens, as chunks of at
    most that many tokens in total; the logits stay with the last tokens."""
    if not ubatch_tokens or len(step.groups) != 1 or step.new_tokens <= ubatch_tokens:
        return (step,)
    group = step.groups[0]
    per_sequence = max(1, ubatch_tokens // group.count)
    chunks = []
    for start in range(0, group.new_tokens, per_sequence):
        size = min(per_sequence, group.new_tokens - start)
        logits = max(0, min(size, start + size - (group.new_tokens - group.logit_tokens)))
        chunks.append(Step((SeqGroup(group.count, size, group.cached_tokens + start, logits),)))
    return tuple(chunks)


def engine_steps(cost_model: Any, step: Step) -> tuple[Step, ...]:
    """The forward passes a cost model's engine runs for ``step`` (one, unless it says)."""
    split = getattr(cost_model, "engine_steps", None)
    return split(step) if split else (step,)


def merge_step_timings(parts: list[StepTiming], ops: tuple[Op, ...]) -> StepTiming:
    """Chunks of one step priced apart, summed per operator of the whole step's ledger
    (``ops``), so the per-operator rows line up with the speed-of-light floor."""
    by_key: dict[tuple[str, str], list[Timing]] = {}
    for part in parts:
        for op, timing in part.ops:
            by_key.setdefault((op.name, op.layers), []).append(timing)
    merged = tuple((op, sum_timings(by_key.get((op.name, op.layers), [])) if
                    by_key.get((op.name, op.layers)) else _zero(op)) for op in ops)
    return StepTiming(sum_timings([p.total for p in parts]), merged)


def _zero(op: Op) -> Timing:
    return Timing(0.0, 0.0, 0.0, 0.0, 0.0, "overhead", 0.0, 0.0, 0.0)
