"""`Call`: one call of a retried function, its attempts, their records, the decisions between them.

Nothing refreshes the budget: an attempt starts only if it, and the backoff before it, fit in what
is left of the deadline in force when it is planned.
"""

from __future__ import annotations

import time

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.errors import GraphBubbleUp

from .._core.context import current_deadline, current_scopes
from .._core.deadline import Deadline, earliest
from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, RunTracker, current_parent, run_from_config
from .._core.records import StepStatus
from .._core.step import record_child
from .policy import Policy
from .retry_after import retry_after

__all__ = ["Call", "current_run", "deadline_for"]


def current_run() -> RunTracker | None:
    """The `with_deadlines` run this call belongs to, when it runs inside one."""
    return run_from_config(var_child_runnable_config.get())


def deadline_for(run: RunTracker | None) -> Deadline | None:
    """The deadline in force: the earlier of the one in context and the run's."""
    return earliest(current_deadline(), run.deadline if run is not None else None)


class Call:
    """One call of a retried function: plan an attempt (`begin`), then record how it ended
    (`completed`, or `failed`, which decides whether and when the next one starts)."""

    __slots__ = ("last", "name", "policy", "run", "sync")

    def __init__(self, policy: Policy, name: str, *, sync: bool) -> None:
        self.policy = policy
        self.name = name
        self.sync = sync
        self.run = current_run()
        self.last: BaseException | None = None

    def deadline(self) -> Deadline | None:
        return deadline_for(self.run)

    def plan(self, attempt: int, d: Deadline | None) -> Plan:
        left = None if d is None else d.remaining()
        return Plan(
            name=self.name,
            kind=self.policy.kind,
            attempt=attempt,
            deadline=d,
            remaining=left,
            cap=None,
            budget=left,
            min_viable=self.policy.min_attempt,
            started=time.monotonic(),
            sync=self.sync,
            parent=current_parent(),
        )

    def record(self, plan: Plan, status: StepStatus, source: str | None = None) -> None:
        rec = plan.record(status, cancel_source=source)
        record_child(rec, self.run)
        if self.policy.on_attempt is not None:
            self.policy.on_attempt(rec)

    def begin(self, attempt: int) -> Plan:
        """Plan an attempt; refuse it (`DeadlineExceeded`) when the deadline leaves no room."""
        d = self.deadline()
        plan = self.plan(attempt, d)
        if d is None:
            return plan
        left = d.remaining()
        if attempt == 1 and (left <= 0.0 or left < self.policy.min_attempt):
            self.record(plan, StepStatus.SKIPPED)
            need = f"min_attempt {self.policy.min_attempt:g}s" if left > 0.0 else "any time"
            raise self.exceeded(d, f"not started: {left:.3f}s left, less than {need}")
        if left <= 0.0:  # the backoff slept past a deadline it fitted in (clock overshoot)
            self.record(plan, StepStatus.SKIPPED)
            why = f"the deadline passed during the backoff before attempt {attempt}"
            raise self.exceeded(d, why) from self.last
        return plan

    def completed(self, plan: Plan) -> None:
        self.record(plan, StepStatus.COMPLETED)

    def failed(self, plan: Plan, exc: BaseException) -> float | None:
        """Record a failed attempt and decide: the seconds to sleep before the next, or None to
        re-raise `exc`. Raises `DeadlineExceeded` when the next attempt cannot fit."""
        if isinstance(exc, GraphBubbleUp):  # an interrupt on its way to LangGraph: not a failure
            return None
        self.record(plan, *_ended(plan, exc))
        if plan.attempt >= self.policy.attempts or not _retryable(exc, self.policy):
            return None
        self.last = exc
        header = retry_after(exc)
        delay = self.policy.backoff(plan.attempt) if header is None else header
        d = self.deadline()
        if d is not None:
            left = d.remaining()
            if not delay + self.policy.min_attempt < left:
                self.record(self.plan(plan.attempt + 1, d), StepStatus.SKIPPED)
                what = "the server's Retry-After" if header is not None else "backoff"
                raise self.exceeded(
                    d,
                    f"attempt {plan.attempt} failed ({type(exc).__name__}); attempt "
                    f"{plan.attempt + 1} not started: {what} of {delay:.3f}s"
                    f"{_min_attempt(self.policy)} does not fit in the {left:.3f}s left",
                ) from exc
        if header is not None and header > self.policy.max_backoff:
            return None  # the server asks for a longer pause than this policy ever takes
        return delay

    def exceeded(self, d: Deadline, why: str) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"deadline exceeded in {self.name}: {why}",
            deadline=d,
            step=self.name,
            scopes=current_scopes(),
        )


def _ended(plan: Plan, exc: BaseException) -> tuple[StepStatus, str | None]:
    """How an attempt that raised `exc` ended, and who cut it short (None: nobody)."""
    expired = plan.deadline is not None and plan.deadline.expired
    if isinstance(exc, DeadlineExceeded) or (isinstance(exc, Exception) and expired):
        return StepStatus.TIMED_OUT, "run_deadline" if expired else None
    if isinstance(exc, Exception):
        return StepStatus.FAILED, None
    if expired:  # a cancellation (or KeyboardInterrupt...) once the deadline passed
        return StepStatus.TIMED_OUT, "run_deadline"
    return StepStatus.CANCELLED, "caller"


def _retryable(exc: BaseException, policy: Policy) -> bool:
    """Only plain errors `on` accepts: never a deadline, a cancellation or an interrupt."""
    if not isinstance(exc, Exception) or isinstance(exc, DeadlineExceeded | GraphBubbleUp):
        return False
    return bool(policy.accepts(exc))


def _min_attempt(policy: Policy) -> str:
    return f" + min_attempt {policy.min_attempt:g}s" if policy.min_attempt else ""
