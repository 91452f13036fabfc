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
"""

from __future__ import annotations

from phasewise.cost import CostModel
from phasewise.cost.calibrated import engine_steps
from phasewise.ledger import SeqGroup, Step, build_ledger
from phasewise.specs import HardwareSpec, ModelSpec, Parallelism, Precision

# 16 tokens: vLLM's default KV block size, so bucket edges fall on block edges.
DEFAULT_BUCKET_TOKENS = 16

Chunk = tuple[int, int, int]  # (new tokens, cached tokens, logit tokens) of one sequence


class StepPricer:
    """Seconds per step for one replica's model, device, precision and parallelism."""

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, precision: Precision,
                 parallelism: Parallelism, cost: CostModel, *,
                 bucket_tokens: int = DEFAULT_BUCKET_TOKENS,
                 draft: tuple[ModelSpec, Parallelism, int] | None = None) -> None:
        self.model, self.hardware, self.precision = model, hardware, precision
        self.parallelism, self.cost, self.bucket = parallelism, cost, max(1, bucket_tokens)
        # Speculative decoding: (draft model, its parallelism, γ). A decode step is then a
        # round: γ draft decode steps, and one target step verifying γ+1 tokens a sequence.
        self.draft = draft
        self.decode_tokens = 1 + (draft[2] if draft else 0)
        self._cache: dict[tuple, float] = {}
        self.misses = 0

    def step_s(self, decode_batch: int, context_sum: int, chunks: tuple[Chunk, ...] = ()) -> float:
        """A step of ``decode_batch`` one-token decodes whose cached contexts sum to
        ``context_sum``, plus prefill ``chunks``."""
        bucket = self.bucket
        mean = (int(context_sum / decode_batch / bucket + 0.5) * bucket) if decode_batch else 0
        if chunks:
            chunks = tuple(sorted((new, int(cached / bucket + 0.5) * bucket, logit)
                                  for new, cached, logit in chunks))
        key = (decode_batch, mean, chunks)
        price = self._cache.get(key)
        if price is None:
            price = self._cache[key] = self._price(decode_batch, mean, chunks)
        return price

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
        micro-batches (the cost model says) has each pass priced and the times summed."""
        return sum(self.cost.step_time(build_ledger(model, part, self.precision, parallelism),
                                       self.hardware).total.time_s
                   for part in engine_steps(self.cost, step))

    @property
    def shapes(self) -> int:
        return len(self._cache)
