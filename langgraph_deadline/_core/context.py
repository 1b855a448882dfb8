"""The deadline and the cancel signal in context (Go's `ctx.Deadline()` and `ctx.Done()`): private
contextvars, typed accessors and `deadline_scope`.

Contextvars set by the caller reach every LangGraph node, tool and sub-graph (tasks run in
copied contexts), so deep code (an httpx call, a model client) sees the deadline without plumbing.

A deadline cancels work when time runs out; a parent also cancels it when it gives up (the
client disconnected, the user pressed stop, the stream was closed). LangGraph runs nodes in
tasks of its own, which a cancel scope around the caller does not always reach, so every
budgeted step registers its cancel scope with the nearest signal, and cancelling the signal
cancels them all, wherever they run. Signals form a tree: cancelling one cancels its children.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import weakref
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Final, Protocol

import anyio

from .cut import Cut
from .deadline import Deadline
from .errors import DeadlineExceeded, ScopeFrame
from .validate import check_seconds

__all__ = [
    "CancelSignal",
    "Cancellable",
    "check",
    "client_timeout",
    "current_deadline",
    "current_scopes",
    "current_signal",
    "cut_through",
    "deadline_scope",
    "pop_step",
    "push_step",
    "remaining",
    "reset_signal",
    "set_signal",
    "tools_deadline",
    "tools_until",
]

# -- the cancel signal ----------


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


# -- the deadline ----------


_SCOPES: Final[ContextVar[tuple[ScopeFrame, ...]]] = ContextVar(
    "langgraph_deadline.scopes", default=()
)


# The open scopes when a cancellation left an inner scope, kept beside the exception (never set on
# it) so that the scope which catches it can name every scope that was open, and which clamped.
_CHAINS: Final[weakref.WeakKeyDictionary[BaseException, tuple[ScopeFrame, ...]]] = (
    weakref.WeakKeyDictionary()
)


# The innermost step a cancellation left on its way to the scope that caused it: where the
# deadline cut, named in the error that scope raises (as the step names itself in sync code).
_STEPS: Final[weakref.WeakKeyDictionary[BaseException, str]] = weakref.WeakKeyDictionary()


def cut_through(exc: BaseException | None, step: str) -> None:
    """Note that the cancellation `exc` left the step `step` (the first step to note it is the
    innermost): an enclosing `deadline_scope` that caused it names that step."""
    if exc is not None and exc not in _STEPS:
        with contextlib.suppress(TypeError):  # an exception that cannot be weakly referenced
            _STEPS[exc] = step


def current_deadline() -> Deadline | None:
    """The deadline in force here (the earliest of all open scopes), or None."""
    frames = _SCOPES.get()
    return frames[-1].effective if frames else None


_TOOLS: Final[ContextVar[Deadline | None]] = ContextVar("langgraph_deadline.tools", default=None)


def tools_deadline() -> Deadline | None:
    """The deadline the tool calls of the step whose body runs here end by, when it is before
    the one in force: time kept back for what follows the step, by the tool calls only (their
    cut does not end the run; `follow.py`). None: the one in force."""
    return _TOOLS.get()


def tools_until(deadline: Deadline | None) -> Token[Deadline | None]:
    """Set `tools_deadline` for a step's body; undone with `.reset` on the returned token."""
    return _TOOLS.set(deadline)


def current_scopes() -> tuple[ScopeFrame, ...]:
    """The open deadline scopes, outermost first: who asked for what, and who clamped."""
    return _SCOPES.get()


def push_step(deadline: Deadline, name: str) -> Token[tuple[ScopeFrame, ...]]:
    """Open a step's scope in context (its deadline, clamped by the one in force); the hot-path
    form of `step_scope`, undone with `pop_step`."""
    frames = _SCOPES.get()
    effective = deadline.earliest(frames[-1].effective) if frames else deadline
    return _SCOPES.set((*frames, ScopeFrame(name, deadline, effective)))


def pop_step(token: Token[tuple[ScopeFrame, ...]]) -> None:
    _SCOPES.reset(token)


def remaining() -> float:
    """Seconds left before the deadline in force; `math.inf` when there is none."""
    d = current_deadline()
    return math.inf if d is None else d.remaining()


def check(step: str | None = None) -> None:
    """Raise `DeadlineExceeded` if the deadline in force has passed; for cooperative sync loops.

    Raises:
        DeadlineExceeded: the deadline has passed.
    """
    d = current_deadline()
    if d is not None and d.expired:
        raise _exceeded(d, step)


def client_timeout(cap: float | None = None, *, reserve: float = 0.0) -> float | None:
    """A timeout to hand a client library (httpx, a DB driver): `min(cap, remaining - reserve)`.

    Never returns 0 or a negative number, which many clients read as "no timeout": with nothing
    left it raises instead. Returns `cap` unchanged when no deadline is in force.

    Raises:
        DeadlineExceeded: no time is left.
    """
    d = current_deadline()
    if d is None:
        return None if cap is None else check_seconds(cap, "cap")
    left = d.budget(cap, reserve)
    if left <= 0.0:
        raise _exceeded(d, None)
    return left


def loop_time() -> float:
    """`anyio.current_time()`, without its event-loop detection on asyncio (the hot path)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return anyio.current_time()


def _exceeded(d: Deadline, step: str | None) -> DeadlineExceeded:
    where = f" in {step}" if step else ""
    return DeadlineExceeded(
        f"deadline exceeded{where}", deadline=d, step=step, scopes=_SCOPES.get()
    )


def _coerce(value: Deadline | float | None, name: str) -> Deadline | None:
    if value is None or isinstance(value, Deadline):
        return value
    return Deadline.after(check_seconds(value, name))


class deadline_scope:
    """Set the deadline for a block: a `Deadline`, or seconds from now. Earliest wins.

    Works as `with` and `async with`. Both set the contextvar for the block and restore it on exit.
    In async code the block is also cancelled at the deadline, and `DeadlineExceeded` is raised
    on leaving it, like `anyio.fail_after` (on asyncio with this library's cancel scope, which
    lets LangGraph cancel the tasks it started for the block's run); the caller's own
    `TimeoutError` or `CancelledError` pass through untouched. Sync code cannot be interrupted:
    use `check()` in loops and `client_timeout()` for I/O.

    `None` opens a scope that adds no deadline (the enclosing one stays in force).

    Raises:
        TypeError, ValueError: `deadline` is not a `Deadline` or a finite number of seconds >= 0.
        DeadlineExceeded: (async) the block was cancelled at the deadline.
    """

    __slots__ = ("_cancel", "_frame", "_name", "_requested", "_signal", "_signal_token", "_token")

    _LINKS_SIGNAL = True  # async blocks get a child cancel signal (see the cancel signal above)

    def __init__(self, deadline: Deadline | float | None, *, name: str | None = None) -> None:
        self._requested = _coerce(deadline, "deadline")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, got {type(name).__name__}: {name!r}")
        self._name = name
        self._frame: ScopeFrame | None = None
        self._token: Token[tuple[ScopeFrame, ...]] | None = None
        self._cancel: anyio.CancelScope | Cut | None = None
        self._signal: CancelSignal | None = None
        self._signal_token: object = None

    @property
    def deadline(self) -> Deadline | None:
        """The deadline in force inside the block (after entering)."""
        return self._frame.effective if self._frame else current_deadline()

    def _enter(self) -> Deadline | None:
        if self._token is not None:
            raise RuntimeError("this deadline_scope is already entered")
        frames = _SCOPES.get()
        outer = frames[-1].effective if frames else None
        if self._requested is None:
            self._token = _SCOPES.set(frames)
            return outer
        effective = self._requested.earliest(outer)
        self._frame = ScopeFrame(self._name, self._requested, effective)
        self._token = _SCOPES.set((*frames, self._frame))
        return effective

    def _reset(self) -> None:
        if self._token is not None:
            _SCOPES.reset(self._token)
            self._token = None

    def __enter__(self) -> Deadline | None:
        return self._enter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._reset()

    async def __aenter__(self) -> Deadline | None:
        if self._LINKS_SIGNAL:
            # Work started in this block (LangGraph's node tasks included) is stopped with it.
            self._signal = CancelSignal(current_signal())
            self._signal_token = set_signal(self._signal)
        effective = self._enter()
        if effective is not None:
            self._cancel = _cancel_at(effective)
            self._cancel.__enter__()
        return effective

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Never swallows: a cancellation this scope caught becomes DeadlineExceeded, so type
        # checkers can tell that code after an `async with deadline_scope(...)` block is reached.
        cancel, self._cancel = self._cancel, None
        frames = _SCOPES.get()
        try:
            swallowed = bool(cancel.__exit__(exc_type, exc, tb)) if cancel is not None else False
        finally:
            self._reset()
            self._unlink(exc, cancel)
        if cancel is not None and _caught(cancel):
            chain = _CHAINS.get(exc, frames) if exc is not None else frames
            d = self._frame.effective if self._frame else None
            # Name the step it cut, as a step cut by its own budget names itself; else the
            # scope whose own request set the deadline that fired, whichever caught it.
            step = _STEPS.get(exc) if exc is not None else None
            if step is None:
                step = next((f.name for f in chain if f.requested is d), self._name)
            raise DeadlineExceeded(
                f"deadline exceeded in {step}" if step else "deadline exceeded",
                deadline=d,
                step=step,
                scopes=chain,
            ) from None
        if exc is not None and not swallowed and exc not in _CHAINS:
            # A cancellation on its way to an enclosing scope: remember the full chain of open
            # scopes, so the error raised there shows the inner ones too (and which were clamped).
            with contextlib.suppress(TypeError):  # an exception that cannot be weakly referenced
                _CHAINS[exc] = frames

    def _unlink(self, exc: BaseException | None, cancel: anyio.CancelScope | Cut | None) -> None:
        signal, self._signal = self._signal, None
        if signal is None:
            return
        reset_signal(self._signal_token)
        cancelled = cancel is not None and _caught(cancel)
        if cancelled or isinstance(exc, anyio.get_cancelled_exc_class()):
            signal.cancel("deadline" if cancelled else "caller")

    def __repr__(self) -> str:
        return f"deadline_scope({self._requested!r}, name={self._name!r})"


def _cancel_at(deadline: Deadline) -> anyio.CancelScope | Cut:
    """The cancel scope of an async `deadline_scope`. On asyncio, this library's own (`Cut`):
    like an anyio scope, but it lets the body's clean-up run in a task of its own, as
    LangGraph's does on its way out (cancelling the tasks it started for nodes and `@task`s);
    an anyio scope cancels that clean-up task before it starts. Off asyncio, anyio's."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    task = asyncio.current_task(loop) if loop is not None else None
    if loop is None or task is None:
        return anyio.CancelScope(deadline=loop_time() + deadline.remaining())
    cut = Cut(loop, task)
    cut.arm(deadline)
    return cut


def _caught(cancel: anyio.CancelScope | Cut) -> bool:
    return cancel.caught if isinstance(cancel, Cut) else cancel.cancelled_caught


class step_scope(deadline_scope):
    """`deadline_scope` for one step's body: the step itself is registered with the signal."""

    __slots__ = ()
    _LINKS_SIGNAL = False
