"""A step's guard: its deadline in context and its cancellation (at its budget, by the run's one
timer, by the cancel signal), entered and left as one block around the step's body.

A context manager rather than a coroutine wrapped around the body: every node, tool, model call
and HTTP request opens one, and one coroutine more per step is one frame more kept alive while
the step runs. On asyncio the cancellation is a `Cut`; off asyncio (trio) an anyio cancel scope.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import NoReturn, Self

import anyio

from .cancel import CancelSignal
from .context import current_scopes, pop_step, push_step, step_scope
from .cut import Cut
from .deadline import Deadline
from .errors import DeadlineExceeded, ScopeFrame, Stalled
from .plan import RunAlarm, RunTracker
from .stall import StallWatch, stalled_note, unwatch, watching

__all__ = ["StepGuard"]


class StepGuard:
    """Run the block with `deadline` in context, cancelled at that deadline and by the parent's
    "stop" (the cancel signal, Go's ctx.Done()), which reaches the step even in a task LangGraph
    made. A cancellation of its own leaves the block as `DeadlineExceeded` (or, when the signal
    caused it, as the caller's cancellation); any other passes through. A step that ends when
    the run's nodes end joins the run's one timer for that instant instead of arming its own."""

    __slots__ = (
        "_cut",
        "_deadline",
        "_inside",
        "_name",
        "_run",
        "_scope",
        "_signal",
        "_token",
        "_watch",
        "_watch_token",
    )

    def __init__(
        self,
        deadline: Deadline | None,
        name: str,
        signal: CancelSignal | None,
        run: RunTracker | None = None,
        inside: Deadline | None = None,
        watch: StallWatch | None = None,
    ) -> None:
        self._deadline = deadline
        self._inside = inside  # the deadline the block's own steps see, when earlier
        self._name = name
        self._signal = signal
        self._run = run
        self._cut: Cut | None = None
        self._token: Token[tuple[ScopeFrame, ...]] | None = None
        self._scope: tuple[AbstractContextManager[object], anyio.CancelScope] | None = None
        self._watch = watch  # its idle cap's watch (`stall.py`), when it has one
        self._watch_token: Token[StallWatch | None] | None = None

    def __enter__(self) -> Self:
        deadline, signal, watch = self._deadline, self._signal, self._watch
        if watch is not None:
            self._watch_token = watching(watch)
        if deadline is None and signal is None and watch is None:
            return self
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): an anyio scope does the same job
            return self._enter_anyio()
        task = asyncio.current_task(loop)
        if task is None:
            return self._enter_anyio()
        cut = self._cut = Cut(loop, task)
        if deadline is not None:
            alarm = _run_alarm(self._run, deadline, loop, signal)
            if alarm is None:
                cut.arm(deadline)
            else:
                if alarm.fired:
                    cut.cancel()
                cut.joined = True  # registered with the run's signal below: the alarm finds it
            self._token = push_step(self._inside or deadline, self._name)
        if signal is not None:
            signal.register(cut)
        if watch is not None:
            watch.start(loop, cut.cancel)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._watch_token is not None:
            unwatch(self._watch_token)
            self._watch_token = None
            assert self._watch is not None
            self._watch.stop()
        cut = self._cut
        if cut is None:
            return self._exit_anyio(exc_type, exc, tb) if self._scope is not None else False
        cut.__exit__(exc_type, exc, tb)
        if self._signal is not None:
            self._signal.unregister(cut)
        caught = cut.caught or (cut.fired and _timed_out(exc))
        chain = current_scopes() if caught else ()
        if self._token is not None:
            pop_step(self._token)
        if caught:  # the cut caught its own cancellation: which of the two was it?
            self._caught(chain)
        return False

    def _enter_anyio(self) -> Self:
        scope = anyio.CancelScope()
        if self._deadline is not None:
            scope.deadline = anyio.current_time() + self._deadline.remaining()
        if self._signal is not None:
            self._signal.register(scope)
        context = step_scope(self._inside or self._deadline, name=self._name)  # in context only
        context.__enter__()
        scope.__enter__()
        self._scope = (context, scope)
        return self

    def _exit_anyio(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._scope is not None
        context, scope = self._scope
        chain = current_scopes()
        try:
            caught = scope.__exit__(exc_type, exc, tb)
        finally:
            context.__exit__(None, None, None)
            if self._signal is not None:
                self._signal.unregister(scope)
        if caught or (scope.cancel_called and _timed_out(exc)):
            self._caught(chain)
        return False

    def _caught(self, chain: tuple[ScopeFrame, ...]) -> NoReturn:
        deadline, signal, name = self._deadline, self._signal, self._name
        watch = self._watch
        if watch is not None and watch.fired and not (signal is not None and signal.cancelled):
            raise Stalled(f"{name} stalled: {stalled_note(watch.gap)}", gap=watch.gap, step=name)
        if (
            signal is not None
            and signal.cancelled
            and not (deadline is not None and deadline.expired)
        ):
            raise anyio.get_cancelled_exc_class()("cancelled by the caller") from None
        raise DeadlineExceeded(
            f"deadline exceeded in {name}", deadline=deadline, step=name, scopes=chain
        ) from None


def _timed_out(exc: BaseException | None) -> bool:
    """True for a library's own timeout (a `TimeoutError`, or an error raised from one:
    httpx's `ReadTimeout`, openai's `APITimeoutError`), not a deadline of ours. Out of a body
    whose cut has fired, it is the cut: the hooks set a request's timeouts to the step's time
    left, so when a pause of the process (a collector pass, a loaded machine) makes both due in
    one turn of the loop, the library's may be the one that lands."""
    if exc is None or isinstance(exc, DeadlineExceeded):
        return False
    for _ in range(8):  # (a chain of causes is short; a cycle in it must not loop for ever)
        if isinstance(exc, TimeoutError):
            return True
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            return False
        exc = nxt
    return False


def _run_alarm(
    run: RunTracker | None,
    deadline: Deadline,
    loop: asyncio.AbstractEventLoop,
    signal: CancelSignal | None,
) -> RunAlarm | None:
    """The run's one timer, when this step ends at the instant the run's nodes end at (see
    `plan.run_step_end`) and answers the run's signal: armed by the first such step (or by
    `ainvoke`). None: the step arms its own."""
    if run is None or run.step_end is None or deadline is not run.step_end[1]:
        return None
    if signal is not run.signal:
        return None
    if run.alarm is None:
        run.alarm = RunAlarm(loop, deadline, run.signal)
    return run.alarm if run.alarm.loop is loop else None  # a run on two loops: its own timer
