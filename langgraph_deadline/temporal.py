"""Temporal: one deadline per workflow run, carried to every LangGraph node or task activity.

Add `DeadlineInterceptor()` to the worker's interceptors (beside `temporalio.langgraph`'s
`LangGraphPlugin`) and start the workflow with `memo=deadline_memo(timeout)`. The deadline is an
absolute timestamp written once into the workflow's start event, so a replay, a worker restart or a
continue-as-new that copies the memo sees the same one. Workflow-side code reads time only through
`workflow.time()`. Every activity gets `schedule_to_close = min(its own, left - reserve)`, covering
all its retries; below `min_viable` it is not scheduled and the workflow fails `deadline_exceeded`.
Inside the activity the step runs under the library's deadline and heartbeats on its own.
"""

from __future__ import annotations

import asyncio
import builtins
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

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

__all__ = ["DEADLINE_EXCEEDED", "DeadlineInterceptor", "deadline_memo", "workflow_deadline"]

MEMO_KEY = "langgraph_deadline"
"""The memo key holding the run's absolute deadline (seconds since the epoch)."""
DEADLINE_EXCEEDED = "DeadlineExceeded"
"""The `ApplicationError.type` a run ends with when its deadline leaves a step no time."""
_HEADER = "langgraph-deadline"
_GRACE = 0.1


def deadline_memo(timeout: float, *, now: float | None = None) -> dict[str, float]:
    """The memo to start a workflow with: its deadline, `timeout` seconds from now, set once."""
    return {MEMO_KEY: (_time.time() if now is None else now) + timeout}


def workflow_deadline() -> float | None:
    """Inside a workflow: the run's deadline (epoch seconds) from its start event, or None."""
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


def _plan(input: StartActivityInput, deadline: float, options: _Options) -> StartActivityInput:
    """The activity's timeouts from what is left; raise the named terminal when it cannot fit."""
    left = deadline - workflow.time()
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
    headers = {
        **input.headers,
        # the step's own end: a little before Temporal's own timeout, so the step is cut (and
        # says so) first
        _HEADER: _default_converter().payload_converter.to_payloads([end])[0],
    }
    return replace(
        input,
        schedule_to_close_timeout=_capped(input.schedule_to_close_timeout, budget),
        start_to_close_timeout=_capped(input.start_to_close_timeout, budget),
        heartbeat_timeout=_capped(input.heartbeat_timeout, budget, default=options.heartbeat),
        retry_policy=replace(retry, non_retryable_error_types=non_retryable),
        headers=headers,
    )


def _named(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == DEADLINE_EXCEEDED:
            return True
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return False


def _deadline_of(headers: Mapping[str, Payload]) -> float | None:
    payload = headers.get(_HEADER)
    if payload is None:
        return None
    value = _default_converter().payload_converter.from_payloads([payload])[0]
    return float(value)


async def _heartbeat(every: float) -> None:
    while True:
        activity.heartbeat()
        await anyio.sleep(every)


class _ActivityInbound(ActivityInboundInterceptor):
    """Runs the activity under the run's deadline, heartbeating so cancellation reaches it."""

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        deadline = _deadline_of(input.headers)
        if deadline is None:
            return await self.next.execute_activity(input)
        info = activity.info()
        beat_every = _seconds(info.heartbeat_timeout) or 1.0
        # the heartbeat runs beside the step (not around it in a task group, which would wrap the
        # step's own error in an ExceptionGroup and change what Temporal's retry policy sees)
        beat = asyncio.ensure_future(_heartbeat(max(beat_every / 3, 0.05)))
        try:
            with deadline_scope(Deadline.at(deadline), name=info.activity_type):
                return await self.next.execute_activity(input)
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


class DeadlineInterceptor(Interceptor):
    """A Temporal worker interceptor: every activity's timeouts from the workflow's one deadline.

    `reserve` is kept back from each activity for the workflow to finish; an activity whose budget
    is below `min_viable` is not scheduled; `heartbeat` is the heartbeat timeout given to activities
    that set none (a user's own is kept when shorter, as every user option is a ceiling).
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
        options = self._options

        class _Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
                deadline = workflow_deadline()
                if deadline is not None:
                    input = _plan(input, deadline, options)
                return self.next.start_activity(input)

        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_Outbound(outbound))

            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                try:
                    return await self.next.execute_workflow(input)
                except ActivityError as exc:
                    deadline = workflow_deadline()
                    if deadline is None or _named(exc):
                        raise
                    left = deadline - options.reserve - workflow.time()
                    out_of_time = exc.retry_state == RetryState.TIMEOUT
                    if not (out_of_time or isinstance(exc.cause, TimeoutError)) and left > 0:
                        raise
                    # Temporal timed the activity out at the budget we gave it (a hung or dead
                    # worker), or its retries ran out of it: the run ends in the named terminal.
                    raise ApplicationError(
                        f"deadline_exceeded: activity {exc.activity_type} timed out at its budget",
                        {"step": exc.activity_type, "outcome": "timeout"},
                        type=DEADLINE_EXCEEDED,
                        non_retryable=True,
                    ) from exc

        return _Inbound
