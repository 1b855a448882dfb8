"""One step's cancellation on asyncio: a cancel scope at `asyncio.timeout`'s cost.

Every node, tool, model call and HTTP request opens one of these, so it is the hot path. It
keeps what an anyio cancel scope gives a step (the body is really cancelled, cancellation is
delivered again if the body swallows it, after a short grace for an unshielded clean-up; the
caller's own cancellation passes through, a shielded clean-up inside the body runs to its end)
without anyio's per-scope bookkeeping of task states and parent scopes, which a step does not
need: it never spans tasks. Off asyncio (trio), `step.py`'s guard uses an anyio scope instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import sys
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final, TypeVarTuple

from .deadline import Deadline

__all__ = ["Cut", "Due"]

_MESSAGE: Final = "cut by langgraph-deadline"

# Seconds a body is given, after its first cancellation, to clean up before a new await of its
# is cancelled again. A library that answers a cancellation by awaiting its own clean-up
# without a shield (psycopg cancels the query in the server, then waits for it to end) would
# otherwise be cancelled in the middle of it: psycopg then closes the connection for good.
# A body that swallowed the cancellation and moved on overruns by this much at most.
GRACE: Final = 0.2


Ts = TypeVarTuple("Ts")


class Due:
    """Call `callback(*args)` once `deadline` has passed by its own clock.

    An event loop's timers may come before the monotonic clock a deadline reads says they are
    due (uvloop's, with millisecond resolution, up to about half a millisecond early); one that
    does is set again for what is left, and a step is never cut before its deadline. The timer
    runs in an empty context: a cancelled one stays in the loop's heap for a while, and must not
    keep the context it was set in (a step's config, LangGraph's task) alive there."""

    __slots__ = ("_args", "_callback", "_deadline", "_handle", "_loop")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: Deadline,
        callback: Callable[[*Ts], object],
        *args: *Ts,
    ) -> None:
        self._loop = loop
        self._deadline = deadline
        self._callback = callback
        self._args = args
        self._handle: asyncio.TimerHandle | None = None
        self._set()

    def _set(self) -> None:
        when = self._loop.time() + self._deadline.remaining()
        self._handle = self._loop.call_at(when, self._due, context=contextvars.Context())

    def _due(self) -> None:
        if not self._deadline.expired:
            self._set()  # early: the loop's clock lags the deadline's
            return
        self._handle = None
        self._callback(*self._args)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Cut:
    """Cancel the current task when `cancel()` is called or at the deadline given to `arm`,
    until the block exits. Leaving the block swallows the cancellation it caused (`caught`),
    never one from elsewhere (a native `Task.cancel()` or an enclosing scope). `joined`: the
    run's one timer cancels it (`RunAlarm`), not a timer of its own.

    Like an anyio scope, it respects shields: while the body is inside an anyio scope with
    `shield=True` (a library's clean-up: httpcore closing a cancelled request), in its task or
    in a task it awaits, nothing is delivered until it leaves it; nothing is delivered to a task
    about to wake with a result either; and what the task awaits is cancelled once, never again: a
    task or a `gather` it waits on, once cancelled, is left to end as it will (its own
    shielded clean-up included). Unlike one, it cancels a body again only `GRACE` seconds
    after the first time, so that a clean-up awaited without a shield can end."""

    __slots__ = (
        "_again",
        "_calls",
        "_cancelling",
        "_grace_ends",
        "_handle",
        "_loop",
        "_outer",
        "_sent",
        "_task",
        "caught",
        "fired",
        "joined",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object]) -> None:
        self._loop = loop
        self._task: asyncio.Task[object] | None = task
        self._cancelling = task.cancelling()
        self._handle: Due | None = None
        self._again: asyncio.Handle | None = None
        self._calls = 0
        self._grace_ends = 0.0  # set at the first cancellation: none again before this loop time
        self._sent: object = None  # what the task awaited when last cancelled
        # The task's innermost anyio scope outside this block: shields below it are the body's.
        # (Inline: every step opens a cut.)
        states = _states if _states is not None else _task_states()
        state = None if states is None else states.get(task)
        self._outer: object = None if state is None else state.cancel_scope
        self.fired = False
        self.caught = False
        self.joined = False

    @property
    def cancel_called(self) -> bool:
        """anyio's name for `fired`: where a Cut stands in for an anyio scope."""
        return self.fired

    @property
    def cancelled_caught(self) -> bool:
        """anyio's name for `caught`."""
        return self.caught

    def arm(self, deadline: Deadline) -> None:
        """Cancel once `deadline` has passed (at once, if it has)."""
        self._handle = Due(self._loop, deadline, self.cancel)

    def cancel(self) -> None:
        """Cancel the block (the timer, or the cancel signal). Only the first call counts."""
        if self.fired or self._task is None:
            return
        self.fired = True
        self._deliver()

    def _deliver(self) -> None:
        # Like anyio: every loop iteration until the block is left, cancel the task whenever it
        # waits on something it was not cancelled at already, so a body that swallows one
        # cancellation (an old `asyncio.wait_for`) is cancelled again at its next await. Unlike
        # anyio, only once `GRACE` has passed since the first: an unshielded clean-up awaiting
        # after the cancellation (psycopg's) ends first. Not while the body is inside a
        # shielded anyio scope; and never twice at the same waiter: cancelling a task again that
        # awaits another task (LangChain runs a tool's coroutine in one) would cancel that
        # task's shielded clean-up. Nor while the cancellation would land where anyio's would
        # not (`_reachable`): in a shielded scope of a task the body awaits, or on a task about
        # to wake with a result. Nor, the first time either, while the body awaits a task that
        # has not started (`_started`): LangGraph unwinds a run's loop (its exit stack) in a task
        # of its own, which, cancelled before it runs, never does; the run's loop is left in a
        # cycle for the garbage collector. It is cancelled at the next iteration, started.
        self._again = None
        task = self._task
        if task is None:
            return
        loop = self._loop
        if self._grace_ends:  # cancelled once already: again only once the grace is over
            if loop.time() < self._grace_ends:
                self._again = loop.call_at(self._grace_ends, self._deliver)
                return
        elif task.cancelling() > self._cancelling:
            # Another cut inside (or the caller) has asked the task to stop, and it is winding
            # down: this cancellation would be its second one, so it waits like one.
            self._grace_ends = loop.time() + GRACE
            self._sent = getattr(task, "_fut_waiter", None)
            self._again = loop.call_at(self._grace_ends, self._deliver)
            return
        if not _shielded(task, self._outer):
            waiter = getattr(task, "_fut_waiter", None)
            if (
                (not self._grace_ends or (waiter is not None and waiter is not self._sent))
                and _started(waiter)
                and _reachable(waiter, self._outer)
            ):
                if not self._grace_ends:
                    self._grace_ends = loop.time() + GRACE
                self._calls += 1
                self._sent = waiter
                task.cancel(_MESSAGE)
        self._again = loop.call_soon(self._deliver)

    def __enter__(self) -> Cut:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        task, self._task = self._task, None
        self._sent = None
        if self._handle is not None:  # (it holds `self.cancel`: let go of it, no cycle left)
            self._handle.cancel()
            self._handle = None
        if self._again is not None:
            self._again.cancel()
            self._again = None
        if not self.fired or task is None:
            return False
        for _ in range(self._calls):
            task.uncancel()
        if (
            exc_type is not None
            and issubclass(exc_type, asyncio.CancelledError)
            and task.cancelling() <= self._cancelling
        ):
            self.caught = True  # ours alone: nobody else asked the task to stop
            if exc is not None:
                # Swallowed here, so nobody reads its traceback; its frames (the body's, and
                # those of a library that kept it in a local: LangChain's `BaseTool.arun`) would
                # hold it in a cycle with whatever they hold, for the cyclic collector to find.
                exc.__traceback__ = None
            return True
        return False


def _started(waiter: object) -> bool:
    """False for a task that has not run yet: cancelled now, it would never run at all (a
    clean-up the body started in a task of its own, such as LangGraph's, would be skipped)."""
    if not isinstance(waiter, asyncio.Task):
        return True
    coro = waiter.get_coro()
    return not inspect.iscoroutine(coro) or inspect.getcoroutinestate(coro) != inspect.CORO_CREATED


def _reachable(waiter: object, outer: object) -> bool:
    """False while a cancellation sent down to `waiter` (what the cut's task awaits) would land
    where an anyio scope's would not, so that it waits for the next loop iteration: a task it
    goes through (a task the body awaits, LangChain's for a tool, and any that one awaits) is
    inside a shielded anyio scope, or the task it ends in is about to wake with a result (its
    waiter is done: the result would be lost). Both lose httpcore a pool slot for good: a
    request cancelled inside the shielded lock of a just-made connection leaves it NEW, and
    one cancelled as it is handed a new connection leaves that CONNECTING; neither is ever
    used or closed again (encode/httpcore#1093)."""
    while isinstance(waiter, asyncio.Future):
        if waiter.done():
            return False
        if not isinstance(waiter, asyncio.Task):
            return True
        if _shielded(waiter, outer):  # (a task group's scopes lead out to the cut's own)
            return False
        waiter = getattr(waiter, "_fut_waiter", None)
    return True


# -- anyio's shields, read from anyio's own task states (asyncio backend) -------------------------

_BACKEND: Final = "anyio._backends._asyncio"
_states: Mapping[asyncio.Task[Any], Any] | None = None


def _task_states() -> Mapping[asyncio.Task[Any], Any] | None:
    """anyio's per-task states (their `cancel_scope` is the task's innermost anyio scope), once
    its asyncio backend is loaded: until then no task has an anyio scope."""
    global _states
    if _states is None:
        backend = sys.modules.get(_BACKEND)
        if backend is not None:
            _states = getattr(backend, "_task_states", None)
    return _states


def _anyio_scope(task: asyncio.Task[Any]) -> object:
    """The task's innermost anyio cancel scope now (None: it is in none)."""
    states = _task_states()
    if states is None:
        return None
    state = states.get(task)
    return None if state is None else getattr(state, "cancel_scope", None)


def _shielded(task: asyncio.Task[Any], outer: object) -> bool:
    """True while the task is inside a shielded anyio scope entered after `outer`."""
    scope = _anyio_scope(task)
    while scope is not None and scope is not outer:
        if getattr(scope, "shield", False):
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False
