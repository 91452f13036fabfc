"""Speculative decoding in the simulator, on the estimate's model of it.

A decode step becomes a round: γ draft decode steps, then one target step verifying γ+1
tokens a sequence (``estimate.speculative``). A round yields on average
E = (1 − α^(γ+1)) / (1 − α) tokens (Leviathan et al. 2023, eq. 1). The simulator gives
every sequence that expectation deterministically: after r rounds in the running set a
sequence has ⌊r·E⌋ more tokens, with E held as an exact fraction so token counts, block
counts and token times agree everywhere. Tokens accepted in one round reach the user
together (gaps of zero in ITL). Per-round acceptance noise is left out, so ITL shows the
mean pattern rather than the spread, and the KV slots of rejected drafts (freed within
the round) are not counted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from fractions import Fraction

from phasewise.catalog import load_model
from phasewise.estimate.speculative import (
    check_draft,
    check_speculation,
    draft_parallelism,
    draft_weight_bytes,
    expected_tokens_per_round,
    head_draft,
)
from phasewise.ledger import kv_cache_bytes_per_device
from phasewise.serving.kv_cache import blocks_for
from phasewise.serving.replica import Replica, Seq
from phasewise.specs import ModelSpec, Parallelism, Precision

# Denominator bound of the rational tokens-per-round: E is kept within 1/1000² of its value.
ROUND_FRACTION_DENOMINATOR = 1000


@dataclass(frozen=True, slots=True)
class Speculation:
    """γ draft tokens a round (``tokens``), accepted each with probability α (``accept``),
    drafted by another model (``draft``) or a head costing a fraction of the target's
    layers (``draft_head_fraction``, EAGLE/MTP style)."""

    tokens: int = 4
    accept: float = 0.7
    draft: str | ModelSpec | None = None
    draft_head_fraction: float | None = None
    source: str = ""  # where ``accept`` came from (a catalog figure, or the user)

    @property
    def tokens_per_round(self) -> Fraction:
        check_speculation(self.accept, self.tokens)
        expected = expected_tokens_per_round(self.accept, self.tokens)
        return Fraction(expected).limit_denominator(ROUND_FRACTION_DENOMINATOR)

    def drafter(self, target: ModelSpec, parallelism: Parallelism) -> tuple[ModelSpec, Parallelism, bool]:
        """The draft model, its parallelism, and whether it is a head on the target."""
        from phasewise.errors import InputError

        if self.draft is None and self.draft_head_fraction is not None:
            model, head = head_draft(target, self.draft_head_fraction), True
        elif self.draft is not None and self.draft_head_fraction is None:
            model = load_model(self.draft) if isinstance(self.draft, str) else self.draft
            head = False
        else:
            raise InputError("speculative decoding needs one draft: --draft MODEL or "
                             "--draft-head FRACTION.")
        return model, draft_parallelism(model, parallelism, head), head

    def warnings(self, target: ModelSpec, parallelism: Parallelism) -> list[str]:
        """What is wrong with the draft: an error if it is not smaller than the target, a
        warning if its vocabulary differs (the estimate's checks)."""
        model, _, head = self.drafter(target, parallelism)
        return check_draft(target, model, head)

    def memory(self, target: ModelSpec, precision: Precision,
               parallelism: Parallelism) -> tuple[float, float]:
        """Per device: the draft's weights (a head shares the target's embedding and LM
        head) and its KV bytes per token, held beside the target's."""
        model, par, head = self.drafter(target, parallelism)
        return (draft_weight_bytes(model, precision, par, head),
                kv_cache_bytes_per_device(model, precision, par, sequences=1, context_tokens=1))


class SpeculativeReplica(Replica):
    """A replica whose decode steps are speculative rounds. Bookkeeping is O(batch) a
    round (each sequence's tokens follow ⌊r·E⌋ from its own join), not O(1)."""

    def __init__(self, *args, tokens_per_round: Fraction, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.fast_forward = False  # rounds grow the context by their yield, not by one
        self.p, self.q = tokens_per_round.numerator, tokens_per_round.denominator

    def tokens_after(self, rounds: int) -> int:
        return rounds * self.p // self.q

    def rounds_for(self, tokens: int) -> int:
        return -(-tokens * self.q // self.p)

    def context_sum(self) -> int:
        return sum(s.join_ctx + self.tokens_after(self.tick - s.k0) for s in self.running.values())

    def reserve_decode(self) -> None:
        """Blocks for the tokens each sequence accepts this round; the latest joined are
        preempted while they run out."""
        needs = {seq.id: self._round_blocks(seq) for seq in self.running.values()}
        need = sum(needs.values())
        while need > self.free_blocks and self.running:
            victim = self.running[next(reversed(self.running))]
            need -= needs.pop(victim.id)
            self._preempt(victim)
        self.free_blocks -= need

    def _round_blocks(self, seq: Seq) -> int:
        done = self.tick - seq.k0
        before = seq.join_ctx + self.tokens_after(done)
        after = seq.join_ctx + min(self.tokens_after(done + 1), seq.osl - seq.generated)
        return blocks_for(after, self.block) - blocks_for(before, self.block)

    def _join(self, seq: Seq, tokens_cached: int) -> None:
        k0 = self.tick
        seq.k0, seq.join_ctx = k0, tokens_cached
        seq.epoch += 1
        seq.decode_replica = self.index
        self.running[seq.id] = seq
        last_tick = k0 + self.rounds_for(seq.osl - seq.generated) - 1
        heapq.heappush(self.finishing, (last_tick, seq.id, seq.epoch, seq))

    def _leave(self, seq: Seq) -> None:
        tokens = min(self.tokens_after(self.tick - seq.k0), seq.osl - seq.generated)
        del self.running[seq.id]
        seq.epoch += 1
        seq.generated += tokens
        if tokens:
            seq.pieces.append((self.index, seq.k0, tokens, self.p, self.q))
        self.free_blocks += blocks_for(seq.join_ctx + tokens, self.block)
        seq.held_blocks = 0
