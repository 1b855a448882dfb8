"""Temporal: one deadline per workflow run, carried to every LangGraph node or task activity.

Add `DeadlineInterceptor()` to the worker's interceptors (beside `temporalio.langgraph`'s
`LangGraphPlugin`). The run's deadline is the end of the workflow's own `execution_timeout` or
`run_timeout`, or `memo=deadline_memo(timeout)` given at its start, the earlier: an absolute
timestamp kept in the memo, so a replay, a worker restart or a continue-as-new that copies the
memo sees the same one. Workflow-side code reads time only through
`workflow.time()`. Every activity gets `schedule_to_close = min(its own, left - reserve)`, covering
all its retries; below `min_viable` it is not scheduled and the workflow fails `deadline_exceeded`.
Inside the activity the step runs under the library's deadline and heartbeats on its own (on
its progress, when the node set a heartbeat timeout of its own: that is its stall limit). A run
that ends for want of time fails with the named terminal, carrying what `with_deadlines` returns
in one process (its last state, `deadline_outcome`, `deadline_trace`): `deadline_result(error)`.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import time as _time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, NoReturn

import anyio

from ._core.extras import needs_extra

with needs_extra("temporal", "langgraph_deadline.temporal"):
    from temporalio import activity, workflow
    from temporalio.api.common.v1 import Payload
    from temporalio.common import RetryPolicy
    from temporalio.converter import default as _default_converter
    from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutError
    from temporalio.worker import (
        ActivityInboundInterceptor,
        ActivityOutboundInterceptor,
        ExecuteActivityInput,
        ExecuteWorkflowInput,
        Interceptor,
        StartActivityInput,
        WorkflowInboundInterceptor,
        WorkflowInterceptorClassInput,
        WorkflowOutboundInterceptor,
    )

from ._core.context import deadline_scope
from ._core.deadline import Deadline
from ._core.observe import RunEvent, emit_run, emit_step
from ._core.records import Outcome, StepRecord, StepStatus, Terminal
from ._core.stall import StallWatch, current_watch, progress, stalled_note, unwatch, watching

__all__ = [
    "DEADLINE_EXCEEDED",
    "DeadlineInterceptor",
    "deadline_memo",
    "deadline_result",
    "workflow_deadline",
    "workflow_grant",
]

MEMO_KEY = "langgraph_deadline"
"""The memo key holding the run's absolute deadline (seconds since the epoch)."""
DEADLINE_EXCEEDED = "DeadlineExceeded"
"""The `ApplicationError.type` a run ends with when its deadline leaves a step no time."""
_HEADER = "langgraph-deadline"
_STALLED = "Stalled"
_GRACE = 0.1


def deadline_memo(timeout: float, *, now: float | None = None) -> dict[str, float]:
    """The memo to start a workflow with: its deadline, `timeout` seconds from now, set once."""
    return {MEMO_KEY: (_time.time() if now is None else now) + timeout}


def workflow_grant(seconds: float) -> float:
    """Inside a workflow: give the run a new deadline, `seconds` from now by the workflow's
    clock (what `Command(update=deadline_input(seconds))` does for a `with_deadlines` run),
    written into the memo so a replay, a worker restart and a continue-as-new see it too. The
    explicit way a run gets more time, after a human-in-the-loop wait; activities scheduled
    from then on get their timeouts from it. Returns the new deadline (epoch seconds).

    Raises:
        ValueError: `seconds` not a finite number > 0.
    """
    if not (isinstance(seconds, int | float) and 0.0 < seconds < float("inf")):
        raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
    deadline = workflow.time() + float(seconds)
    workflow.upsert_memo({MEMO_KEY: deadline})
    return deadline


def workflow_deadline() -> float | None:
    """Inside a workflow: the run's deadline (epoch seconds), or None: the memo's
    (`deadline_memo`, `workflow_grant`), which holds the end of the workflow's own
    `execution_timeout` or `run_timeout` when that comes first."""
    value = workflow.memo_value(MEMO_KEY, None)
    return None if value is None else float(value)


@dataclass(frozen=True)
class _Options:
    reserve: float
    min_viable: float
    heartbeat: float


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _capped(
    value: timedelta | None, budget: float, *, default: float | None = None
) -> timedelta | None:
    own = _seconds(value)
    limit = budget if own is None else min(own, budget)
    if default is not None:
        limit = min(limit, default) if own is None else limit
    return timedelta(seconds=limit)


def _plan(
    input: StartActivityInput, deadline: float, left: float, options: _Options
) -> StartActivityInput:
    """The activity's timeouts from what is `left` of the run before its `deadline`; raise the
    named terminal when it cannot fit."""
    budget = left - options.reserve
    if budget < options.min_viable:
        raise ApplicationError(
            f"deadline_exceeded: {input.activity} not scheduled, "
            f"{max(budget, 0.0):.3f}s left (< min_viable {options.min_viable}s)",
            {"step": input.activity, "left": left, "outcome": "skipped"},
            type=DEADLINE_EXCEEDED,
            non_retryable=True,
        )
    end = deadline - options.reserve - _GRACE
    retry = input.retry_policy or RetryPolicy()
    non_retryable = [*(retry.non_retryable_error_types or ()), DEADLINE_EXCEEDED]
    heartbeat = _capped(input.heartbeat_timeout, budget, default=options.heartbeat)
    # the activity's own heartbeat timeout is its stall limit: it heartbeats on progress only
    stall = None if input.heartbeat_timeout is None else _seconds(heartbeat)
    headers = {
        **input.headers,
        # the step's own end: a little before Temporal's own timeout, so the step is cut (and
        # says so) first
        _HEADER: _default_converter().payload_converter.to_payloads([[end, stall]])[0],
    }
    return replace(
        input,
        schedule_to_close_timeout=_capped(input.schedule_to_close_timeout, budget),
        start_to_close_timeout=_capped(input.start_to_close_timeout, budget),
        heartbeat_timeout=heartbeat,
        retry_policy=replace(retry, non_retryable_error_types=non_retryable),
        headers=headers,
    )


def deadline_result(error: BaseException) -> dict[str, Any] | None:
    """What a run that ended for want of time returns, read from the error its workflow failed
    with (`WorkflowFailureError`, or any error it caused): the run's last state (the state its
    last activity started from) with `deadline_outcome` (an `Outcome`) and `deadline_trace`
    (a `StepRecord` per activity), as `with_deadlines` returns them in one process. None for an
    error that is not the named terminal."""
    ours = _ours(error)
    details = ours.details[0] if ours is not None and ours.details else None
    if not isinstance(details, Mapping) or "deadline_outcome" not in details:
        return None
    return {
        **details.get("state", {}),
        "deadline_outcome": Outcome.from_dict(details["deadline_outcome"]),
        "deadline_trace": [StepRecord.from_dict(r) for r in details["deadline_trace"]],
    }


def _tell(emit: Callable[[], None]) -> None:
    """Tell the observers of the workflow's worker (records, report, OpenTelemetry, Prometheus)
    once: never while Temporal replays a history (a worker that took the run over, the
    replayer), and outside the sandbox's restrictions (an observer does I/O)."""
    if workflow.unsafe.is_replaying():
        return
    with workflow.unsafe.sandbox_unrestricted():
        emit()


class _Run:
    """What the workflow side keeps of one run (all of it read by the workflow's clock, so a
    replay keeps the same): when it started, the state its last activity started from, and a
    record per activity, each told to the observers as it ends (the steps of a run on several
    workers, in one place: the workflow's worker)."""

    __slots__ = ("id", "reserve", "started", "state", "trace")

    def __init__(self, reserve: float) -> None:
        self.id = ""  # the workflow's id (a continued run keeps it): the observers' run id
        self.reserve = reserve
        self.started = 0.0  # (both set as the workflow starts: not readable when it is made)
        self.state: Mapping[str, Any] | None = None
        self.trace: list[StepRecord] = []

    def start(self) -> None:
        """The run starts: its deadline is the memo's or its Temporal timeout's end, the earlier
        (written into the memo, which a continue-as-new keeps)."""
        info = workflow.info()
        self.id = info.workflow_id
        self.started = workflow.time()
        end, memo = _timeout_end(info), workflow_deadline()
        if end is not None and (memo is None or end < memo):
            workflow.upsert_memo({MEMO_KEY: end})

    def _told(self, rec: StepRecord) -> None:
        _tell(functools.partial(emit_step, rec, self.id, workflow_deadline()))

    def completed(self) -> None:
        """Tell the observers the run completed (when it ran under a deadline)."""
        if workflow_deadline() is not None:
            self._ended(Outcome(terminal=Terminal.COMPLETED, elapsed_ms=self._elapsed_ms()))

    def _elapsed_ms(self) -> float:
        return round((workflow.time() - self.started) * 1000.0, 3)

    def _ended(self, outcome: Outcome) -> None:
        event = RunEvent(outcome, self.id, self.started, workflow_deadline(), self.reserve)
        _tell(functools.partial(emit_run, event))

    def saw(self, input: StartActivityInput) -> None:
        """Keep the state a LangGraph node activity starts from (the plugin's `ActivityInput`)."""
        first = input.args[0] if input.args else None
        args = getattr(first, "args", None)
        if isinstance(args, tuple | list) and args and isinstance(args[0], Mapping):
            self.state = args[0]

    def record(
        self, input: StartActivityInput, left: float, budget: float, status: StepStatus
    ) -> StepRecord:
        own = _seconds(input.schedule_to_close_timeout or input.start_to_close_timeout)
        now = workflow.time()
        rec = StepRecord(
            name=input.activity,
            kind="node",
            attempt=1,
            remaining_ms=round(left * 1000.0, 3),
            requested_ms=None if own is None else round(own * 1000.0, 3),
            allocated_ms=round(max(budget, 0.0) * 1000.0, 3),
            clamped=own is None or own > budget,
            elapsed_ms=0.0,
            status=status,
            started_at=now,
        )
        self.trace.append(rec)
        if status is StepStatus.SKIPPED:
            self._told(rec)
        return rec

    def ended(self, rec: StepRecord, handle: asyncio.Future[Any]) -> None:
        """Close an activity's record as its handle resolves."""
        if handle.cancelled():
            status = StepStatus.CANCELLED
        elif (exc := handle.exception()) is None:
            status = StepStatus.COMPLETED
        elif _ours(exc) is not None or _timed_out(exc):
            status = StepStatus.TIMED_OUT
        else:
            status = StepStatus.FAILED
        elapsed = (workflow.time() - (rec.started_at or 0.0)) * 1000.0
        at = self.trace.index(rec)
        self.trace[at] = done = replace(rec, status=status, elapsed_ms=round(elapsed, 3))
        self._told(done)

    def terminal(self, step: str, message: str, outcome: str, cause: BaseException) -> NoReturn:
        """Raise the named terminal, carrying the run's last state, outcome and trace."""
        last = self.trace[-1] if self.trace else None
        reason = last.ran_out_reason() if last is not None and last.status.ran_out else message
        ending = Outcome(
            terminal=Terminal.DEADLINE_EXCEEDED,
            step=step,
            reason=reason,
            elapsed_ms=self._elapsed_ms(),
        )
        self._ended(ending)
        details: dict[str, Any] = {
            "step": step,
            "outcome": outcome,
            "deadline_outcome": ending.to_dict(),
            "deadline_trace": [r.to_sparse_dict() for r in self.trace],
        }
        if self.state is not None:
            with suppress(Exception):  # a state the converter cannot carry is left out
                workflow.payload_converter().to_payloads([self.state])
                details["state"] = dict(self.state)
        raise ApplicationError(
            message, details, type=DEADLINE_EXCEEDED, non_retryable=True
        ) from cause


def _timeout_end(info: workflow.Info) -> float | None:
    """The end of the run's own Temporal timeout (`execution_timeout`, which spans a
    continue-as-new chain and so is read on its first run only, or `run_timeout`), as epoch
    seconds by the workflow's start event, or None when it has none."""
    limits = [info.run_timeout]
    if info.continued_run_id is None:
        limits.append(info.execution_timeout)
    seconds = [t.total_seconds() for t in limits if t]  # (a continued run's unset one: 0)
    return info.workflow_start_time.timestamp() + min(seconds) if seconds else None


def _timed_out(exc: BaseException) -> bool:
    """Temporal timed the activity out (its budget, or its retries ran out of it)."""
    return isinstance(exc, ActivityError) and (
        exc.retry_state == RetryState.TIMEOUT or isinstance(exc.cause, TimeoutError)
    )


def _ours(exc: BaseException) -> ApplicationError | None:
    """The named terminal in `exc` or its causes (the workflow's, or the activity's own when it
    was cut at the run's deadline), or None."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == DEADLINE_EXCEEDED:
            return cause
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return None


def _planned(headers: Mapping[str, Payload]) -> tuple[float, float | None] | None:
    """The step's end and its stall limit (None: it has none), from the workflow's header."""
    payload = headers.get(_HEADER)
    if payload is None:
        return None
    end, stall = _default_converter().payload_converter.from_payloads([payload])[0]
    return float(end), None if stall is None else float(stall)


async def _heartbeat(beat: Callable[[], None], every: float, watch: StallWatch | None) -> None:
    """Heartbeat every `every` seconds; with a `watch` (a stall limit), only when the step made
    progress since the last beat, so Temporal's heartbeat timeout is the step's stall limit."""
    seen: float | None = None
    while True:
        if watch is None or watch.last != seen:
            seen = None if watch is None else watch.last
            beat()
        await anyio.sleep(every)


class _ActivityOutbound(ActivityOutboundInterceptor):
    """The activity's own `activity.heartbeat()` is progress of its step."""

    def heartbeat(self, *details: Any) -> None:
        progress()
        self.next.heartbeat(*details)


class _ActivityInbound(ActivityInboundInterceptor):
    """Runs the activity under the run's deadline, heartbeating so cancellation reaches it; an
    activity with a heartbeat timeout of its own heartbeats on progress and is cut as stalled at
    it (retried by Temporal with the time left)."""

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self._beat = outbound.heartbeat  # (the loop's beats are not progress: not through ours)
        super().init(_ActivityOutbound(outbound))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        planned = _planned(input.headers)
        if planned is None:
            return await self.next.execute_activity(input)
        deadline, stall = planned
        info = activity.info()
        every = stall if stall is not None else _seconds(info.heartbeat_timeout) or 1.0
        watch = None if stall is None else StallWatch(stall, armed=True, parent=current_watch())
        # the heartbeat runs beside the step (not around it in a task group, which would wrap the
        # step's own error in an ExceptionGroup and change what Temporal's retry policy sees)
        beat = asyncio.ensure_future(_heartbeat(self._beat, max(every / 4, 0.05), watch))
        token = None if watch is None else watching(watch)
        try:
            with anyio.CancelScope() as scope:
                if watch is not None:
                    watch.start(asyncio.get_running_loop(), scope.cancel)
                async with deadline_scope(Deadline.at(deadline), name=info.activity_type):
                    return await self.next.execute_activity(input)
            assert watch is not None  # (only a stall cancels this scope)
            raise ApplicationError(
                f"{info.activity_type} stalled: {stalled_note(watch.gap)} (attempt {info.attempt})",
                {"step": info.activity_type, "attempt": info.attempt, "outcome": "stalled"},
                type=_STALLED,
            )
        except BaseException as exc:
            if type(exc).__name__ == DEADLINE_EXCEEDED or isinstance(exc, builtins.TimeoutError):
                raise ApplicationError(
                    f"deadline_exceeded: {info.activity_type} cut at the run's deadline "
                    f"(attempt {info.attempt})",
                    {"step": info.activity_type, "attempt": info.attempt, "outcome": "timeout"},
                    type=DEADLINE_EXCEEDED,
                    non_retryable=True,
                ) from exc
            raise
        finally:
            beat.cancel()
            if watch is not None:
                watch.close(cut=watch.fired)
            if token is not None:
                unwatch(token)


class _Outbound(WorkflowOutboundInterceptor):
    """Plans each activity's timeouts from the time left, and keeps its record."""

    def __init__(self, next: WorkflowOutboundInterceptor, run: _Run, options: _Options) -> None:
        super().__init__(next)
        self._run = run
        self._options = options

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        deadline = workflow_deadline()
        if deadline is None:
            return self.next.start_activity(input)
        run, options = self._run, self._options
        run.saw(input)
        left = deadline - workflow.time()
        budget = left - options.reserve
        try:
            planned = _plan(input, deadline, left, options)
        except ApplicationError:  # it cannot fit: not scheduled
            run.record(input, left, budget, StepStatus.SKIPPED)
            raise
        rec = run.record(input, left, budget, StepStatus.COMPLETED)
        handle = self.next.start_activity(planned)
        handle.add_done_callback(functools.partial(run.ended, rec))
        return handle


class _Inbound(WorkflowInboundInterceptor):
    """Ends a run that ran out of time in the named terminal, with its last state and trace
    (`options`: set on the subclass the interceptor gives each worker)."""

    options: _Options

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self._run = _Run(self.options.reserve)
        super().init(_Outbound(outbound, self._run, self.options))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        run = self._run
        run.start()
        try:
            result = await self.next.execute_workflow(input)
        except ActivityError as exc:
            deadline = workflow_deadline()
            if deadline is None:
                raise
            step = exc.activity_type or ""
            if (cut := _ours(exc)) is not None:  # the activity was cut at the run's deadline
                run.terminal(step, cut.message, "timeout", exc)
            left = deadline - self.options.reserve - workflow.time()
            if not _timed_out(exc) and left > 0:
                raise
            # Temporal timed the activity out at the budget we gave it (a hung or dead worker),
            # or its retries ran out of it: the run ends in the named terminal.
            message = f"deadline_exceeded: activity {step} timed out at its budget"
            run.terminal(step, message, "timeout", exc)
        except ApplicationError as exc:  # an activity not scheduled for want of time
            details = exc.details[0] if exc.details else None
            if exc.type != DEADLINE_EXCEEDED or not isinstance(details, Mapping):
                raise
            if "deadline_outcome" in details:
                raise
            run.terminal(str(details.get("step")), exc.message, "skipped", exc)
        run.completed()
        return result


class DeadlineInterceptor(Interceptor):
    """A Temporal worker interceptor: every activity's timeouts from the workflow's one deadline.

    `reserve` is kept back from each activity for the workflow to finish; an activity whose budget
    is below `min_viable` is not scheduled; `heartbeat` is the heartbeat timeout given to activities
    that set none (a user's own is kept when shorter, as every user option is a ceiling), which
    then heartbeat on a timer. An activity's own heartbeat timeout is its stall limit: it
    heartbeats only on its step's progress and is cut as `"Stalled"` at it (Temporal retries it).
    """

    def __init__(
        self, *, reserve: float = 0.25, min_viable: float = 0.1, heartbeat: float = 2.0
    ) -> None:
        self._options = _Options(reserve=reserve, min_viable=min_viable, heartbeat=heartbeat)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Run each activity under the deadline its workflow sent in the headers."""
        return _ActivityInbound(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        """Give each workflow an outbound interceptor that plans its activities' timeouts."""
        return type("DeadlineInbound", (_Inbound,), {"options": self._options})
