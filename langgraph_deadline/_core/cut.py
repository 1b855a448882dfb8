"""One step's cancellation on asyncio: a cancel scope at `asyncio.timeout`'s cost.

Every node, tool, model call and HTTP request opens one of these, so it is the hot path. It
keeps what an anyio cancel scope gives a step (the body is really cancelled, cancellation is
delivered again if the body swallows it, the caller's own cancellation passes through) without
anyio's per-scope bookkeeping of task states and parent scopes, which a step does not need: it
never spans tasks. Off asyncio (trio), `run.py` uses an anyio scope instead.
"""

from __future__ import annotations

import asyncio
import contextvars
from types import TracebackType
from typing import Final

__all__ = ["Cut"]

_MESSAGE: Final = "cut by langgraph-deadline"


class Cut:
    """Cancel the current task when `cancel()` is called or at the loop time given to `arm`,
    until the block exits. Leaving the block swallows the cancellation it caused (`caught`),
    never one from elsewhere (a native `Task.cancel()` or an enclosing scope)."""

    __slots__ = ("_again", "_calls", "_cancelling", "_handle", "_loop", "_task", "caught", "fired")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object]) -> None:
        self._loop = loop
        self._task: asyncio.Task[object] | None = task
        self._cancelling = task.cancelling()
        self._handle: asyncio.TimerHandle | None = None
        self._again: asyncio.Handle | None = None
        self._calls = 0
        self.fired = False
        self.caught = False

    def arm(self, when: float) -> None:
        """Cancel at loop time `when` (now, if it has passed). The timer runs in an empty
        context: a cancelled timer stays in the loop's heap for a while, and must not keep the
        step's context (its config, LangGraph's task) alive there."""
        self._handle = self._loop.call_at(when, self.cancel, context=contextvars.Context())

    def cancel(self) -> None:
        """Cancel the block (the timer, or the cancel signal). Only the first call counts."""
        if self.fired or self._task is None:
            return
        self.fired = True
        self._deliver()

    def _deliver(self) -> None:
        # Like anyio: cancel the task whenever it waits on something not already cancelled, every
        # loop iteration until the block is left, so a body that swallows one cancellation (an
        # old `asyncio.wait_for`) is cancelled again at its next await.
        self._again = None
        task = self._task
        if task is None:
            return
        waiter = getattr(task, "_fut_waiter", None)
        if self._calls == 0 or (waiter is not None and not waiter.cancelled()):
            self._calls += 1
            task.cancel(_MESSAGE)
        self._again = self._loop.call_soon(self._deliver)

    def __enter__(self) -> Cut:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        task, self._task = self._task, None
        if self._handle is not None:
            self._handle.cancel()
        if self._again is not None:
            self._again.cancel()
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
            return True
        return False
