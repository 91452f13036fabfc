"""Step prices from the ledger and a cost model, cached on the step's shape.

A simulated server runs hundreds of thousands of steps whose shapes repeat, so each
distinct shape is priced once. The shape is made coarse in two documented ways:

- A decode batch of B sequences with contexts c₁…c_B is priced as B sequences at the
  mean context. For full-attention layers this is exact: every decode term of the ledger
  (attention pairs Σ(cᵢ+1), KV read Σcᵢ) is linear in the contexts. Sliding-window layers
  read min(cᵢ, W), which is concave, so the mean overstates their KV reads by at most the
  spread of the batch around the window edge.
- Cached-context lengths (the decode mean and each prefill chunk's cached tokens) are
  rounded to the nearest multiple of ``bucket_tokens``. The mean context moves by at most
  half a bucket, so the step's KV read and attention work move by at most
  bucket / (2 · mean context) of themselves: 0.8% at 16-token buckets and 1 K-token
  contexts, and less of the whole step, whose weight reads do not move. New (computed)
  tokens are never rounded. ``bucket_tokens=1`` leaves only the rounding of the mean
  to a whole token.
- With ``relative_buckets`` (the default) a decode mean context c is priced between the
  edges of a bucket of width max(bucket_tokens, 2^⌊log₂ c⌋ / 8) and the two prices are
  interpolated linearly in c. Every full-attention decode term is linear in c, so the
  interpolation is exact for them; the number of shapes grows with the log of the
  context, not the context, which keeps 8K-token answers fast.

Two engine behaviours sit on top of the device time (``serving.presets``): a decode batch
of B sequences runs the CUDA graph captured for the next size B' ≥ B, priced as B'
sequences holding the batch's B·c cached tokens between them (padding rows compute the
GEMMs, read no KV); and the engine's host time per step is added to (or, with an
overlap scheduler, overlapped with) the device time, which then leaves out the cost
model's own fixed time per forward pass (``StepPricer.seconds``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from phasewise.cost import CostModel
from phasewise.cost.calibrated import engine_steps
from phasewise.ledger import SeqGroup, Step, build_ledger
from phasewise.ledger.build import COLLECTIVE_BYTES
from phasewise.lower.fusion import AllreduceNormFusion, fuse_allreduce_norms
from phasewise.serving.presets import HostTime
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision
from phasewise.specs.compute import precision_on

# 16 tokens: vLLM's default KV block size, so bucket edges fall on block edges.
DEFAULT_BUCKET_TOKENS = 16
# Relative buckets are an eighth of the context's power of two: 512 tokens at 4-8K.
RELATIVE_BUCKET_SHIFT = 3

Chunk = tuple[int, int, int]  # (new tokens, cached tokens, logit tokens) of one sequence


class StepPricer:
    """Seconds per step for one replica's model, device, precision and parallelism."""

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, precision: Precision,
                 parallelism: Parallelism, cost: CostModel, *,
                 bucket_tokens: int = DEFAULT_BUCKET_TOKENS,
                 draft: tuple[ModelSpec, Parallelism, int] | None = None,
                 padded_batch: Callable[[int], int] | None = None,
                 host: HostTime | None = None, relative_buckets: bool = True,
                 cache: dict | None = None,
                 fusion: AllreduceNormFusion | None = None) -> None:
        # The checkpoint's formats ('auto'), then the matmul format this device runs them in
        # (FP4 natively on Blackwell, weight-only where the units lack it), as estimate does.
        precision = precision_on(precision.for_model(model), hardware).precision
        if host is not None and precision.activation_bytes < COLLECTIVE_BYTES:
            # a served step's collectives move the 16-bit hidden state whatever the GEMMs'
            # activation format (ledger.build.COLLECTIVE_BYTES says where the engines do it)
            precision = replace(precision, collectives="bf16")
        self.model, self.hardware, self.precision = model, hardware, precision
        self.parallelism, self.cost, self.bucket = parallelism, cost, max(1, bucket_tokens)
        self.padded_batch, self.host, self.relative = padded_batch, host, relative_buckets
        # the engine's all-reduce + RMSNorm fusion (lower.fusion), applied to every ledger
        self.fusion = fusion
        # Speculative decoding: (draft model, its parallelism, γ). A decode step is then a
        # round: γ draft decode steps, and one target step verifying γ+1 tokens a sequence.
        self.draft = draft
        self.decode_tokens = 1 + (draft[2] if draft else 0)
        self._cache: dict[tuple, float] = {} if cache is None else cache
        self.misses = 0

    def step_s(self, decode_batch: int, context_sum: int, chunks: tuple[Chunk, ...] = ()) -> float:
        """A step of ``decode_batch`` one-token decodes whose cached contexts sum to
        ``context_sum``, plus prefill ``chunks``."""
        bucket = self.bucket
        if chunks:
            chunks = tuple(sorted((new, int(cached / bucket + 0.5) * bucket, logit)
                                  for new, cached, logit in chunks))
        if not decode_batch:
            return self._cached(0, 0, chunks)
        mean = context_sum / decode_batch
        width = self._width(mean)
        low = int(mean // width) * width
        if not self.relative or width == bucket:
            return self._cached(decode_batch, int(mean / bucket + 0.5) * bucket, chunks)
        share = (mean - low) / width
        below = self._cached(decode_batch, low, chunks)
        return below + share * (self._cached(decode_batch, low + width, chunks) - below)

    def run_s(self, decode_batch: int, context_sum: int, ticks: int) -> np.ndarray:
        """Seconds of ``ticks`` consecutive decode-only steps of the same batch, each
        sequence one token further than in the step before: ``step_s`` of each, priced a
        bucket at a time (inside a bucket the price is linear in the mean context)."""
        out = np.empty(ticks)
        j = 0
        while j < ticks:
            total = context_sum + j * decode_batch
            mean = total / decode_batch
            width = self._width(mean)
            if not self.relative or width == self.bucket:
                out[j] = self.step_s(decode_batch, total)
                j += 1
                continue
            low = int(mean // width) * width
            n = min(ticks - j, max(1, math.ceil(low + width - mean)))
            below = self._cached(decode_batch, low, ())
            above = self._cached(decode_batch, low + width, ())
            means = (context_sum + np.arange(j, j + n) * decode_batch) / decode_batch
            out[j:j + n] = below + (means - low) / width * (above - below)
            j += n
        return out

    def _width(self, mean_context: float) -> int:
        if not self.relative or mean_context < 2 * self.bucket:
            return self.bucket
        power = 1 << max(0, int(math.log2(mean_context)) - RELATIVE_BUCKET_SHIFT)
        return max(self.bucket, power)

    def _cached(self, decode_batch: int, context: int, chunks: tuple[Chunk, ...]) -> float:
        key = (decode_batch, context, chunks)
        price = self._cache.get(key)
        if price is None:
            price = self._cache[key] = self._with_engine(decode_batch, context, chunks)
        return price

    def _with_engine(self, decode_batch: int, context: int, chunks: tuple[Chunk, ...]) -> float:
        """Device time of the step as the engine runs it (a pure decode step padded to its
        captured graph), plus the engine's host time."""
        if decode_batch and not chunks and self.padded_batch is not None:
            padded = self.padded_batch(decode_batch)
            device_s = self._price(padded, round(context * decode_batch / padded), chunks)
        else:
            device_s = self._price(decode_batch, context, chunks)
        if self.host is None:
            return device_s
        return self.host.step_s(device_s, decode_batch + len(chunks), prefills=bool(chunks),
                                moe=self.model.is_moe)

    def _price(self, decode_batch: int, context: int, chunks: tuple[Chunk, ...]) -> float:
        self.misses += 1
        counts: dict[Chunk, int] = {}
        for chunk in chunks:
            counts[chunk] = counts.get(chunk, 0) + 1
        prompts = [SeqGroup(n, new, cached, logit) for (new, cached, logit), n in counts.items()]
        verify = self.decode_tokens
        decodes = [SeqGroup(decode_batch, verify, context, verify)] if decode_batch else []
        seconds = self.seconds(self.model, Step(tuple(prompts + decodes)), self.parallelism)
        if self.draft:
            draft_model, draft_par, gamma = self.draft
            if decode_batch:
                seconds += gamma * self.seconds(draft_model, Step.decode(decode_batch, context),
                                                draft_par)
            if prompts:  # the draft keeps its own KV cache, so it reads the prompts too
                seconds += self.seconds(draft_model, Step(tuple(prompts)), draft_par)
        return seconds

    def seconds(self, model: ModelSpec, step: Step, parallelism: Parallelism) -> float:
        """One step's time as the estimate prices it: an engine that runs a long prompt in
        micro-batches (the cost model says) has each pass priced and the times summed.

        With an engine's host time (``host``) the pass is its device time alone: the cost
        model's fixed time per forward pass (``step_fixed_s``, fitted to single-request
        latencies, where the engine's scheduling, sampling and launch sit between the
        kernels) is the host time the preset models itself, added or, with an overlap
        scheduler, hidden behind the device (``HostTime.step_s``), so it is left out here
        rather than counted twice and never overlapped."""
        total = 0.0
        for part in engine_steps(self.cost, step):
            ledger = fuse_allreduce_norms(build_ledger(model, part, self.precision, parallelism),
                                          model, parallelism, self.fusion)
            total += self.cost.step_time(ledger, self.hardware).total.time_s
            if self.host is not None and hasattr(self.cost, "step_fixed_s"):
                total -= self.cost.step_fixed_s(ledger)
        return total

    @property
    def shapes(self) -> int:
        return len(self._cache)
