"""Where the planner's tasks run: in this process, a local process pool, or a Ray cluster.

A task is a module-level function and its arguments (frozen specs, picklable); each
executor's ``map`` returns the results in the order of the tasks, whatever order they
finish in, so every executor gives the same answer in the same order. ``on_done`` is
called once per finished task (a progress bar); ``parallelism`` is how many tasks run at
once, which the search uses to size its tasks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from phasewise.errors import InputError

Task = tuple[Callable[..., Any], tuple]
EXECUTORS = ("local", "serial", "ray")


def _run(task: Task) -> Any:
    fn, args = task
    return fn(*args)


class Serial:
    """Every task in this process, one after another."""

    name = "serial"
    parallelism = 1

    def map(self, tasks: Sequence[Task], on_done: Callable[[], None] | None = None) -> list:
        out = []
        for task in tasks:
            out.append(_run(task))
            if on_done:
                on_done()
        return out

    def close(self) -> None:
        pass


class LocalPool:
    """A pool of ``workers`` processes on this machine (default: the usable CPUs)."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        if workers is None:
            workers = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                       else os.cpu_count() or 1)
        self.workers = workers
        self.parallelism = workers
        self._pool = None

    def map(self, tasks: Sequence[Task], on_done: Callable[[], None] | None = None) -> list:
        if self.workers <= 1 or len(tasks) <= 1:
            return Serial().map(tasks, on_done)
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        futures = {self._pool.submit(_run, task): i for i, task in enumerate(tasks)}
        out: list[Any] = [None] * len(tasks)
        for future in as_completed(futures):
            out[futures[future]] = future.result()
            if on_done:
                on_done()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class RayExecutor:
    """Tasks as Ray remote functions on the cluster at ``address`` (None: start a local
    Ray instance with ``num_cpus`` CPUs). Results come back in task order (``ray.get``
    on the list of references)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError("--executor ray needs Ray: pip install 'phasewise[ray]'.") from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = num_cpus
            try:
                ray.init(**kwargs)
            except ConnectionError as err:
                raise InputError(f"--ray-address {address}: cannot reach a Ray cluster there "
                                 f"({err}); start one with `ray start --head`.") from None
            self._started = True
        self._remote = ray.remote(_run)
        self.parallelism = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, tasks: Sequence[Task], on_done: Callable[[], None] | None = None) -> list:
        ray = self._ray
        refs = [self._remote.remote(task) for task in tasks]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            if on_done:
                for _ in done:
                    on_done()
        return ray.get(refs)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False


def executor(name: str, *, workers: int | None = None, ray_address: str | None = None):  # noqa: ANN201
    if name == "serial":
        return Serial()
    if name == "local":
        return LocalPool(workers)
    if name == "ray":
        return RayExecutor(ray_address, workers)
    raise InputError(f"--executor {name}: choose one of {', '.join(EXECUTORS)}.")
