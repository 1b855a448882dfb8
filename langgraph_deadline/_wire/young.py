"""The requests younger than `WATCH_AFTER` share one timer per event loop: a quick one makes none.

Each `call_at` is an object in the event loop's heap, and a cancelled one stays there until its
time comes; a request that ends within a few milliseconds, the usual case, would pay for one
for nothing. Here such requests cost a dict entry, and one timer stands for the oldest.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Protocol

__all__ = ["Young", "young_on"]


class Ticks(Protocol):
    """What `Young` needs of a request: a method to call when it is due."""

    def tick(self, loop: asyncio.AbstractEventLoop) -> None: ...


class Young:
    """The young requests of one event loop, oldest first; each is ticked once, when due."""

    __slots__ = ("_due", "_timer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._due: dict[Ticks, float] = {}  # loop times, ascending (in the order they came)
        self._timer: asyncio.TimerHandle | None = None

    def add(self, request: Ticks, due: float) -> None:
        """Tick `request` at loop time `due`, which is no earlier than any added before."""
        self._due[request] = due
        if self._timer is None:
            self._timer = self._arm(due)

    def discard(self, request: Ticks) -> None:
        self._due.pop(request, None)

    def _arm(self, due: float) -> asyncio.TimerHandle:
        # In an empty context: the timer stands for many requests and must neither keep the
        # context of the one that armed it alive nor hand it to another's `tick`.
        return self.loop.call_at(due, self._fire, context=contextvars.Context())

    def _fire(self) -> None:
        self._timer = None
        now = self.loop.time()
        ripe: list[Ticks] = []
        for request, due in self._due.items():
            if due > now:
                self._timer = self._arm(due)
                break
            ripe.append(request)
        for request in ripe:
            del self._due[request]
            request.tick(self.loop)


class _PerThread(threading.local):
    young: Young | None = None


_per_thread = _PerThread()  # one event loop runs in a thread at a time


def young_on(loop: asyncio.AbstractEventLoop) -> Young:
    """The young requests of `loop`, the event loop running in this thread."""
    young = _per_thread.young
    if young is None or young.loop is not loop:
        young = _per_thread.young = Young(loop)
    return young
