"""A step's idle cap: the longest gap with no progress before the step is cut as `stalled`.

Progress is whatever shows the step is still moving: a chunk of a model's stream, bytes of an
HTTP response body, a LangGraph `runtime.heartbeat()` or stream write in a node. The code that
sees it calls `progress()`, which reaches the watch of the step it runs in (a contextvar) and
of every step around it: a token of a model call inside a node is progress of the node too.

A stream's watch is armed by its first sign of progress and disarmed when the stream ends
(`idle()`): a stream that starts slowly is never stalled (its budget bounds its first byte),
and the time after its end is not a gap. A node's watch is armed when the node starts, as
LangGraph's `TimeoutPolicy(idle_timeout=)` is.

One timer per watched step, on the event loop: due at the last progress plus the idle cap, it
looks again when progress came meanwhile (progress itself only stores a float, from any
thread), and cuts the step when the gap has reached the cap. The watch also keeps the longest
gap it saw (`longest`), which a latency book learns a learned idle cap from.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Final

__all__ = ["StallWatch", "idle", "progress", "stalled_note", "watching"]

_WATCH: Final[ContextVar[StallWatch | None]] = ContextVar(
    "langgraph_deadline.stall_watch", default=None
)


def stalled_note(gap: float) -> str:
    """The words a stalled step's record, error and timeout text carry."""
    return f"no progress for {gap:.1f} s"


class StallWatch:
    """The progress of one step, and the timer that cuts it once it stalls.

    `limit` None: the step is only watched (its gaps are learned), never cut. `armed`: the
    gap clock runs from the start (a node); else from the first progress (a stream)."""

    __slots__ = (
        "_handle",
        "_loop",
        "_on_stall",
        "armed",
        "fired",
        "gap",
        "last",
        "limit",
        "longest",
        "parent",
        "stream",
    )

    def __init__(self, limit: float | None, *, armed: bool, parent: StallWatch | None) -> None:
        self.limit = limit
        self.stream = not armed  # disarmed by `idle()` when its stream ends
        self.armed = armed
        self.last = time.monotonic()
        self.parent = parent
        self.longest: float | None = None  # the longest gap between two signs of progress
        self.fired = False
        self.gap = 0.0  # the gap the step was cut at
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_stall: Callable[[], object] | None = None
        self._handle: asyncio.TimerHandle | None = None

    def progress(self, now: float) -> None:
        if self.armed:
            gap = now - self.last
            if self.longest is None or gap > self.longest:
                self.longest = gap
        else:
            self.armed = True
        self.last = now

    def open_gap(self) -> float:
        """The gap running now (0 while disarmed)."""
        return time.monotonic() - self.last if self.armed else 0.0

    def start(self, loop: asyncio.AbstractEventLoop, on_stall: Callable[[], object]) -> None:
        """Call `on_stall()` once the step has made no progress for `limit` seconds."""
        if self.limit is None:
            return
        self._loop = loop
        self._on_stall = on_stall
        self._set(time.monotonic() + self.limit)

    def _set(self, due: float) -> None:
        loop = self._loop
        assert loop is not None
        when = loop.time() + (due - time.monotonic())
        self._handle = loop.call_at(when, self._due, context=contextvars.Context())

    def _due(self) -> None:
        self._handle = None
        limit = self.limit
        assert limit is not None
        now = time.monotonic()
        if not self.armed:
            self._set(now + limit)
            return
        gap = now - self.last
        if gap < limit:
            self._set(self.last + limit)
            return
        self.fired = True
        self.gap = gap
        if self._on_stall is not None:
            self._on_stall()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._on_stall = None

    def close(self, *, cut: bool) -> float | None:
        """The step ended: the timer goes; returns the longest gap it saw (for the book), the
        gap still open when it was `cut` included."""
        self.stop()
        gap = self.gap if self.fired else self.open_gap() if cut else None
        if gap is not None and (self.longest is None or gap > self.longest):
            self.longest = gap
        return self.longest


def watching(watch: StallWatch) -> Token[StallWatch | None]:
    """`watch` is the step's in context until `unwatch`: `progress()` below reaches it."""
    return _WATCH.set(watch)


def unwatch(token: Token[StallWatch | None]) -> None:
    _WATCH.reset(token)


def current_watch() -> StallWatch | None:
    return _WATCH.get()


def progress() -> None:
    """The step running here (and every step around it) made progress: its gap starts again.
    Cheap, and safe from any thread; a no-op outside a watched step."""
    watch = _WATCH.get()
    if watch is None:
        return
    now = time.monotonic()
    while watch is not None:
        watch.progress(now)
        watch = watch.parent


def idle() -> None:
    """The stream of the step running here ended: the time until its next stream (or the
    step's end) is no stall. A node's own watch stays armed."""
    watch = _WATCH.get()
    if watch is not None and watch.stream:
        watch.armed = False


def finite(limit: float | None) -> float | None:
    """`limit` as an idle cap the timer keeps (inf: watched only)."""
    return None if limit is None or math.isinf(limit) else limit
