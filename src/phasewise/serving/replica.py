"""One model replica: its queues, its paged KV cache and the bookkeeping of its steps.

Decode bookkeeping is O(1) per step, whatever the batch: every running sequence gains one
token per decode step ("tick"), so a sequence that joins at tick k0 after a prefill of T
tokens has T + (k − k0) cached tokens at tick k. The replica keeps Σ(T − k0) over the
running set, so the batch's total context at tick k is that sum plus B·k; it keeps the
number of running sequences whose next KV slot opens a new block at each tick modulo the
block size; and a heap of the tick at which each sequence emits its last token. A
sequence's token times are read afterwards from the list of tick end times.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from phasewise.serving.kv_cache import KVCapacity, blocks_for
from phasewise.serving.pricing import StepPricer

if TYPE_CHECKING:
    from phasewise.serving.schedulers import Policy


class Seq:
    """A request's state while it is served. ``pieces`` records its token times in order:
    a float is a token emitted by a prefill at that time; (replica, k0, n) is n tokens
    emitted at ticks k0 … k0+n−1 of that replica; (replica, k0, n, p, q) is n tokens of
    speculative rounds yielding p/q tokens each (``serving.speculative``)."""

    __slots__ = ("id", "arrival_s", "isl", "osl", "prefix_tokens", "prefix_id", "client",
                 "generated", "target", "prefilled", "k0", "join_ctx", "phase", "epoch",
                 "pieces", "preemptions", "replica", "decode_replica", "source", "held_blocks",
                 "done_s", "transfer_s")

    def __init__(self, id: int, arrival_s: float, isl: int, osl: int, *,  # noqa: A002
                 prefix_tokens: int = 0, prefix_id: int = -1, client: int = -1) -> None:
        self.id, self.arrival_s, self.isl, self.osl = id, arrival_s, isl, osl
        self.prefix_tokens, self.prefix_id, self.client = prefix_tokens, prefix_id, client
        self.generated = 0  # output tokens emitted so far
        self.target = self.prefilled = 0  # tokens the current prefill computes up to, and has
        self.k0 = self.join_ctx = self.phase = self.epoch = 0
        self.pieces: list[Any] = []
        self.preemptions = 0
        self.replica = self.decode_replica = -1
        self.source: Replica | None = None  # prefill replica still holding this KV (disaggregated)
        self.held_blocks = 0
        self.done_s = self.transfer_s = 0.0

    def holder(self) -> Replica:
        """The prefill replica holding this sequence's KV until it is transferred."""
        if self.source is None:
            raise RuntimeError(f"sequence {self.id} has no prefill replica holding its KV")
        return self.source


@dataclass(frozen=True, slots=True)
class Limits:
    """vLLM's batch limits: sequences in flight, and tokens computed in one step; and
    TensorRT-LLM's batch waiting (``batch_wait_iters`` steps or ``batch_wait_tokens``
    tokens, whichever comes first; 0: prompts never wait), which the mixed scheduler keeps."""

    max_seqs: int
    max_batched_tokens: int
    batch_wait_iters: int = 0
    batch_wait_tokens: int = 0


@dataclass(slots=True)
class Plan:
    """One step: whether the running sequences decode, and which prefill chunks run.
    A run of ``ticks`` > 1 decode-only steps is handled as one event (``Replica``'s
    fast-forward); ``cancelled`` marks the event of a run cut short."""

    decode: bool
    chunks: list[tuple[Seq, int]]
    ticks: int = 1
    cancelled: bool = False


# The most decode steps one fast-forward event covers, and the fewest worth one (below,
# the plain step is cheaper than setting up a run).
MAX_RUN_TICKS = 4096
MIN_RUN_TICKS = 16


class Replica:
    """``role`` is "both" (colocated), "prefill" or "decode" (disaggregated pools)."""

    def __init__(self, index: int, role: str, policy: Policy, pricer: StepPricer,
                 capacity: KVCapacity, limits: Limits, hooks: Any) -> None:
        self.index, self.role, self.policy, self.pricer = index, role, policy, pricer
        self.capacity, self.limits, self.hooks = capacity, limits, hooks
        self.devices = pricer.parallelism.devices
        self.block = capacity.block_tokens
        self.free_blocks = capacity.blocks
        self.waiting: deque[Seq] = deque()  # prompts (and preempted sequences) to prefill
        self.prefilling: list[Seq] = []  # admitted, prefill not finished (chunked)
        self.running: dict[int, Seq] = {}  # decoding, in order of joining
        self.to_pull: deque[Seq] = deque()  # decode pool: prefilled elsewhere, KV not pulled
        self.pulling = 0  # KV transfers in flight towards this replica
        self.pulled: list[Seq] = []  # KV arrived, joining at the next step
        self.prefixes: set[int] = set()
        self.tick = 0
        self.tick_end_s = array("d")  # end time of every decode step
        self.context_base = 0  # Σ (join_ctx − k0) over the running set
        self.phase_counts = [0] * self.block
        self.finishing: list[tuple[int, int, int, Seq]] = []  # (last tick, id, epoch, seq)
        self.busy = self.wake_pending = False
        self.now_s = 0.0  # when the step being planned starts
        self.link_free_s = 0.0  # the outgoing KV link (prefill pool)
        self.outstanding = 0  # requests routed here and not yet done (or handed off)
        self.preemptions = 0
        self.prefix_hit_tokens = 0  # prompt tokens the prefix cache supplied
        self.steps = array("d")  # STEP_FIELDS of every step, flat (8 bytes a field)
        self.fast_forward = True  # run steady decode steps as one event (same results)
        self.run_plan: Plan | None = None  # the decode run in flight, if any
        self.run_ends = np.empty(0)  # its steps' end times
        self.batch_wait_count = 0  # steps the admitted prompts have been held back

    STEP_FIELDS = ("start_s", "duration_s", "decodes", "prefill_tokens", "prefill_seqs",
                   "waiting", "in_system", "kv_blocks_used")

    @property
    def step_count(self) -> int:
        return len(self.steps) // len(self.STEP_FIELDS)

    # ---------------------------------------------------------------- queues

    @property
    def in_flight(self) -> int:
        return len(self.running) + len(self.prefilling) + self.pulling + len(self.pulled)

    @property
    def used_blocks(self) -> int:
        return self.capacity.blocks - self.free_blocks

    def admit(self, seq: Seq) -> int:
        """Move the head of ``waiting`` into ``prefilling`` and give it blocks for its
        whole prompt (and, after a preemption, the tokens it had generated). Returns the
        tokens left to compute; the prefix cache supplies the first ones."""
        self.waiting.popleft()
        seq.target = seq.isl + seq.generated
        hit = seq.prefix_id < 0 or seq.prefix_id in self.prefixes
        seq.prefilled = seq.prefix_tokens if hit else 0
        self.prefix_hit_tokens += seq.prefilled
        seq.held_blocks = blocks_for(seq.target, self.block)
        self.free_blocks -= seq.held_blocks
        seq.replica = self.index
        self.prefilling.append(seq)
        return seq.target - seq.prefilled

    def tokens_to_prefill(self, seq: Seq) -> int:
        hit = seq.prefix_id < 0 or seq.prefix_id in self.prefixes
        return seq.isl + seq.generated - (seq.prefix_tokens if hit else 0)

    def can_admit(self, seq: Seq) -> bool:
        blocks = blocks_for(seq.isl + seq.generated, self.block)
        return (self.in_flight < self.limits.max_seqs
                and self.free_blocks - blocks >= self.capacity.watermark_blocks)

    def start_pulls(self, out: list) -> None:
        """Decode pool: reserve blocks for prefilled sequences and pull their KV over the
        prefill replica's link, first come first served."""
        while self.to_pull and self.in_flight < self.limits.max_seqs:
            seq = self.to_pull[0]
            blocks = blocks_for(seq.isl + seq.generated - 1, self.block)
            if self.free_blocks - blocks < self.capacity.watermark_blocks:
                break
            self.to_pull.popleft()
            self.free_blocks -= blocks
            self.pulling += 1
            out.append(self.hooks.transfer(seq, self))

    def join_pulled(self) -> None:
        for seq in self.pulled:
            seq.held_blocks = 0  # reserved when the pull started
            self._join(seq, seq.isl + seq.generated - 1)
        self.pulled.clear()

    # ---------------------------------------------------------------- decode memory

    def reserve_decode(self) -> None:
        """Give every running sequence the KV slot of this tick, preempting the latest
        joined sequences (recomputed later, as vLLM does by default) while blocks run out."""
        phase = self.tick % self.block
        need = self.phase_counts[phase]
        while need > self.free_blocks and self.running:
            victim = self.running[next(reversed(self.running))]
            need -= victim.phase == phase
            self._preempt(victim)
        self.free_blocks -= need

    def _preempt(self, seq: Seq) -> None:
        self._leave(seq)
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _join(self, seq: Seq, tokens_cached: int) -> None:
        """Start decoding after a prefill that left ``tokens_cached`` tokens in the cache
        (their blocks are already held)."""
        k0 = self.tick
        seq.k0, seq.join_ctx, seq.phase = k0, tokens_cached, (k0 - tokens_cached) % self.block
        seq.epoch += 1
        seq.decode_replica = self.index
        self.running[seq.id] = seq
        self.context_base += tokens_cached - k0
        self.phase_counts[seq.phase] += 1
        last_tick = k0 + seq.osl - seq.generated - 1
        heapq.heappush(self.finishing, (last_tick, seq.id, seq.epoch, seq))

    def _leave(self, seq: Seq) -> None:
        """Leave the running set after the ticks done so far; free the blocks they hold."""
        ticks = self.tick - seq.k0
        del self.running[seq.id]
        self.context_base -= seq.join_ctx - seq.k0
        self.phase_counts[seq.phase] -= 1
        seq.epoch += 1
        seq.generated += ticks
        if ticks:
            seq.pieces.append((self.index, seq.k0, ticks))
        self.free_blocks += blocks_for(seq.join_ctx + ticks, self.block)
        seq.held_blocks = 0

    # ---------------------------------------------------------------- steps

    def poke(self, now_s: float, out: list) -> None:
        """Wake an idle replica at ``now_s`` (once) so it plans a step; a replica in a
        decode run stops it at the first step ending at or after ``now_s``."""
        if not self.busy and not self.wake_pending:
            self.wake_pending = True
            out.append(self.hooks.wake(now_s, self))
        elif self.run_plan is not None:
            self._cut_run(self.run_plan, now_s, out)

    def start_step(self, now_s: float, out: list) -> None:
        self.wake_pending = False
        self.now_s = now_s
        plan = self.policy.plan(self, out)
        if plan is None:
            self.busy = False
            return
        if plan.decode and not plan.chunks and self._steady() and \
                self.finishing[0][0] - self.tick >= MIN_RUN_TICKS:
            self._start_run(now_s, plan, out)
            return
        decodes = len(self.running) if plan.decode else 0
        context_sum = self.context_sum() if decodes else 0
        chunks = tuple((tokens, seq.prefilled, int(seq.prefilled + tokens == seq.target))
                       for seq, tokens in plan.chunks)
        duration_s = self.pricer.step_s(decodes, context_sum, chunks)
        self.steps.extend((now_s, duration_s, decodes, sum(c[0] for c in chunks), len(chunks),
                           len(self.waiting), self.in_flight + len(self.waiting),
                           self.used_blocks))
        self.busy = True
        out.append(self.hooks.step_end(now_s + duration_s, self, plan))

    # ---------------------------------------------------------------- decode runs
    #
    # While a replica only decodes (nothing prefilling, no KV moving in) every step is a
    # tick whose batch stays the same until a sequence finishes, and a waiting request
    # that could not join stays unable to (blocks only get fewer). Such ticks are priced
    # in one go and handled as one event, up to the first finishing tick, the blocks in
    # hand, or MAX_RUN_TICKS; a request arriving meanwhile cuts the run at the first tick
    # ending at or after it, where a step-by-step loop would have planned it in. The
    # results are the same as stepping (tests/test_serving_engines.py holds them so).

    def _steady(self) -> bool:
        return (self.fast_forward and not self.prefilling and not self.to_pull
                and not self.pulled and not self.pulling)

    def _start_run(self, now_s: float, plan: Plan, out: list) -> None:
        batch, tick, block = len(self.running), self.tick, self.block
        last = min(self.finishing[0][0] - tick + 1, MAX_RUN_TICKS)
        counts = np.asarray(self.phase_counts)
        # KV slots of ticks 1, 2, …: the run stops before the blocks in hand run out
        needs = counts[(tick + np.arange(1, last)) % block]
        ticks = 1 + int(np.searchsorted(np.cumsum(needs), self.free_blocks, side="right"))
        durations = self.pricer.run_s(batch, self.context_sum(), ticks)
        ends = np.cumsum(np.concatenate(([now_s], durations)))[1:]
        plan.ticks = ticks
        self.run_plan, self.run_ends, self.busy = plan, ends, True
        out.append(self.hooks.step_end(float(ends[-1]), self, plan))

    def _cut_run(self, plan: Plan, now_s: float, out: list) -> None:
        j = int(np.searchsorted(self.run_ends[:plan.ticks - 1], now_s, side="left"))
        if j >= plan.ticks - 1:
            return
        plan.cancelled = True
        cut = Plan(True, [], ticks=j + 1)
        self.run_plan = cut
        out.append(self.hooks.step_end(float(self.run_ends[j]), self, cut))

    def _end_run(self, plan: Plan) -> None:
        """Book the run's ticks but the last (which ``_end_tick`` ends): their step rows,
        end times and KV slots."""
        k, block = plan.ticks, self.block
        needs = np.asarray(self.phase_counts)[(self.tick + np.arange(1, k)) % block]
        used = self.used_blocks + np.concatenate(([0], np.cumsum(needs)))
        ends = self.run_ends[:k]
        rows = np.empty((k, len(self.STEP_FIELDS)))
        rows[:, 0] = np.concatenate(([self.now_s], ends[:-1]))
        rows[:, 1] = ends - rows[:, 0]
        rows[:, 2], rows[:, 3], rows[:, 4] = len(self.running), 0, 0
        rows[:, 5] = len(self.waiting)
        rows[:, 6] = self.in_flight + len(self.waiting)
        rows[:, 7] = used
        self.steps.frombytes(rows.tobytes())
        self.tick_end_s.frombytes(np.ascontiguousarray(ends[:-1]).tobytes())
        self.free_blocks -= int(needs.sum())
        self.tick += k - 1
        self.run_plan = None

    def end_step(self, plan: Plan, now_s: float, out: list) -> None:
        if plan.cancelled:
            return
        if self.run_plan is plan:
            self._end_run(plan)
        if plan.decode:
            self._end_tick(now_s, out)
        for seq, tokens in plan.chunks:
            seq.prefilled += tokens
            if seq.prefilled == seq.target:
                self._end_prefill(seq, now_s, out)
        self.start_step(now_s, out)

    def context_sum(self) -> int:
        """Cached tokens of the running set at this tick."""
        return self.context_base + len(self.running) * self.tick

    def _end_tick(self, now_s: float, out: list) -> None:
        tick = self.tick
        self.tick_end_s.append(now_s)
        self.tick += 1
        finishing = self.finishing
        while finishing and finishing[0][0] <= tick:
            _, _, epoch, seq = heapq.heappop(finishing)
            if epoch == seq.epoch:
                self._leave(seq)
                self.hooks.done(seq, now_s, self, out)

    def _end_prefill(self, seq: Seq, now_s: float, out: list) -> None:
        self.prefilling.remove(seq)
        if seq.prefix_id >= 0:
            self.prefixes.add(seq.prefix_id)
        seq.generated += 1
        if seq.generated >= seq.osl:
            seq.pieces.append(now_s)
            self.free_blocks += seq.held_blocks
            seq.held_blocks = 0
            self.hooks.done(seq, now_s, self, out)
        elif self.role == "prefill":
            self.hooks.prefilled(seq, now_s, self, out)  # its token leaves with the KV
        else:
            seq.pieces.append(now_s)
            seq.held_blocks = 0  # the running set's blocks are counted from its context
            self._join(seq, seq.target)

    def release(self, seq: Seq, now_s: float, out: list) -> None:
        """Prefill pool: the KV of ``seq`` has moved out; free its blocks."""
        self.free_blocks += seq.held_blocks
        seq.held_blocks = 0
        if self.waiting:
            self.poke(now_s, out)
