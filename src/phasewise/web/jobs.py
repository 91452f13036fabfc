"""Long views (simulate, plan) run in their own process, so they can be stopped: on the
user's cancel, on a newer request, or when they pass their time limit.

The child records the time its answer was ready, on the same clock the job's start was
read from (``time.monotonic``: one system-wide clock on the platforms we run on), so an
answer that came after the limit is a time-out however late the page polls for it."""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phasewise.errors import InputError

LOG = logging.getLogger("phasewise.web")
# Jobs that may run at once: each is a process of its own on a shared machine.
MAX_RUNNING_JOBS = 2
# Finished jobs kept for their page to fetch, oldest dropped first.
MAX_KEPT_JOBS = 16


def _work(conn: Any, view: str, form: dict[str, Any],
          clock: Callable[[], float] = time.monotonic) -> None:
    """In the child: compute the view and send back (kind, payload, finished_s): ('ok',
    document), ('error', line) or ('bug', line), with the clock's time once it was ready."""
    from phasewise.web.inputs import Form
    from phasewise.web.views import VIEWS

    try:
        answer = ("ok", VIEWS[view](Form(**form)))
    except InputError as err:
        answer = ("error", str(err))
    except Exception:  # noqa: BLE001 - a bug: logged here, one line to the page
        LOG.exception("view %s failed", view)
        answer = ("bug", f"the {view} view failed (a bug in phasewise); the server log has "
                         "the details.")
    try:
        conn.send((*answer, clock()))
    finally:
        conn.close()


@dataclass
class Job:
    view: str
    process: Any
    conn: Any
    started_s: float
    state: str = "running"
    document: Any = None
    error: str | None = None


class Jobs:
    """Start, poll and cancel jobs; a job past ``limit_s`` is stopped and says so. ``clock``
    (seconds, the child's too) times them; it must be picklable to reach the child."""

    def __init__(self, limit_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit_s, self.clock = limit_s, clock
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._context = multiprocessing.get_context("spawn")

    def start(self, view: str, form: dict[str, Any]) -> str:
        with self._lock:
            running = [j for j in self._jobs.values() if self._refresh(j) == "running"]
            if len(running) >= MAX_RUNNING_JOBS:
                raise InputError(f"{len(running)} jobs are already running; cancel one or wait "
                                 "for it to finish.")
            ours, theirs = self._context.Pipe(duplex=False)
            started_s = self.clock()
            process = self._context.Process(target=_work, args=(theirs, view, form, self.clock),
                                            daemon=True)
            process.start()
            theirs.close()
            job_id = str(next(self._ids))
            self._jobs[job_id] = Job(view, process, ours, started_s)
            self._forget_old()
            return job_id

    def poll(self, job_id: str) -> Job:
        with self._lock:
            job = self._get(job_id)
            self._refresh(job)
            return job

    def cancel(self, job_id: str) -> Job:
        with self._lock:
            job = self._get(job_id)
            if self._refresh(job) == "running":
                self._stop(job, "cancelled", "cancelled.")
            return job

    def close(self) -> None:
        with self._lock:
            for job in self._jobs.values():
                if job.state == "running":
                    self._stop(job, "cancelled", "the server stopped.")

    def _get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise InputError(f"no job {job_id!r}: it finished long ago or never started; run "
                             "the view again.")
        return job

    def _refresh(self, job: Job) -> str:
        if job.state != "running":
            return job.state
        if job.conn.poll():
            try:
                kind, payload, finished_s = job.conn.recv()
            except EOFError:
                kind, payload = "bug", f"the {job.view} job ended without an answer."
                finished_s = self.clock()
            job.process.join(timeout=5)
            if finished_s - job.started_s > self.limit_s:
                kind, payload = "error", (f"the answer came {finished_s - job.started_s:,.3g} s "
                                          f"after the start, past the web app's limit of "
                                          f"{self.limit_s:g} s for one job; ask for fewer "
                                          "requests or load points.")
            job.state = "done" if kind == "ok" else "error"
            job.document, job.error = (payload, None) if kind == "ok" else (None, payload)
        elif self.clock() - job.started_s > self.limit_s:
            self._stop(job, "error", self._late())
        elif not job.process.is_alive():
            job.state, job.error = "error", f"the {job.view} job ended without an answer."
        return job.state

    def _late(self) -> str:
        return (f"stopped after {self.limit_s:g} s, the web app's limit for one job; ask for "
                "fewer requests or load points.")

    def _stop(self, job: Job, state: str, message: str) -> None:
        job.process.terminate()
        job.process.join(timeout=5)
        job.state, job.error = state, message

    def _forget_old(self) -> None:
        finished = [k for k, j in self._jobs.items() if j.state != "running"]
        for key in finished[:max(0, len(self._jobs) - MAX_KEPT_JOBS)]:
            del self._jobs[key]
