"""Worker threads for sync steps: reused, so that a sync node or tool does not start a thread
per call, and never shared with work that overran (a thread cannot be stopped)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["submit"]


class _Worker:
    """A daemon thread that runs one job at a time and then offers itself for the next one.

    Sync steps run on these so that a thread is not started for every call. A job that overruns
    its budget keeps its worker (a thread cannot be stopped) and the next call takes another.
    """

    __slots__ = ("jobs",)

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="langgraph-deadline-worker", daemon=True).start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            with contextlib.suppress(BaseException):  # the job records its own errors
                job()
            with _IDLE_LOCK:
                if len(_IDLE) >= _MAX_IDLE:
                    return
                _IDLE.append(self)


_IDLE: list[_Worker] = []
_IDLE_LOCK = threading.Lock()
_MAX_IDLE: Final = 8


def submit(job: Callable[[], None]) -> None:
    with _IDLE_LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
    worker.jobs.put(job)
