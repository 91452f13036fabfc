"""Batching policies: what the next engine step of a replica computes.

Each policy looks at a replica's queues and returns a ``Plan`` (decode the running set or
not, and which prefill chunks to run), or None when there is nothing to do. Adding a
scheduler is one entry in ``SCHEDULERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from phasewise.errors import InputError, nearest_hint
from phasewise.estimate.core import PREFILL_CHUNK_TOKENS
from phasewise.serving.replica import Plan, Replica, Seq

# vLLM's default max_num_seqs (sequences in flight per replica).
DEFAULT_MAX_SEQS = 256
# Tokens one step computes by default: vLLM's default max_num_batched_tokens for online
# serving with chunked prefill, the prefill size the estimate's memory report assumes too
# (estimate.core.PREFILL_CHUNK_TOKENS). Schedulers that prefill whole prompts raise it to
# the longest request, which must fit one step. Sarathi-Serve (Agrawal et al., OSDI 2024)
# runs 512 or 2048 for tighter TPOT; --max-num-batched-tokens sets it.
DEFAULT_BATCHED_TOKENS = PREFILL_CHUNK_TOKENS


class Policy(Protocol):
    def plan(self, replica: Replica, out: list) -> Plan | None: ...


def _continue_prefills(r: Replica, budget: int) -> tuple[list[tuple[Seq, int]], int]:
    chunks = []
    for seq in r.prefilling:
        if budget <= 0:
            break
        take = min(budget, seq.target - seq.prefilled)
        chunks.append((seq, take))
        budget -= take
    return chunks, budget


def _admit_prompts(r: Replica, budget: int, *, whole: bool) -> list[tuple[Seq, int]]:
    """Admit waiting requests first come first served while sequences, tokens and KV
    blocks allow; ``whole`` prompts must fit the budget, otherwise the last is chunked."""
    chunks = []
    while r.waiting and budget > 0:
        seq = r.waiting[0]
        need = r.tokens_to_prefill(seq)
        if (whole and need > budget) or not r.can_admit(seq):
            break
        r.admit(seq)
        take = min(need, budget)
        chunks.append((seq, take))
        budget -= take
    return chunks


class StaticBatching:
    """Request-level batching (a plain ``generate()`` over a batch, FasterTransformer):
    a batch of whole prompts is prefilled together and decoded until its last request
    ends; finished requests leave the batch but nothing joins it until it is empty."""

    def plan(self, r: Replica, out: list) -> Plan | None:
        if r.running:
            r.reserve_decode()
            if r.running:
                return Plan(True, [])
        chunks = _admit_prompts(r, r.limits.max_batched_tokens, whole=True)
        return Plan(False, chunks) if chunks else None


class ContinuousBatching:
    """vLLM's default scheduler without chunked prefill (Orca-style iteration-level
    batching): waiting prompts are admitted and prefilled whole, in a step of their own
    (prefill first, the running decodes wait), else every running sequence decodes."""

    def plan(self, r: Replica, out: list) -> Plan | None:
        r.join_pulled()
        r.start_pulls(out)
        chunks = _admit_prompts(r, r.limits.max_batched_tokens, whole=True)
        if chunks:
            return Plan(False, chunks)
        if r.running:
            r.reserve_decode()
            if r.running:
                return Plan(True, [])
            chunks = _admit_prompts(r, r.limits.max_batched_tokens, whole=True)
        return Plan(False, chunks) if chunks else None


class ChunkedPrefill:
    """Sarathi-Serve's stall-free batching: each step's token budget goes first to one
    token for every running decode (γ+1 when speculating), then to chunks of prompts
    already being prefilled, then to newly admitted prompts, so decodes never wait for a
    long prefill."""

    def plan(self, r: Replica, out: list) -> Plan | None:
        r.join_pulled()
        r.start_pulls(out)
        budget = r.limits.max_batched_tokens
        if r.running:
            r.reserve_decode()
            budget -= len(r.running) * r.pricer.decode_tokens
        chunks, budget = _continue_prefills(r, budget)
        chunks += _admit_prompts(r, budget, whole=False)
        if not chunks and not r.running:
            return None
        return Plan(bool(r.running), chunks)


class PrefillFirstChunked:
    """SGLang's default loop: whenever a prefill batch can be formed it runs in a step of
    its own, up to the chunked-prefill budget (a longer prompt continues in the next
    prefill step); otherwise every running sequence decodes. Prefill and decode share no
    step (--enable-mixed-chunk is off by default)."""

    def plan(self, r: Replica, out: list) -> Plan | None:
        r.join_pulled()
        r.start_pulls(out)
        chunks, budget = _continue_prefills(r, r.limits.max_batched_tokens)
        chunks += _admit_prompts(r, budget, whole=False)
        if chunks:
            return Plan(False, chunks)
        if r.running:
            r.reserve_decode()
            if r.running:
                return Plan(True, [])
        return None


class MixedWhole:
    """TensorRT-LLM's in-flight batching without chunked prefill: every running sequence
    decodes, and waiting prompts join the same step whole while the token budget left
    after the decodes holds them.

    With batch waiting (``Limits.batch_wait_iters``), as PyExecutor._waiting_requests does
    it: while sequences decode, the prompts a step would run are held back (admitted, their
    KV reserved) one step at a time until the held steps reach ``batch_wait_iters`` or the
    step's tokens (the prompts plus the decodes) reach ``batch_wait_tokens``; then all of
    them run and the count restarts. With nothing decoding nothing waits."""

    def plan(self, r: Replica, out: list) -> Plan | None:
        r.join_pulled()
        r.start_pulls(out)
        budget = r.limits.max_batched_tokens
        if r.running:
            r.reserve_decode()
            budget -= len(r.running) * r.pricer.decode_tokens
        # prompts held back by batch waiting: admitted whole under an earlier step's budget,
        # which only grows while they wait (nothing joins the decodes meanwhile)
        held = [(seq, seq.target - seq.prefilled) for seq in r.prefilling]
        chunks = held + _admit_prompts(r, budget - sum(t for _, t in held), whole=True)
        if not chunks and not r.running:
            if r.waiting and r.can_admit(r.waiting[0]):  # a prompt over the budget runs alone
                chunks = _admit_prompts(r, r.tokens_to_prefill(r.waiting[0]), whole=True)
            if not chunks:
                return None
        if chunks and r.running and r.limits.batch_wait_iters > 0:
            tokens = sum(t for _, t in chunks) + len(r.running) * r.pricer.decode_tokens
            if r.batch_wait_count < r.limits.batch_wait_iters and \
                    tokens < r.limits.batch_wait_tokens:
                r.batch_wait_count += 1
                return Plan(True, [])
            r.batch_wait_count = 0
        return Plan(bool(r.running), chunks)


@dataclass(frozen=True, slots=True)
class Scheduler:
    """A named way to serve: the batching policy of each replica, whether prefill and
    decode run on separate pools, and whether prompts may be split across steps."""

    policy: Callable[[], Policy]
    summary: str
    disaggregated: bool = False
    chunked: bool = False

    def default_budget(self, longest_tokens: int) -> int:
        """Tokens a step computes; whole-prompt schedulers fit the longest request (prompt
        plus answer, the most a recomputation prefills)."""
        if self.chunked:
            return DEFAULT_BATCHED_TOKENS
        return max(DEFAULT_BATCHED_TOKENS, longest_tokens)


SCHEDULERS: dict[str, Scheduler] = {
    "static": Scheduler(StaticBatching, "request-level batches; nothing joins a running batch"),
    "continuous": Scheduler(ContinuousBatching,
                            "vLLM-style continuous batching, whole prompts first"),
    "chunked": Scheduler(ChunkedPrefill, "Sarathi-style chunked prefill under a token budget",
                         chunked=True),
    "prefill-first": Scheduler(PrefillFirstChunked, "SGLang-style: chunked prefill steps "
                               "first, decode steps when no prompt waits", chunked=True),
    "mixed": Scheduler(MixedWhole, "TensorRT-LLM-style in-flight batching: whole prompts "
                       "join the decodes under the token budget"),
    "disaggregated": Scheduler(ContinuousBatching,
                               "prefill and decode pools; KV moves over a link (DistServe)",
                               disaggregated=True),
}


def scheduler(name: str) -> Scheduler:
    if name not in SCHEDULERS:
        raise InputError(f"unknown scheduler '{name}'.{nearest_hint(name, list(SCHEDULERS))} "
                         f"Known: {', '.join(SCHEDULERS)}.")
    return SCHEDULERS[name]
