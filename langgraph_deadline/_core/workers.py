"""Worker threads for sync steps: reused, so that a sync node or tool does not start a thread
per call, and never shared with work that overran (a thread cannot be stopped). A job left
running past its budget is `abandon`ed: what its body registered to close then (the HTTP
connections it waits on, `sync_http.py`) is closed from the caller's thread."""

from __future__ import annotations

import _thread
import contextvars
import queue
import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Final, Generic, TypeVar

from .context import deadline_scope
from .deadline import Deadline

__all__ = ["Job", "SyncBody", "current_body", "submit"]

T = TypeVar("T")

_BODY: Final[ContextVar[SyncBody | None]] = ContextVar("langgraph_deadline.body", default=None)
_CLOSERS_LOCK: Final = threading.Lock()  # (closers are added rarely: one lock for all bodies)


def current_body() -> SyncBody | None:
    """The sync step whose body runs here (on a worker, inline, or on LangGraph's executor),
    or None."""
    return _BODY.get()


class SyncBody:
    """A sync step's body as far as what it leaves open: when the step is `abandon`ed (its
    caller stopped waiting; the thread runs on), what the body registered is closed from the
    caller's thread. Nested in the sync step it runs in, if any: abandoning that one closes
    this one's too."""

    __slots__ = ("_abandoned", "_closers", "_parent")

    def __init__(self) -> None:
        self._parent = _BODY.get()
        self._closers: list[Callable[[], object]] | None = None
        self._abandoned = False

    def entered(self) -> Token[SyncBody | None]:
        """Make this the sync body in context (for a body run by someone else's thread, which
        copies the context: LangGraph's executor); `left` undoes it."""
        return _BODY.set(self)

    @staticmethod
    def left(token: Token[SyncBody | None]) -> None:
        _BODY.reset(token)

    @property
    def abandoned(self) -> bool:
        """True once this body, or the sync step it runs in, was abandoned."""
        body: SyncBody | None = self
        while body is not None:
            if body._abandoned:
                return True
            body = body._parent
        return False

    def on_abandon(self, close: Callable[[], object]) -> bool:
        """Call `close` if this body (or the sync step it runs in) is abandoned before `forget`;
        at once, and False, if it is already."""
        with _CLOSERS_LOCK:
            late = self.abandoned
            if not late:
                body: SyncBody | None = self
                while body is not None:
                    if body._closers is None:
                        body._closers = []
                    body._closers.append(close)
                    body = body._parent
        if late:
            close()
        return not late

    def forget(self, close: Callable[[], object]) -> None:
        """`close` is no longer needed (what it closes ended on its own)."""
        with _CLOSERS_LOCK:
            body: SyncBody | None = self
            while body is not None:
                closers = body._closers
                if closers is not None and close in closers:
                    closers.remove(close)
                body = body._parent

    def let_go(self) -> None:
        """The body ended by raising: shut what it still held open (a streamed response it
        stopped reading, as a model stream stopped at the deadline does), now rather than when
        the garbage collector gets to it. Nothing can read it any more."""
        with _CLOSERS_LOCK:
            closers, self._closers = self._closers, None
        for close in closers or ():
            self.forget(close)  # (from the sync steps it runs in)
            close()

    def abandon(self) -> int:
        """Mark the body left running past its budget (the caller has stopped waiting), and
        close what it registered to close; how many there were. Its thread runs on."""
        with _CLOSERS_LOCK:
            self._abandoned = True
            closers, self._closers = self._closers, None
        for close in closers or ():
            close()
        return len(closers or ())


class Job(SyncBody, Generic[T]):
    """One sync body for a worker, run in a copy of the caller's context under its deadline.

    The caller waits on a lock that the worker releases when the body ends: cheaper than an
    `Event` on the hot path, and the wait has a timeout, so the caller can walk away at its
    budget. Once `wait` returned True, `error` is what the body raised, or None and `value` is
    what it returned.
    """

    __slots__ = ("_body", "_context", "_deadline", "_done", "_name", "error", "value")

    def __init__(self, body: Callable[[], T], deadline: Deadline | None, name: str) -> None:
        SyncBody.__init__(self)
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
        _BODY.set(self)  # (in the job's own copy of the context: undone with it)
        try:
            with deadline_scope(self._deadline, name=self._name):
                self.value = body()
        except BaseException as exc:  # handed to the caller, who decides what it means
            self.error = exc
            if self._closers:
                self.let_go()


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
