"""Worker threads for sync steps: reused when idle, never shared with work that overran."""

from __future__ import annotations

import threading
import time

from langgraph_deadline._core.workers import submit


def _run(job_seconds: float = 0.0) -> str:
    done = threading.Event()
    seen: list[str] = []

    def job() -> None:
        seen.append(threading.current_thread().name + str(threading.get_ident()))
        time.sleep(job_seconds)
        done.set()

    submit(job)
    assert done.wait(5)
    return seen[0]


def test_an_idle_worker_is_reused_for_the_next_job() -> None:
    first = _run()
    time.sleep(0.05)  # let it go back to the idle list
    assert _run() == first


def test_a_busy_worker_is_not_given_another_job() -> None:
    started = threading.Event()
    release = threading.Event()
    busy: list[int] = []

    def long_job() -> None:
        busy.append(threading.get_ident())
        started.set()
        release.wait(5)

    submit(long_job)
    assert started.wait(5)
    other: list[int] = []
    done = threading.Event()
    submit(lambda: (other.append(threading.get_ident()), done.set()))
    assert done.wait(5)
    release.set()
    assert other[0] != busy[0]
