"""Run one step under its planned budget: cancelled (async) or abandoned (sync) at it.

The arithmetic and the cancellation live here once, for nodes, tools, model calls and HTTP
requests alike. Exceptions a framework uses for control flow (LangGraph's interrupts) are passed
through untouched: the caller names them in `passthrough`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from .cancel import CancelSignal, current_signal
from .context import current_scopes, loop_time, step_scope
from .deadline import Deadline
from .errors import DeadlineExceeded, ScopeFrame
from .plan import Plan
from .record import commit_record
from .records import StepRecord, StepStatus
from .tracker import RunTracker
from .workers import Job
from .workers import submit as _submit

__all__ = ["StepResult", "run_async", "run_sync"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class StepResult(Generic[T]):
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
    sync = plan.sync
    key = id(plan)
    if run is not None:
        run.in_flight[key] = plan
    step_deadline = plan.step_deadline()
    signal = run.signal if run is not None else current_signal()
    try:
        if signal is None:
            value = await _bounded(body, step_deadline, plan.name)
        else:
            value = await _guarded(body, step_deadline, plan.name, signal)
    except DeadlineExceeded as exc:
        if step_deadline is None or not step_deadline.expired:
            # Raised below this step (a shorter inner scope, a client) with time left: it failed.
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        status = StepStatus.ABANDONED if sync else StepStatus.TIMED_OUT
        source = "run_deadline" if plan.clamped else "step_cap"
        return _finish(
            run, key, commit, StepResult(plan.record(status, cancel_source=source), error=exc)
        )
    except passthrough:
        # Control flow on its way to the framework (LangGraph's interrupt or drain): not an end
        # of this step's budget.
        if run is not None:
            run.in_flight.pop(key, None)
        raise
    except anyio.get_cancelled_exc_class():
        late = plan.deadline is not None and plan.deadline.expired
        if (run is not None and run.backstop_fired) or late:
            # Cancelled because the run's time was up (by the backstop, or by an enclosing
            # scope that fired at the same deadline): a timeout, not the caller giving up.
            status = StepStatus.ABANDONED if sync else StepStatus.TIMED_OUT
            _finish(run, key, commit, StepResult(plan.record(status, cancel_source="run_deadline")))
        else:
            _finish(
                run,
                key,
                commit,
                StepResult(plan.record(StepStatus.CANCELLED, cancel_source="caller")),
            )
        raise
    except Exception as exc:
        return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
    return _finish(run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=value))


async def _guarded(
    body: Callable[[], Awaitable[T]], deadline: Deadline | None, name: str, signal: CancelSignal
) -> T:
    """`_bounded`, and the parent's "stop" too (ctx.Done()): one cancel scope does both jobs,
    registered with the signal so that it reaches this step even in a task LangGraph made."""
    scope = anyio.CancelScope()
    if deadline is not None:
        scope.deadline = loop_time() + deadline.remaining()
    signal.register(scope)
    chain: tuple[ScopeFrame, ...] = ()
    try:
        with step_scope(deadline, name=name), scope:  # sync form: the deadline in context only
            chain = current_scopes()
            return await body()
    finally:
        signal.unregister(scope)
    # Only reached when the scope caught its own cancellation: which of the two was it?
    if signal.cancelled and not (deadline is not None and deadline.expired):
        raise anyio.get_cancelled_exc_class()("cancelled by the caller")
    raise DeadlineExceeded(
        f"deadline exceeded in {name}", deadline=deadline, step=name, scopes=chain
    )


async def _bounded(body: Callable[[], Awaitable[T]], deadline: Deadline | None, name: str) -> T:
    if deadline is None:
        return await body()
    async with step_scope(deadline, name=name):
        return await body()


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
