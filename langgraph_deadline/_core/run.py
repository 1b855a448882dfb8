"""Run one step under its planned budget: cancelled (async) or abandoned (sync) at it.

The arithmetic and the cancellation live here once, for nodes, tools, model calls and HTTP
requests alike. Exceptions a framework uses for control flow (LangGraph's interrupts) are passed
through untouched: the caller names them in `passthrough`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NamedTuple, NoReturn, TypeVar

import anyio

from .alarm import RunAlarm
from .cancel import CancelSignal, current_signal
from .context import current_scopes, pop_step, push_step, step_scope
from .cut import Cut
from .deadline import Deadline
from .errors import DeadlineExceeded, ScopeFrame
from .plan import Plan
from .record import commit_record
from .records import StepRecord, StepStatus
from .tracker import RunTracker
from .workers import Job
from .workers import submit as _submit

__all__ = ["StepResult", "run_async", "run_sync", "run_unbounded", "settle"]

T = TypeVar("T")


class StepResult(NamedTuple, Generic[T]):
    """How a step ran: its record, and its value or error (exactly one when completed/failed)."""

    record: StepRecord
    value: T | None = None
    error: BaseException | None = None

    @property
    def status(self) -> StepStatus:
        return self.record.status


async def run_async(
    plan: Plan,
    body: Callable[[], Awaitable[T]],
    *,
    run: RunTracker | None = None,
    commit: bool = True,
    passthrough: tuple[type[BaseException], ...],
) -> StepResult[T]:
    """Run an async step under its budget; a cut step is cancelled (its I/O closes).

    A plan made with `sync=True` marks a body that waits on a thread (a sync function run in an
    executor): cutting it stops the waiting, not the thread, so it is recorded as `abandoned`.
    Caller cancellation is recorded as `cancelled` and re-raised; the step's own errors are
    returned, never rewritten. `commit=False` leaves recording the result to the caller
    (`record_child`), for steps that decide their final status afterwards (a stale answer).
    """
    key = id(plan)
    if run is not None:
        run.in_flight[key] = plan
    step_deadline = plan.step_deadline()
    signal = run.signal if run is not None else current_signal()
    try:
        value = await _cut(body, step_deadline, plan.name, signal, run)
    except BaseException as exc:
        result = settle(exc, plan, run, commit=commit, passthrough=passthrough, key=key)
        if result is None:
            raise
        return result
    return _finish(run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=value))


def run_unbounded(
    body: Callable[[], Awaitable[T]], name: str, run: RunTracker | None
) -> Awaitable[T]:
    """Await a step that nothing bounds (no deadline in force, no cap): no timer, no record of
    its own, stopped only when the caller gives up (the cancel signal). `settle` records it
    if it does not complete."""
    signal = run.signal if run is not None else current_signal()
    return _cut(body, None, name, signal, run)


def settle(
    exc: BaseException,
    plan: Plan,
    run: RunTracker | None,
    *,
    passthrough: tuple[type[BaseException], ...],
    commit: bool = True,
    key: int | None = None,
) -> StepResult[Any] | None:
    """How a step that raised `exc` ended, recorded. None: `exc` goes on up (the framework's
    control flow, a cancellation, a `BaseException`), recorded when it ends the step. A
    `DeadlineExceeded` past the step's own deadline is a cut; with time left, the step failed."""
    key = id(plan) if key is None else key
    step_deadline = plan.step_deadline()
    if isinstance(exc, DeadlineExceeded):
        if step_deadline is None or not step_deadline.expired:
            # Raised below this step (a shorter inner scope, a client) with time left: it failed.
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
        source = "run_deadline" if plan.clamped else "step_cap"
        return _finish(
            run, key, commit, StepResult(plan.record(status, cancel_source=source), error=exc)
        )
    if isinstance(exc, passthrough):
        # Control flow on its way to the framework (LangGraph's interrupt or drain): not an end
        # of this step's budget.
        if run is not None:
            run.in_flight.pop(key, None)
        return None
    if isinstance(exc, Exception):
        return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
    if _is_cancellation(exc):
        late = plan.deadline is not None and plan.deadline.expired
        if (run is not None and run.backstop_fired) or late:
            # Cancelled because the run's time was up (by the backstop, or by an enclosing
            # scope that fired at the same deadline): a timeout, not the caller giving up.
            status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
            rec = plan.record(status, cancel_source="run_deadline")
        else:
            rec = plan.record(StepStatus.CANCELLED, cancel_source="caller")
        _finish(run, key, commit, StepResult(rec))
    return None


async def _cut(
    body: Callable[[], Awaitable[T]],
    deadline: Deadline | None,
    name: str,
    signal: CancelSignal | None,
    run: RunTracker | None = None,
) -> T:
    """Await `body` with the step's deadline in context, cancelled at that deadline and by the
    parent's "stop" (the cancel signal, Go's ctx.Done()), which reaches the step even in a task
    LangGraph made. A cancellation of its own becomes `DeadlineExceeded` (or, when the signal
    caused it, the caller's cancellation); any other passes through. A step that ends when the
    run's nodes end joins the run's one timer for that instant instead of arming its own."""
    if deadline is None and signal is None:
        return await body()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): an anyio scope does the same job
        return await _anyio_cut(body, deadline, name, signal)
    task = asyncio.current_task(loop)
    if task is None:
        return await _anyio_cut(body, deadline, name, signal)
    cut = Cut(loop, task)
    token = None
    alarm = None
    if deadline is not None:
        alarm = _run_alarm(run, deadline, loop)
        if alarm is None:
            cut.arm(loop.time() + deadline.remaining())
        elif alarm.fired:
            cut.cancel()
        token = push_step(deadline, name)
    if alarm is not None:
        alarm.cuts.add(cut)
    if signal is not None:
        signal.register(cut)
    try:
        with cut:
            return await body()
    finally:
        if signal is not None:
            signal.unregister(cut)
        if alarm is not None:
            alarm.cuts.discard(cut)
        chain = current_scopes() if cut.caught else ()
        if token is not None:
            pop_step(token)
    # Only reached when the cut caught its own cancellation: which of the two was it?
    return _cut_caught(deadline, name, signal, chain)


def _run_alarm(
    run: RunTracker | None, deadline: Deadline, loop: asyncio.AbstractEventLoop
) -> RunAlarm | None:
    """The run's one timer, when this step ends at the instant the run's nodes end at (see
    `plan.run_step_end`): armed by the first such step. None: the step arms its own."""
    if run is None or run.step_end is None or deadline is not run.step_end[1]:
        return None
    if run.alarm is None:
        run.alarm = RunAlarm(loop, loop.time() + deadline.remaining())
    return run.alarm if run.alarm.loop is loop else None  # a run on two loops: its own timer


def _cut_caught(
    deadline: Deadline | None,
    name: str,
    signal: CancelSignal | None,
    chain: tuple[ScopeFrame, ...],
) -> NoReturn:
    if signal is not None and signal.cancelled and not (deadline is not None and deadline.expired):
        raise anyio.get_cancelled_exc_class()("cancelled by the caller")
    raise DeadlineExceeded(
        f"deadline exceeded in {name}", deadline=deadline, step=name, scopes=chain
    )


async def _anyio_cut(
    body: Callable[[], Awaitable[T]],
    deadline: Deadline | None,
    name: str,
    signal: CancelSignal | None,
) -> T:
    """`_cut` off asyncio, with an anyio cancel scope."""
    scope = anyio.CancelScope()
    if deadline is not None:
        scope.deadline = anyio.current_time() + deadline.remaining()
    if signal is not None:
        signal.register(scope)
    chain: tuple[ScopeFrame, ...] = ()
    try:
        with step_scope(deadline, name=name), scope:  # sync form: the deadline in context only
            chain = current_scopes()
            return await body()
    finally:
        if signal is not None:
            signal.unregister(scope)
    return _cut_caught(deadline, name, signal, chain)


def _is_cancellation(exc: BaseException) -> bool:
    """True for the running async library's cancellation (never true in sync code)."""
    try:
        return isinstance(exc, anyio.get_cancelled_exc_class())
    except RuntimeError:  # no event loop here
        return False


def run_sync(
    plan: Plan,
    body: Callable[[], T],
    *,
    run: RunTracker | None = None,
    commit: bool = True,
    passthrough: tuple[type[BaseException], ...],
) -> StepResult[T]:
    """Run a sync step under its budget. A thread cannot be killed: past its budget the step is
    left running in its own thread, recorded as `abandoned`, and the caller goes on in time.
    """
    key = id(plan)
    if plan.budget is None:
        try:
            value = body()
        except Exception as exc:
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        return _finish(run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=value))

    if run is not None:
        run.in_flight[key] = plan
    step_deadline = plan.step_deadline()
    job = _submit(Job(body, step_deadline, plan.name))
    if not job.wait(plan.budget):
        overrun = DeadlineExceeded(
            f"deadline exceeded in {plan.name} (sync work abandoned, still running)",
            deadline=step_deadline,
            step=plan.name,
        )
        source = "run_deadline" if plan.clamped else "step_cap"
        rec = plan.record(StepStatus.ABANDONED, cancel_source=source)
        return _finish(run, key, commit, StepResult(rec, error=overrun))
    err = job.error
    if err is not None:
        if (
            isinstance(err, DeadlineExceeded)
            and step_deadline is not None
            and step_deadline.expired
        ):
            # The body stopped itself at its budget (check(), client_timeout()): cut, not failed.
            source = "run_deadline" if plan.clamped else "step_cap"
            rec = plan.record(StepStatus.TIMED_OUT, cancel_source=source)
            return _finish(run, key, commit, StepResult(rec, error=err))
        if isinstance(err, passthrough):
            if run is not None:
                run.in_flight.pop(key, None)
            raise err
        if isinstance(err, Exception):
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=err))
        raise err
    return _finish(run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=job.value))


def _finish(run: RunTracker | None, key: int, commit: bool, result: StepResult[T]) -> StepResult[T]:
    if not commit:
        if run is not None:
            run.in_flight.pop(key, None)
        return result
    commit_record(result.record, run, key)
    return result
