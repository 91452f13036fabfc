"""Timing a callable from outside: warm-up, repeats, median (DESIGN.md, measure/).

Three clocks, chosen by ``clock_for``:
- ``cuda-events``: kernels run asynchronously, so each repeat is bracketed by CUDA events
  and the event synchronised before it is read.
- ``thread-cpu``: a CPU run on one torch thread does all its work on the calling thread,
  so that thread's CPU time (``time.thread_time``) is the work's time, and time the OS gave
  to other processes on a shared machine does not count.
- ``wall``: ``time.perf_counter``, for multi-threaded CPU runs.

The median resists the odd slow repeat (a page fault, a neighbour's burst).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CLOCKS = ("cuda-events", "thread-cpu", "wall")


@dataclass(frozen=True, slots=True)
class Sample:
    """Seconds per call over ``repeats`` timed calls after the warm-up."""

    median_s: float
    min_s: float
    max_s: float
    repeats: int

    @classmethod
    def of(cls, times_s: list[float]) -> Sample:
        return cls(statistics.median(times_s), min(times_s), max(times_s), len(times_s))


def clock_for(device: str) -> str:
    if device.startswith("cuda"):
        return "cuda-events"
    import torch

    return "thread-cpu" if torch.get_num_threads() == 1 else "wall"


def time_call(fn: Callable[[], Any], *, device: str = "cpu", warmup: int = 1,
              repeats: int = 5) -> Sample:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed one by one."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        fn()
    timer = {"cuda-events": _cuda_time, "thread-cpu": _thread_time,
             "wall": _wall_time}[clock_for(device)]
    return Sample.of([timer(fn) for _ in range(repeats)])


def _wall_time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _thread_time(fn: Callable[[], Any]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def _cuda_time(fn: Callable[[], Any]) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds
