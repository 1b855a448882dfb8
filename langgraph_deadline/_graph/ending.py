"""How a node's step ends: completed (its update, plus its records), or ended early by the
deadline (the outcome in state, or `DeadlineExceeded` for state without deadline fields, and the
run drains so no further node body runs)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langgraph.types import RetryPolicy

from .._core.errors import DeadlineExceeded
from .._core.plan import Plan
from .._core.record import commit_record
from .._core.records import Outcome, StepRecord, StepStatus, Terminal
from .._core.run import StepResult
from .._core.tracker import RunTracker
from .inputs import plain_input
from .seams import drain
from .settings import NodeSettings
from .state import RUN_OVER, state_fields, with_trace

__all__ = ["already_ended", "finish", "has_fields", "skipped"]


def already_ended(state: Any) -> bool:
    """True when the run has its terminal already: later node bodies do not run."""
    fields = state_fields(state)
    if fields is None:
        return False
    outcome = fields.get("deadline_outcome")
    return isinstance(outcome, Outcome) and outcome.terminal is not Terminal.COMPLETED


def has_fields(state: Any) -> bool:
    """True when the state carries the deadline fields (`DeadlineState`)."""
    fields = state_fields(state)
    return fields is not None and "deadline_trace" in fields


def ended(
    state: Any,
    result: StepResult[Any],
    run: RunTracker | None,
    children: Sequence[StepRecord] = (),
    reason: str | None = None,
) -> Any:
    """The node's answer when its budget ran out: the outcome in state, or the error."""
    rec = result.record
    drain()
    if reason is None:
        reason = rec.ran_out_reason()
    elapsed = None if run is None else round((time.monotonic() - run.started) * 1000.0, 3)
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED, step=rec.name, reason=reason, elapsed_ms=elapsed
    )
    if run is not None and run.outcome is None:
        run.outcome = outcome
    if has_fields(state):
        return {
            "deadline_outcome": outcome,
            "deadline_trace": [*children, rec],
            "deadline": RUN_OVER,
        }
    err = result.error
    if isinstance(err, DeadlineExceeded):
        raise DeadlineExceeded(
            str(err), deadline=err.deadline, step=err.step, outcome=outcome, scopes=err.scopes
        ) from err
    raise DeadlineExceeded(reason, step=rec.name, outcome=outcome) from err


def skipped(plan: Plan, state: Any, run: RunTracker | None) -> Any:
    """A node not started for lack of budget: recorded `skipped`, and the run ends."""
    record = plan.record(StepStatus.SKIPPED)
    commit_record(record, run)
    return ended(state, StepResult(record), run)


def finish(
    state: Any,
    result: StepResult[Any],
    children: list[StepRecord],
    plan: Plan,
    settings: NodeSettings,
    run: RunTracker | None,
) -> Any:
    """The node's return value: its update with its records, the early end, or its own error."""
    status = result.status
    if status is StepStatus.COMPLETED:
        value = plain_input(result.value)  # a node may bring the deadline forward, as plain data
        return with_trace(value, [*children, result.record]) if has_fields(state) else value
    if status.cut:
        return ended(state, result, run, children)
    assert result.error is not None
    if (why := _retry_would_not_fit(result.error, plan, settings, run)) is not None:
        return ended(state, result, run, children, why)
    raise result.error


def _retry_would_not_fit(
    error: BaseException, plan: Plan, settings: NodeSettings, run: RunTracker | None
) -> str | None:
    """Why LangGraph's retry of this failed attempt must not start, or None if it may.

    The backoff is computed as LangGraph does, with its jitter at the worst case (+1 s).
    """
    if settings.retry is None or plan.deadline is None or not isinstance(error, Exception):
        return None
    # A RetryPolicy is a NamedTuple (a Sequence itself): tell one policy from a list of them.
    retry = settings.retry
    policies = (retry,) if isinstance(retry, RetryPolicy) else tuple(retry)
    policy = next((p for p in policies if _retries_on(p, error)), None)
    if policy is None or plan.attempt >= policy.max_attempts:
        return None
    backoff = min(
        policy.max_interval, policy.initial_interval * policy.backoff_factor ** (plan.attempt - 1)
    ) + (1.0 if policy.jitter else 0.0)
    reserve = settings.reserve if settings.reserve is not None else (run.reserve if run else 0.0)
    left = plan.deadline._budget(None, reserve)
    if backoff + settings.min_viable < left:
        return None
    return (
        f"{plan.name} failed ({type(error).__name__}) and its retry would not fit: "
        f"{backoff:.2f} s of backoff plus {settings.min_viable:.2f} s of work, {left:.2f} s left"
    )


def _retries_on(policy: Any, error: Exception) -> bool:
    retry_on = policy.retry_on
    if isinstance(retry_on, type):
        return isinstance(error, retry_on)
    if isinstance(retry_on, Sequence):
        return isinstance(error, tuple(retry_on))
    return bool(retry_on(error))
