"""An engine step: the sequences one forward pass serves, each with its new and cached tokens.

Prefill is a step of one chunk per prompt and an empty cache; decode is a step of one-token
sequences with their contexts; chunked prefill and mixed batches are steps with both.
"""

from __future__ import annotations

from dataclasses import dataclass

from phasewise.errors import InputError


@dataclass(frozen=True, slots=True)
class SeqGroup:
    """``count`` sequences, each computing ``new_tokens`` after ``cached_tokens`` in the KV
    cache, of which the last ``logit_tokens`` need the LM head."""

    count: int
    new_tokens: int
    cached_tokens: int = 0
    logit_tokens: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or self.new_tokens < 1 or self.cached_tokens < 0:
            raise InputError(f"a step needs at least one sequence of at least one new token "
                             f"(got count={self.count}, new={self.new_tokens}, "
                             f"cached={self.cached_tokens}).")
        if not 0 <= self.logit_tokens <= self.new_tokens:
            raise InputError(f"logit tokens ({self.logit_tokens}) must lie in 0..new tokens "
                             f"({self.new_tokens}).")


@dataclass(frozen=True, slots=True)
class Step:
    groups: tuple[SeqGroup, ...]

    @classmethod
    def prefill(cls, prompt_tokens: int, *, batch: int = 1, cached_tokens: int = 0,
                logit_tokens: int = 1) -> Step:
        return cls((SeqGroup(batch, prompt_tokens, cached_tokens, logit_tokens),))

    @classmethod
    def decode(cls, batch: int, context_tokens: int, *, new_tokens: int = 1) -> Step:
        """``batch`` sequences each with ``context_tokens`` already cached; ``new_tokens`` > 1
        is a speculative verify step, which needs logits for every new token."""
        return cls((SeqGroup(batch, new_tokens, context_tokens, new_tokens),))

    def __add__(self, other: Step) -> Step:
        return Step(self.groups + other.groups)

    @property
    def new_tokens(self) -> int:
        return sum(g.count * g.new_tokens for g in self.groups)

    @property
    def logit_tokens(self) -> int:
        return sum(g.count * g.logit_tokens for g in self.groups)

    @property
    def sequences(self) -> int:
        return sum(g.count for g in self.groups)
