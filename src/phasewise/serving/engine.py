"""The discrete-event loop: a heap of events ordered by (time, priority, sequence number).

Events return their follow-up events (Vidur's design); the loop only pops, handles and
pushes. Ties are explicit: at one instant, lower ``priority`` runs first, and among equal
priorities the event pushed first runs first, so a run is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

# Priorities at one instant: new work lands in the queues before an engine finishing a
# step picks its next batch, so requests arriving at the instant a step ends can join it.
ARRIVAL = 0
KV_TRANSFERRED = 1
STEP_END = 2
WAKE = 3


class Event(Protocol):
    time_s: float
    priority: int

    def handle(self) -> Iterable[Event]: ...


class Scheduled(NamedTuple):
    """A heap entry. ``seq`` is unique, so comparison never reaches ``event``."""

    time_s: float
    priority: int
    seq: int
    event: Event


class EventLoop:
    def __init__(self) -> None:
        self._heap: list[Scheduled] = []
        self._counter = itertools.count()
        self.now_s = 0.0
        self.handled = 0

    def push(self, event: Event) -> None:
        heapq.heappush(self._heap, Scheduled(event.time_s, event.priority,
                                             next(self._counter), event))

    def run(self, *, every: int = 0, on_progress: Callable[[], None] | None = None) -> None:
        """Handle events until none is left; ``on_progress`` is called every ``every`` events."""
        heap, push, pop, counter = self._heap, heapq.heappush, heapq.heappop, self._counter
        while heap:
            entry = pop(heap)
            self.now_s = entry.time_s
            for follow in entry.event.handle():
                push(heap, Scheduled(follow.time_s, follow.priority, next(counter), follow))
            self.handled += 1
            if every and self.handled % every == 0 and on_progress is not None:
                on_progress()
