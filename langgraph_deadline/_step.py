"""One step's life: plan its budget at start, run it under that budget, record how it ended.

Shared by nodes (and by tools, model calls and HTTP requests built on it): the arithmetic and
the cancellation live here once.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final, Generic, TypeVar

import anyio
from langgraph.errors import GraphBubbleUp

from ._cancel import CancelSignal, current_signal
from ._clock import SYSTEM_CLOCK
from ._context import current_deadline, current_scopes, deadline_scope, loop_time, step_scope
from ._deadline import Deadline, earliest
from ._errors import DeadlineExceeded, ScopeFrame
from ._instrument import emit_step
from ._records import Outcome, StepKind, StepRecord, StepStatus
from ._workers import submit as _submit

__all__ = [
    "RUN_KEY",
    "Plan",
    "RunTracker",
    "StepResult",
    "child_records",
    "plan_step",
    "run_async",
    "run_from_config",
    "run_sync",
]

T = TypeVar("T")

HANDOFF: Final = 0.01
"""Seconds a step clamped by an enclosing deadline ends before it, so that the step's own
graceful answer (a timeout message, an outcome in state) is delivered before the enclosing
scope cancels its caller. Steps limited by their own cap are not shortened."""


@dataclasses.dataclass(slots=True, eq=False)
class RunTracker:
    """Mutable, run-scoped bookkeeping shared by every step of one run (carried in its config)."""

    deadline: Deadline | None
    reserve: float = 0.0
    started: float = dataclasses.field(default_factory=time.monotonic)
    records: list[StepRecord] = dataclasses.field(default_factory=list)
    in_flight: dict[int, Plan] = dataclasses.field(default_factory=dict)
    backstop_fired: bool = False
    latest: Any = None
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)
    interrupted: bool = False
    emitted: bool = False
    outcome: Outcome | None = None  # set by the step that ended the run early
    signal: CancelSignal = dataclasses.field(default_factory=lambda: CancelSignal(current_signal()))
    started_at: float = dataclasses.field(default_factory=time.time)
    entry: object = None  # the graph whose ainvoke prepared this run, until its astream starts

    def clock_now(self) -> float:
        return time.monotonic()

    def close(self, key: int, record: StepRecord) -> bool:
        """Record a step once: after the backstop has closed a step, its late record is dropped."""
        if self.in_flight.pop(key, None) is None and self.backstop_fired:
            return False
        self.records.append(record)
        return True

    def fire_backstop(self) -> list[StepRecord]:
        """The run's own deadline hit: close every step still in flight; return their records."""
        self.backstop_fired = True
        closed = []
        for plan in self.in_flight.values():
            status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
            closed.append(plan.record(status, cancel_source="run_deadline"))
        self.in_flight.clear()
        self.records.extend(closed)
        deadline_at = self.deadline.timestamp if self.deadline else None
        for record in closed:
            emit_step(record, self.run_id, deadline_at)
        return closed


RUN_KEY: Final = "__langgraph_deadline_run"


def run_from_config(config: Mapping[str, Any] | None) -> RunTracker | None:
    """The run's tracker, carried in `config["configurable"]` (a dunder key: never checkpointed)."""
    if not config:
        return None
    run = config.get("configurable", {}).get(RUN_KEY)
    return run if isinstance(run, RunTracker) else None


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """A step's budget, decided once when it starts. `budget` None: no deadline and no cap."""

    name: str
    kind: StepKind
    attempt: int
    deadline: Deadline | None
    remaining: float | None
    cap: float | None
    budget: float | None
    min_viable: float
    started: float
    sync: bool = False
    started_at: float = 0.0

    @property
    def skip(self) -> bool:
        """True when the step must not start: a deadline is in force and the budget is too small."""
        if self.budget is None:
            return False
        return self.budget <= 0.0 or self.budget < self.min_viable

    @property
    def clamped(self) -> bool:
        """True when the run's deadline (not the step's cap) set the budget."""
        if self.budget is None or self.deadline is None:
            return False
        return self.cap is None or self.budget < self.cap

    def step_deadline(self) -> Deadline | None:
        if self.budget is None:
            return None
        clock = self.deadline.clock if self.deadline else SYSTEM_CLOCK
        return Deadline._after(self.budget, clock).earliest(self.deadline)

    def record(
        self,
        status: StepStatus,
        *,
        side_effect_started: bool = False,
        cancel_source: str | None = None,
    ) -> StepRecord:
        return StepRecord(
            name=self.name,
            kind=self.kind,
            attempt=self.attempt,
            remaining_ms=_ms(self.remaining),
            requested_ms=_ms(self.cap),
            allocated_ms=_ms(self.budget),
            clamped=self.clamped,
            elapsed_ms=(time.monotonic() - self.started) * 1000.0,
            status=status,
            side_effect_started=side_effect_started,
            cancel_source=cancel_source,
            started_at=self.started_at,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def plan_step(
    name: str,
    kind: StepKind,
    *,
    cap: float | None,
    min_viable: float,
    reserve: float | None = None,
    deadline: Deadline | None = None,
    attempt: int = 1,
    run: RunTracker | None = None,
    sync: bool = False,
) -> Plan:
    """Decide a step's budget now: `min(cap, remaining - reserve)` against every known deadline.

    The deadline is the earliest of the one given (from state), the one in context and the run's.
    The run's reserve is held back from the run's own deadline (state or tracker) only: a
    deadline in context inside a step is that step's budget, from which it was already held
    back, and is not cut twice. An explicit `reserve` is held back from all of them.
    """
    ctx = current_deadline()
    own = earliest(deadline, run.deadline if run else None)
    d = earliest(own, ctx)
    if d is None:
        left = None
        budget = cap
    else:
        left = d.remaining()
        if reserve is not None:
            budget = d._budget(cap, reserve)
        else:
            budget = own._budget(cap, run.reserve if run else 0.0) if own is not None else cap
            if ctx is not None:
                from_ctx = ctx._budget(None, 0.0)
                budget = from_ctx if budget is None or from_ctx < budget else budget
        assert budget is not None
        if cap is None or budget < cap:
            budget = max(0.0, budget - HANDOFF)
    return Plan(
        name, kind, attempt, d, left, cap, budget, min_viable, time.monotonic(), sync, time.time()
    )


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
    except GraphBubbleUp:
        # An interrupt (or a drain) on its way to LangGraph: not an end of this step's budget.
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
    plan: Plan, body: Callable[[], T], *, run: RunTracker | None = None, commit: bool = True
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
    box: dict[str, Any] = {}
    done = threading.Event()
    step_deadline = plan.step_deadline()

    def target() -> None:
        try:
            with deadline_scope(step_deadline, name=plan.name):
                box["value"] = body()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    ctx = contextvars.copy_context()
    _submit(lambda: ctx.run(target))
    if not done.wait(plan.budget):
        overrun = DeadlineExceeded(
            f"deadline exceeded in {plan.name} (sync work abandoned, still running)",
            deadline=step_deadline,
            step=plan.name,
        )
        source = "run_deadline" if plan.clamped else "step_cap"
        rec = plan.record(StepStatus.ABANDONED, cancel_source=source)
        return _finish(run, key, commit, StepResult(rec, error=overrun))
    if "error" in box:
        err = box["error"]
        if (
            isinstance(err, DeadlineExceeded)
            and step_deadline is not None
            and step_deadline.expired
        ):
            # The body stopped itself at its budget (check(), client_timeout()): cut, not failed.
            source = "run_deadline" if plan.clamped else "step_cap"
            rec = plan.record(StepStatus.TIMED_OUT, cancel_source=source)
            return _finish(run, key, commit, StepResult(rec, error=err))
        if isinstance(err, GraphBubbleUp):
            if run is not None:
                run.in_flight.pop(key, None)
            raise err
        if isinstance(err, Exception):
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=err))
        raise err
    return _finish(
        run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=box["value"])
    )


def _finish(run: RunTracker | None, key: int, commit: bool, result: StepResult[T]) -> StepResult[T]:
    if not commit:
        if run is not None:
            run.in_flight.pop(key, None)
        return result
    commit_record(result.record, run, key)
    return result


def commit_record(record: StepRecord, run: RunTracker | None, key: int | None = None) -> None:
    """The one place a step record is kept: the run's records, the enclosing node's children
    (for the trace in state), and the observers."""
    if run is not None:
        if key is not None:
            if not run.close(key, record):
                return
        else:
            run.records.append(record)
    if record.kind != "node" and (sink := _CHILDREN.get()) is not None:
        sink.append(record)
    if run is not None:
        emit_step(record, run.run_id, run.deadline.timestamp if run.deadline else None)
    else:
        emit_step(record, None, None)


_CHILDREN: Final[ContextVar[list[StepRecord] | None]] = ContextVar(
    "langgraph_deadline.children", default=None
)


class child_records:
    """Collect the records of the steps (tools, model calls, HTTP) run inside a node, so the
    node can add them to the run's trace in state along with its own."""

    __slots__ = ("_token", "sink")

    def __enter__(self) -> list[StepRecord]:
        self.sink: list[StepRecord] = []
        self._token = _CHILDREN.set(self.sink)
        return self.sink

    def __exit__(self, *exc: object) -> None:
        _CHILDREN.reset(self._token)


def record_child(record: StepRecord, run: RunTracker | None) -> None:
    """Record a step that did not run through `run_async`/`run_sync` (a skipped or stale one)."""
    commit_record(record, run)
