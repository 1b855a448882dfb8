"""Worker threads for sync steps: reused, so that a sync node or tool does not start a thread
per call, and never shared with work that overran (a thread cannot be stopped)."""

from __future__ import annotations

import _thread
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from .context import deadline_scope
from .deadline import Deadline

__all__ = ["Job", "submit"]

T = TypeVar("T")


class Job(Generic[T]):
    """One sync body for a worker, run in a copy of the caller's context under its deadline.

    The caller waits on a lock that the worker releases when the body ends: cheaper than an
    `Event` on the hot path, and the wait has a timeout, so the caller can walk away at its
    budget. Once `wait` returned True, `error` is what the body raised, or None and `value` is
    what it returned.
    """

    __slots__ = ("_body", "_context", "_deadline", "_done", "_name", "error", "value")

    def __init__(self, body: Callable[[], T], deadline: Deadline | None, name: str) -> None:
        self._body: Callable[[], T] | None = body
        self._context: contextvars.Context | None = contextvars.copy_context()  # callbacks, ...
        self._deadline = deadline
        self._name = name
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self.value: T | None = None
        self.error: BaseException | None = None

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the body to end; False if it is still running."""
        return self._done.acquire(True, min(max(timeout, 0.0), threading.TIMEOUT_MAX))

    def run(self) -> None:
        """Run the body (on a worker); never raises: its error is kept for the caller. The
        body and its context are let go before the caller wakes: a worker still holding the
        job for an instant keeps nothing of the run alive (its config, LangGraph's loop)."""
        context, self._context = self._context, None
        try:
            if context is not None:
                context.run(self._call)
        finally:
            self._body = None

    def finish(self) -> None:
        """Wake the caller, if it is still waiting."""
        self._done.release()

    def _call(self) -> None:
        body = self._body
        if body is None:
            return
        try:
            with deadline_scope(self._deadline, name=self._name):
                self.value = body()
        except BaseException as exc:  # handed to the caller, who decides what it means
            self.error = exc


class _Worker:
    """A daemon thread that runs one job at a time and then offers itself for the next one.

    Sync steps run on these so that a thread is not started for every call. A job that overruns
    its budget keeps its worker (a thread cannot be stopped) and the next call takes another.
    """

    __slots__ = ("jobs", "thread")

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Job[Any]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._loop, name="langgraph-deadline-worker", daemon=True
        )
        self.thread.start()

    def _loop(self) -> None:
        get = self.jobs.get
        while True:
            job = get()
            try:
                job.run()
            except BaseException as exc:  # raised into this thread from outside the body
                job.error = exc
            # Idle again before the caller is woken: a caller that goes straight on to its next
            # step finds this worker free (no new thread), and the GIL free once it blocks.
            with _IDLE_LOCK:
                keep = len(_IDLE) < _MAX_IDLE
                if keep:
                    _IDLE.append(self)
            job.finish()
            del job  # idle, it holds nothing of its last job (its config, LangGraph's loop)
            if not keep:
                return


_IDLE: list[_Worker] = []
_IDLE_LOCK = threading.Lock()
_MAX_IDLE: Final = 8


def submit(job: Job[T]) -> Job[T]:
    """Hand `job` to an idle worker (a new one if none is idle); returns it, to `wait` on."""
    with _IDLE_LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
    worker.jobs.put(job)
    return job
