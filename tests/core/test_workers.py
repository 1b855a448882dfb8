"""Worker threads for sync steps: reused when idle, never shared with work that overran."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable

from langgraph_deadline import current_deadline
from langgraph_deadline._core import workers
from langgraph_deadline._core.deadline import Deadline
from langgraph_deadline._core.workers import Job, submit

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_workers_var", default="unset")


def _thread_id() -> int:
    return threading.get_ident()


def _run(body: Callable[[], object] = _thread_id, deadline: Deadline | None = None) -> Job[object]:
    job = submit(Job(body, deadline, "s"))
    assert job.wait(5)
    return job


def test_an_idle_worker_is_reused_for_the_next_job() -> None:
    # The worker is back on the idle list before the caller is woken: no wait needed. (Which
    # idle worker the next job gets is not asked: one whose overrun body of another test ended
    # meanwhile may be idle too.)
    first = _run().value
    idle = {w.thread.ident for w in workers._IDLE}
    assert first != threading.get_ident()
    assert first in idle
    assert _run().value in idle  # an idle worker ran it: no thread was started for it


def test_a_busy_worker_is_not_given_another_job() -> None:
    started = threading.Event()
    release = threading.Event()

    def long_job() -> int:
        started.set()
        release.wait(5)
        return threading.get_ident()

    busy = submit(Job(long_job, None, "long"))
    assert started.wait(5)
    other = _run().value
    release.set()
    assert busy.wait(5)
    assert other != busy.value


def test_a_job_past_its_wait_keeps_running_on_its_own_thread() -> None:
    release = threading.Event()
    ran: list[int] = []

    def overrun() -> str:
        release.wait(5)
        ran.append(threading.get_ident())
        return "late"

    job = submit(Job(overrun, None, "overrun"))
    assert not job.wait(0.05)  # the caller walks away; the body goes on
    assert job.error is None and not ran
    other = _run().value  # another thread: the overrunning one is not reused meanwhile
    release.set()
    assert job.wait(5)
    assert job.value == "late" and len(ran) == 1 and other != ran[0]


def test_the_body_sees_the_callers_context_and_its_deadline_and_leaks_nothing() -> None:
    deadline = Deadline.after(30)
    seen: list[object] = []

    def body() -> None:
        seen.extend([_VAR.get(), current_deadline()])
        _VAR.set("set by the body")

    token = _VAR.set("the caller's")
    try:
        job = _run(body, deadline)
        assert job.error is None
        assert seen == ["the caller's", deadline]
        assert _VAR.get() == "the caller's" and current_deadline() is None
    finally:
        _VAR.reset(token)


def test_the_bodys_error_is_kept_for_the_caller_and_the_worker_lives_on() -> None:
    def broken() -> None:
        raise KeyError("mine")

    job = _run(broken)
    assert isinstance(job.error, KeyError)
    assert _run().error is None
