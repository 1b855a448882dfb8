"""The cancel signal in context: Go's `ctx.Done()` for LangGraph runs.

A deadline cancels work when time runs out; a parent also cancels it when it gives up (the
client disconnected, the user pressed stop, the stream was closed). LangGraph runs nodes in
tasks of its own, which a cancel scope around the caller does not always reach, so every
budgeted step registers its cancel scope with the nearest signal, and cancelling the signal
cancels them all, wherever they run. Signals form a tree: cancelling one cancels its children.
"""

from __future__ import annotations

import threading
import weakref
from contextvars import ContextVar
from typing import Final, Protocol

__all__ = ["Cancellable", "CancelSignal", "current_signal", "reset_signal", "set_signal"]


class Cancellable(Protocol):
    """What a signal cancels: a step's cut, or an anyio cancel scope."""

    def cancel(self) -> object: ...


_LOCK: Final = threading.Lock()
"""One lock for every signal: each holds it only to change or read its own two sets."""


class CancelSignal:
    """Cancels every registered scope, and every child signal, once.

    A run's signal mostly has one step registered at a time (its node): that one is kept in a
    slot, and a set is made only when a second one comes (a tool inside the node, parallel
    nodes), for the memory of every run in flight."""

    __slots__ = ("__weakref__", "_children", "_lock", "_one", "_scopes", "source")

    def __init__(self, parent: CancelSignal | None = None) -> None:
        self._one: Cancellable | None = None
        self._scopes: set[Cancellable] | None = None  # made on first use, as `_children`
        # Made on first use: most signals (one per run) never get a child.
        self._children: weakref.WeakSet[CancelSignal] | None = None
        self._lock = _LOCK
        self.source: str | None = None
        if parent is not None:
            parent._adopt(self)

    @property
    def cancelled(self) -> bool:
        return self.source is not None

    def _adopt(self, child: CancelSignal) -> None:
        with self._lock:
            if self._children is None:
                self._children = weakref.WeakSet()
            self._children.add(child)
            cancelled = self.source
        if cancelled is not None:
            child.cancel(cancelled)

    def register(self, scope: Cancellable) -> None:
        with self._lock:
            if scope is self._one:
                pass
            elif self._one is None and not self._scopes:
                self._one = scope
            else:
                if self._scopes is None:
                    self._scopes = set()
                self._scopes.add(scope)
            cancelled = self.source is not None
        if cancelled:
            scope.cancel()

    def unregister(self, scope: Cancellable) -> None:
        with self._lock:
            if self._one is scope:
                self._one = None
            elif self._scopes is not None:
                self._scopes.discard(scope)

    def registered(self) -> list[Cancellable]:
        """The scopes registered now."""
        with self._lock:
            return self._registered()

    def _registered(self) -> list[Cancellable]:
        found = [] if self._one is None else [self._one]
        if self._scopes:
            found.extend(self._scopes)
        return found

    def cancel(self, source: str = "caller") -> None:
        """Cancel everything below this signal. Only the first call counts."""
        with self._lock:
            if self.source is not None:
                return
            self.source = source
            scopes = self._registered()
            children = list(self._children or ())
        for scope in scopes:
            scope.cancel()
        for child in children:
            child.cancel(source)


_SIGNAL: Final[ContextVar[CancelSignal | None]] = ContextVar(
    "langgraph_deadline.cancel_signal", default=None
)


def current_signal() -> CancelSignal | None:
    return _SIGNAL.get()


def set_signal(signal: CancelSignal | None) -> object:
    """Set the signal for the current context; returns a token for `reset_signal`."""
    return _SIGNAL.set(signal)


def reset_signal(token: object) -> None:
    _SIGNAL.reset(token)  # type: ignore[arg-type]
