"""The forward passes an engine runs for one ledger step."""

from __future__ import annotations

from phasewise.ledger import SeqGroup, Step


def split_prefill(step: Step, ubatch_tokens: int) -> tuple[Step, ...]:
    """A one-group prompt step of more than ``ubatch_tokens`` new tokens, as chunks of at
    most that many tokens in total, each attending to the chunks before it (llama.cpp's
    n_ubatch, ``Traits.prefill_ubatch_tokens``); the logits stay with the last tokens."""
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
