"""The event loop: explicit tie order, and events that return their follow-ups."""

from __future__ import annotations

from phasewise.serving import engine
from phasewise.serving.engine import EventLoop


class Note:
    def __init__(self, log: list, label: str, time_s: float, priority: int,
                 follow: tuple = ()) -> None:
        self.log, self.label, self.time_s, self.priority, self.follow = log, label, time_s, priority, follow

    def handle(self) -> list:
        self.log.append(self.label)
        return list(self.follow)


def test_events_run_in_time_order() -> None:
    log: list = []
    loop = EventLoop()
    for label, t in (("c", 3.0), ("a", 1.0), ("b", 2.0)):
        loop.push(Note(log, label, t, engine.ARRIVAL))
    loop.run()
    assert log == ["a", "b", "c"]


def test_at_one_instant_lower_priority_runs_first_then_first_pushed() -> None:
    log: list = []
    loop = EventLoop()
    loop.push(Note(log, "wake", 1.0, engine.WAKE))
    loop.push(Note(log, "step end", 1.0, engine.STEP_END))
    loop.push(Note(log, "arrival 1", 1.0, engine.ARRIVAL))
    loop.push(Note(log, "kv", 1.0, engine.KV_TRANSFERRED))
    loop.push(Note(log, "arrival 2", 1.0, engine.ARRIVAL))
    loop.run()
    assert log == ["arrival 1", "arrival 2", "kv", "step end", "wake"]


def test_priorities_put_arrivals_before_a_step_end_and_wakes_last() -> None:
    assert engine.ARRIVAL < engine.KV_TRANSFERRED < engine.STEP_END < engine.WAKE


def test_follow_up_events_are_scheduled_and_ties_with_them_keep_push_order() -> None:
    log: list = []
    loop = EventLoop()
    later = Note(log, "follow-up", 2.0, engine.ARRIVAL)
    loop.push(Note(log, "first", 1.0, engine.ARRIVAL, follow=(later,)))
    loop.push(Note(log, "queued before the follow-up", 2.0, engine.ARRIVAL))
    loop.run()
    assert log == ["first", "queued before the follow-up", "follow-up"]
    assert loop.handled == 3 and loop.now_s == 2.0


def test_heap_entries_never_compare_events() -> None:
    # Events without an ordering of their own: equal keys up to seq must not reach them.
    log: list = []
    loop = EventLoop()
    for i in range(50):
        loop.push(Note(log, str(i), 0.0, engine.ARRIVAL))
    loop.run()
    assert log == [str(i) for i in range(50)]
