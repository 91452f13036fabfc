"""The web app's job time limit on an injected clock: an answer is late or in time by the
clock time its process recorded when the answer was ready, not by when it is polled."""

from __future__ import annotations

import functools
import multiprocessing

from phasewise.web.jobs import Job, Jobs, _work

LIMIT_S = 10.0


class _Clock:
    """A clock that reads whatever the test set."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class _FinishedProcess:
    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return False

    def terminate(self) -> None:
        raise AssertionError("a finished job's process is not stopped")


def _answered(finished_s: float, started_s: float = 0.0) -> Job:
    """A job whose process answered an estimate, stamped with its clock at ``finished_s``."""
    ours, theirs = multiprocessing.Pipe(duplex=False)
    _work(theirs, "estimate", {"isl": "128", "osl": "16"},
          clock=functools.partial(float, finished_s))
    return Job("estimate", _FinishedProcess(), ours, started_s)


def _poll(jobs: Jobs, job: Job) -> Job:
    jobs._jobs["1"] = job
    return jobs.poll("1")


def test_an_answer_ready_after_the_limit_is_a_time_out_however_soon_it_is_polled():
    clock = _Clock()
    jobs = Jobs(LIMIT_S, clock=clock)
    clock.now_s = LIMIT_S + 1.5  # polled 1.5 s past the limit …
    job = _poll(jobs, _answered(finished_s=LIMIT_S + 0.5))  # … the answer 0.5 s past it
    assert job.state == "error" and job.document is None
    assert "the answer came 10.5 s after the start, past the web app's limit of 10 s" in job.error


def test_an_answer_ready_inside_the_limit_is_kept_however_late_it_is_polled():
    clock = _Clock()
    jobs = Jobs(LIMIT_S, clock=clock)
    clock.now_s = 1000.0  # the page came back long after the limit
    job = _poll(jobs, _answered(finished_s=LIMIT_S - 0.5))
    assert job.state == "done" and job.error is None
    assert job.document["inputs"]["isl"] == 128


def test_the_limit_counts_from_the_start_on_the_same_clock():
    clock = _Clock(500.0)
    jobs = Jobs(LIMIT_S, clock=clock)
    job = _poll(jobs, _answered(finished_s=500.0 + LIMIT_S + 0.001, started_s=500.0))
    assert job.state == "error" and "past the web app's limit of 10 s" in job.error


def test_a_job_still_running_past_the_limit_is_stopped_when_polled():
    class Running(_FinishedProcess):
        stopped = False

        def is_alive(self) -> bool:
            return not self.stopped

        def terminate(self) -> None:
            self.stopped = True

    clock = _Clock()
    jobs = Jobs(LIMIT_S, clock=clock)
    ours, _theirs = multiprocessing.Pipe(duplex=False)  # no answer ever arrives
    job = Job("simulate", Running(), ours, 0.0)
    clock.now_s = LIMIT_S - 1
    assert _poll(jobs, job).state == "running"
    clock.now_s = LIMIT_S + 1
    assert _poll(jobs, job).state == "error"
    assert job.process.stopped and "stopped after 10 s" in job.error
