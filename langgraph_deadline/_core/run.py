"""Run one step under its planned budget: cancelled (async) or abandoned (sync) at it.

The arithmetic and the cancellation live here once, for nodes, tools, model calls and HTTP
requests alike. Exceptions a framework uses for control flow (LangGraph's interrupts) are passed
through untouched: the caller names them in `passthrough`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import Token
from types import TracebackType
from typing import Any, Generic, NamedTuple, Self, TypeVar

import anyio

from .cancel import current_signal
from .context import tools_until
from .deadline import Deadline
from .errors import DeadlineExceeded, Stalled
from .guard import StepGuard
from .plan import Plan, RunTracker
from .record import commit_record
from .records import STALLED, StepRecord, StepStatus
from .stall import StallWatch, current_watch, finite, stalled_note, unwatch, watching
from .sync_http import ensure as _ensure_http
from .workers import Job
from .workers import submit as _submit

__all__ = [
    "Amend",
    "StepResult",
    "StepRun",
    "refused",
    "run_async",
    "run_sync",
    "settle",
    "unbounded_guard",
    "watch_of",
]

T = TypeVar("T")


class StepResult(NamedTuple, Generic[T]):
    """How a step ran: its record, and its value or error (exactly one when completed/failed)."""

    record: StepRecord
    value: T | None = None
    error: BaseException | None = None

    @property
    def status(self) -> StepStatus:
        return self.record.status


Amend = Callable[[StepResult[Any]], StepResult[Any]]
"""What a step that records its own result adds to its record (`run_async(amend=)`)."""


async def run_async(
    plan: Plan,
    body: Callable[[], Awaitable[T]],
    *,
    run: RunTracker | None = None,
    commit: bool = True,
    passthrough: tuple[type[BaseException], ...],
    amend: Amend | None = None,
) -> StepResult[T]:
    """Run an async step under its budget; a cut step is cancelled (its I/O closes), and one
    whose budget is below what it needs is not started (`refused`).

    A plan made with `sync=True` marks a body that waits on a thread (a sync function run in an
    executor): cutting it stops the waiting, not the thread, so it is recorded as `abandoned`.
    Caller cancellation is recorded as `cancelled` and re-raised; the step's own errors are
    returned, never rewritten. `commit=False` leaves recording the result to the caller
    (`record_child`), for steps that decide their final status afterwards (a stale answer);
    such a caller gives `amend`, what it adds to its record (attempts, copies): a cancellation
    goes up through it, and never returns the result, so the record is made here with `amend`
    applied. Without `amend`, `commit=False` steps are recorded by someone else.
    """
    if plan.skip:
        return refused(plan, run, commit=commit)
    with StepRun(plan, run, commit=commit, passthrough=passthrough, amend=amend) as step:
        step.value = await body()
    return step.result


def refused(plan: Plan, run: RunTracker | None = None, *, commit: bool = True) -> StepResult[Any]:
    """A step not started: what it has left is below what it needs (`Plan.skip`). Recorded
    `skipped` (by the caller when not `commit`); its face answers it as it answers a cut, since
    both ran out of time (`StepStatus.ran_out`)."""
    result = StepResult[Any](plan.record(StepStatus.SKIPPED))
    if commit:
        commit_record(result.record, run)
    return result


class StepRun(StepGuard):
    """`run_async` as a block, for a caller that is a coroutine already (a node): the step's
    guard, and on leaving it the step's result (`result`), recorded. Set `value` to what the
    body returned; an exception that ends the step is kept in `result`, any other goes on."""

    __slots__ = (
        "_amend",
        "_commit",
        "_key",
        "_passthrough",
        "_plan",
        "_result",
        "_tools",
        "value",
    )

    def __init__(
        self,
        plan: Plan,
        run: RunTracker | None,
        *,
        commit: bool = True,
        passthrough: tuple[type[BaseException], ...],
        amend: Amend | None = None,
    ) -> None:
        signal = run.signal if run is not None else current_signal()
        watch = watch_of(plan)
        super().__init__(plan.step_deadline(), plan.name, signal, run, plan.inside, watch)
        self._plan = plan
        self._commit = commit
        self._passthrough = passthrough
        self._amend = amend
        self._key = id(plan)
        self._result: StepResult[Any] | None = None
        self._tools: Token[Deadline | None] | None = None
        self.value: Any = None

    def __enter__(self) -> Self:
        plan = self._plan
        if self._run is not None:
            self._run.in_flight[self._key] = plan
        super().__enter__()
        if plan.for_tools is not None:
            self._tools = tools_until(plan.for_tools)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._tools is not None:
            self._tools.var.reset(self._tools)
        try:
            super().__exit__(exc_type, exc, tb)
        except BaseException as own:  # the guard's cut, as `DeadlineExceeded` or the caller's
            if self._ended(own):
                # Kept in the result: without the frames it was raised through (ours, which hold
                # this block, which holds the result) nor the cancellation it replaced (whose
                # frames hold the body's), so that reference counting frees a cut step.
                own.__traceback__ = own.__context__ = None
                return True
            raise
        if exc is None:
            gap = None if self._watch is None else self._watch.close(cut=False)
            done = StepResult(self._plan.record(StepStatus.COMPLETED, gap=gap), value=self.value)
            self._result = _finish(self._run, self._key, self._commit, done)
            return False
        return self._ended(exc)

    def _ended(self, exc: BaseException) -> bool:
        plan, run, key = self._plan, self._run, self._key
        gap = None if self._watch is None else self._watch.close(cut=True)
        self._result = settle(
            exc,
            plan,
            run,
            commit=self._commit,
            passthrough=self._passthrough,
            key=key,
            gap=gap,
            amend=self._amend,
        )
        return self._result is not None

    @property
    def result(self) -> StepResult[Any]:
        """How the step ended (once the block is left without an exception)."""
        assert self._result is not None
        return self._result


def watch_of(plan: Plan) -> StallWatch | None:
    """The watch of a step with an idle cap (None: it has none): a node's gap clock runs from
    its start, a stream's from its first progress."""
    if plan.idle is None:
        return None
    return StallWatch(finite(plan.idle), armed=plan.kind == "node", parent=current_watch())


def unbounded_guard(name: str, run: RunTracker | None) -> StepGuard:
    """The guard of a step that nothing bounds (no deadline in force, no cap): no timer, only
    the cancel signal, for when the caller gives up. `settle` records the step if it does not
    complete; nothing else does."""
    return StepGuard(None, name, run.signal if run is not None else current_signal(), run)


def settle(
    exc: BaseException,
    plan: Plan,
    run: RunTracker | None,
    *,
    passthrough: tuple[type[BaseException], ...],
    commit: bool = True,
    key: int | None = None,
    gap: float | None = None,
    amend: Amend | None = None,
) -> StepResult[Any] | None:
    """How a step that raised `exc` ended, recorded. None: `exc` goes on up (the framework's
    control flow, a cancellation, a `BaseException`), recorded when it ends the step. A
    `DeadlineExceeded` past the step's own deadline is a cut; with time left, the step failed,
    unless it was cut at its idle cap (`Stalled`: `cancel_source="stalled"`). `gap`: the
    longest gap with no progress it showed (its record's `gap_ms`)."""
    key = id(plan) if key is None else key
    step_deadline = plan.step_deadline()
    if isinstance(exc, Stalled) and exc.step == plan.name:
        status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
        rec = plan.record(status, cancel_source=STALLED, note=stalled_note(exc.gap), gap=gap)
        return _finish(run, key, commit, StepResult(rec, error=exc))
    if isinstance(exc, DeadlineExceeded):
        if step_deadline is None or not step_deadline.expired:
            # Raised below this step (a shorter inner scope, a client) with time left: it failed.
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
        source = plan.cut_source
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
        elif step_deadline is not None and step_deadline.expired:
            # Past its own budget, and the enclosing step's cut reached it first (its own was
            # still closing its I/O): cut at its budget all the same.
            status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
            source = plan.cut_source
            rec = plan.record(status, cancel_source=source)
        else:
            rec = plan.record(StepStatus.CANCELLED, cancel_source="caller")
        # A caller that records its own result (`commit=False` with its `amend`) never gets
        # it: the cancellation goes on up through it. Recorded here, with what it would have
        # added. (`commit=False` without `amend`: a step another records, as the agent
        # middleware's wrapper of a `deadline_tool`, which records itself.)
        ended = StepResult[Any](rec)
        if not commit and amend is not None:
            commit, ended = True, amend(ended)
        _finish(run, key, commit, ended)
    return None


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
    """Run a sync step under its budget (not started when it is below what the step needs:
    `refused`). A thread cannot be killed: past its budget the step is left running in its own
    thread, recorded as `abandoned`, and the caller goes on in time; the HTTP connections its
    body waits on are shut down then (`sync_http.py`). A body that ends past its budget by an
    error (a client timeout cut to it) lost a race with the wait: it is cut too, `timed_out`.

    Called on an event loop's thread (sync `invoke` from async code), the step runs on that
    thread instead: the caller's sync call holds the loop's thread until it returns whichever
    thread the step runs on, and waiting for a worker there would block the loop on a lock.
    The step then stops only where it checks its budget (a model's token stream, `check()`,
    an httpx request, cut to the budget by `sync_http.py`); one that ends past its budget is
    `timed_out`, its value let go, as if it had been cut there.
    """
    key = id(plan)
    if plan.skip:
        return refused(plan, run, commit=commit)
    if plan.budget is None and plan.idle is None:
        try:
            value = body()
        except Exception as exc:
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        return _finish(run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=value))

    if run is not None:
        run.in_flight[key] = plan
    _ensure_http()
    step_deadline = plan.step_deadline()
    watch = watch_of(plan)
    if watch is None and plan.for_tools is None:
        job = Job(body, step_deadline, plan.name)
    else:  # the job's copy of the context holds the watch (its stream's progress reaches it)
        # and the deadline its tool calls see (`Plan.for_tools`)
        token = watching(watch) if watch is not None else None
        tools = tools_until(plan.for_tools) if plan.for_tools is not None else None
        try:
            job = Job(body, step_deadline, plan.name)
        finally:
            if tools is not None:
                tools.var.reset(tools)
            if token is not None:
                unwatch(token)
    if watch is not None and watch.limit is not None and not _on_a_loop_thread():
        stalled = _wait_watched(_submit(job), plan.budget, watch)
        if stalled is not None:
            job.abandon()
            rec = plan.record(
                StepStatus.ABANDONED,
                cancel_source=STALLED,
                note=stalled_note(stalled),
                gap=watch.close(cut=True),
            )
            error = Stalled(
                f"{plan.name} stalled: {stalled_note(stalled)}", gap=stalled, step=plan.name
            )
            return _finish(run, key, commit, StepResult(rec, error=error))
        if not job.wait(0.0):
            overrun, note = _abandoned(job, plan, step_deadline)
            source = plan.cut_source
            gap = watch.close(cut=True)
            rec = plan.record(StepStatus.ABANDONED, cancel_source=source, note=note, gap=gap)
            return _finish(run, key, commit, StepResult(rec, error=overrun))
    elif _on_a_loop_thread():
        job.run()
        if job.error is None and step_deadline is not None and step_deadline.expired:
            job.error = DeadlineExceeded(
                f"deadline exceeded in {plan.name} (ended past its budget, on the event loop's "
                "thread)",
                deadline=step_deadline,
                step=plan.name,
            )
    elif not _submit(job).wait(math.inf if plan.budget is None else plan.budget):
        overrun, note = _abandoned(job, plan, step_deadline)
        source = plan.cut_source
        rec = plan.record(StepStatus.ABANDONED, cancel_source=source, note=note)
        return _finish(run, key, commit, StepResult(rec, error=overrun))
    err = job.error
    if err is not None:
        if (
            isinstance(err, Exception)
            and not isinstance(err, passthrough)
            and step_deadline is not None
            and step_deadline.expired
        ):
            # The body ended past its budget by an error: it stopped at its budget (check(), a
            # client timeout cut to it, a request closed or refused at it), and lost the race
            # with the wait, which would have abandoned it an instant later. Cut, not failed.
            if not isinstance(err, DeadlineExceeded):
                cut = DeadlineExceeded(
                    f"deadline exceeded in {plan.name} (it ended past its budget with "
                    f"{type(err).__name__})",
                    deadline=step_deadline,
                    step=plan.name,
                )
                cut.__cause__ = err
                err = cut
            source = plan.cut_source
            rec = plan.record(StepStatus.TIMED_OUT, cancel_source=source)
            return _finish(run, key, commit, StepResult(rec, error=err))
        if isinstance(err, passthrough):
            if run is not None:
                run.in_flight.pop(key, None)
            raise err
        if isinstance(err, Exception):
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=err))
        raise err
    gap = None if watch is None else watch.close(cut=False)
    done = StepResult(plan.record(StepStatus.COMPLETED, gap=gap), value=job.value)
    return _finish(run, key, commit, done)


def _abandoned(
    job: Job[Any], plan: Plan, deadline: Deadline | None
) -> tuple[DeadlineExceeded, str | None]:
    """Abandon `job` past its budget, its HTTP connections shut down (`sync_http.py`): the
    error that says so, and that its thread runs on; and its record's note (None: nothing
    was closed)."""
    closed = job.abandon()
    note = f"{closed} HTTP connection{'s' if closed > 1 else ''} closed" if closed else None
    error = DeadlineExceeded(
        f"deadline exceeded in {plan.name} (sync work abandoned, its thread still running"
        + (f"; {note})" if note else ")"),
        deadline=deadline,
        step=plan.name,
    )
    return error, note


def _wait_watched(job: Job[Any], budget: float | None, watch: StallWatch) -> float | None:
    """Wait for a sync step's job until it ends, its `budget` runs out (it is then still
    running: `job.wait(0)` is False) or it stalls; the gap it stalled at, or None."""
    limit = watch.limit
    assert limit is not None
    ends = time.monotonic() + (math.inf if budget is None else budget)
    while True:
        now = time.monotonic()
        if now >= ends:
            return None
        due = watch.last + limit if watch.armed else now + limit
        if job.wait(min(ends, due) - now):
            job.finish()  # (give the lock back: the caller's next look finds the job done)
            return None
        gap = watch.open_gap()
        if gap >= limit:
            watch.fired = True
            watch.gap = gap
            return gap


def _on_a_loop_thread() -> bool:
    """Whether this thread is running an asyncio event loop (sync code called from a coroutine)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _finish(run: RunTracker | None, key: int, commit: bool, result: StepResult[T]) -> StepResult[T]:
    if not commit:
        if run is not None:
            run.in_flight.pop(key, None)
        return result
    commit_record(result.record, run, key)
    return result
