"""How a node's step ends: completed (its update, plus its records), or ended early by the
deadline (the outcome in state, or `DeadlineExceeded` for state without deadline fields, and the
run drains so no further node body runs)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphDrained

from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, RunTracker
from .._core.record import commit_record
from .._core.records import Outcome, StepRecord, StepStatus, Terminal
from .._core.run import StepResult
from .answers import close_pending
from .inputs import plain_input
from .messages import open_tool_calls
from .retries import policies, retries_on, would_not_fit
from .seams import DRAIN_REASON, drain, uncached
from .settings import NodeSettings
from .state import RUN_OVER, state_fields, with_trace

__all__ = ["already_ended", "finish", "finish_unbounded", "has_fields", "skipped"]


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


def _traced(state: Any, run: RunTracker | None) -> bool:
    """True when a node's update carries its records: a state with the deadline fields, in a
    run whose entry does not write them all at its end (a hand-built graph)."""
    return (run is None or not run.trace_at_end) and has_fields(state)


def ended(
    state: Any,
    result: StepResult[Any],
    run: RunTracker | None,
    children: Sequence[StepRecord] = (),
    reason: str | None = None,
    finished: Mapping[str, ToolMessage] | None = None,
) -> Any:
    """End the run at this node, which ran out of time. One rule for every kind of node:

    - In a checkpointed run, the node is *not* done: it raises LangGraph's `GraphDrained`, so
      its routers do not run on output it never wrote, siblings in the same superstep finish
      and keep their results (in the checkpoint too), and a resume that grants time runs it
      again. `with_deadlines` turns the drain into the outcome it returns. Open tool calls the
      node was answering are owed an answer each (the results that finished, the model-readable
      timeout for the rest): `with_deadlines` writes them with the outcome (`graph.assemble`),
      marked so that a grant removes them before the node runs again.
    - In a run with no checkpoint (nothing to resume) the node ends its superstep with the
      outcome (and the answers to its open tool calls), so the siblings' results reach the
      returned state; the run drains, and `with_deadlines` keeps the node's routers from
      running (`routes.py`). That update is no result: it is kept out of LangGraph's node
      cache, so the same input runs the node again.
    - Outside `with_deadlines` (a hand-built graph) nothing above the node can turn a drain into
      a return value: a state with the deadline fields gets the outcome written and the run
      drains (LangGraph raises `GraphDrained` if more steps were scheduled); a state without
      them raises `DeadlineExceeded` with the outcome and the state it was given.
    """
    rec = result.record
    if reason is None:
        reason = rec.ran_out_reason()
    err = result.error
    inner = err.step if isinstance(err, DeadlineExceeded) and not result.status.cut else None
    elapsed = None if run is None else round((time.monotonic() - run.started) * 1000.0, 3)
    # Where the time ran out: this node, or the step below it that said so (a downstream
    # service's step, named in its 504; a retried call; a model call).
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=inner or rec.name,
        reason=reason,
        elapsed_ms=elapsed,
    )
    if run is None and not has_fields(state):
        # A hand-built graph (no with_deadlines above it) with no fields to carry the outcome.
        known = err if isinstance(err, DeadlineExceeded) else None
        raise DeadlineExceeded(
            reason,
            deadline=known.deadline if known else None,
            step=outcome.step,
            outcome=outcome,
            scopes=known.scopes if known else (),
            state=state,
        ) from err
    if run is not None and run.outcome is None:
        run.outcome = outcome
    calls = open_tool_calls(state)
    if run is not None and run.resumable:
        if calls:
            run.owed = (*run.owed, *close_pending(calls, rec, finished))
        raise GraphDrained(DRAIN_REASON) from err
    drain()
    uncached()
    update: dict[str, Any] = {}
    if calls:
        update["messages"] = close_pending(calls, rec, finished)
    if has_fields(state):
        update["deadline_outcome"] = outcome
        update["deadline_trace"] = [*children, rec]
        update["deadline"] = RUN_OVER  # the next run's deadline replaces this one
    return update or None


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
    finished: Mapping[str, ToolMessage] | None = None,
) -> Any:
    """The node's return value: its update with its records, the early end, or its own error.

    A `DeadlineExceeded` raised inside the node (a retry or a model call refusing to start, a
    downstream service out of this run's time) ends the run like a cut: it is a deadline end.
    """
    status = result.status
    if status is StepStatus.COMPLETED:
        if any(not _real(r.status) for r in children):
            uncached()  # an answer made of a cut or stale step is no result to replay
        value = plain_input(result.value)  # a node may bring the deadline forward, as plain data
        return with_trace(value, [*children, result.record]) if _traced(state, run) else value
    if status.cut:
        if settings.optional and result.record.cancel_source == "step_cap":
            return dropped(state, result.record, children, finished, run)
        return ended(state, result, run, children, finished=finished)
    err = result.error
    assert err is not None
    if isinstance(err, DeadlineExceeded):
        return ended(state, result, run, children, str(err) or None, finished)
    if (why := _retry_would_not_fit(err, plan, settings, run)) is not None:
        return ended(state, result, run, children, why, finished)
    raise err


def _real(status: StepStatus) -> bool:
    """True for a step that ran to its own end (completed, or failed by itself)."""
    return not (status.ran_out or status is StepStatus.STALE)


def dropped(
    state: Any,
    record: StepRecord,
    children: Sequence[StepRecord],
    finished: Mapping[str, ToolMessage] | None,
    run: RunTracker | None = None,
) -> Any:
    """An optional node cut at its own budget: no update of its own (the open tool calls it was
    answering get their answers), its record in the trace, and the run goes on. A `@task`
    (no state) raises `DeadlineExceeded` to the code that awaits it, which decides: caught, the
    run goes on; not caught, it ends the entrypoint's run as a cut does."""
    if state is None:
        reason = record.ran_out_reason()
        outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step=record.name, reason=reason)
        raise DeadlineExceeded(reason, step=record.name, outcome=outcome)
    update: dict[str, Any] = {}
    if calls := open_tool_calls(state):
        update["messages"] = close_pending(calls, record, finished)
    if _traced(state, run):
        update["deadline_trace"] = [*children, record]
    return update or None


def finish_unbounded(
    state: Any, value: Any, children: list[StepRecord], run: RunTracker | None = None
) -> Any:
    """The update of a node that nothing bounded and that completed: the records of the steps
    inside it, and none of its own (see `NodeStep`)."""
    if any(not _real(r.status) for r in children):
        uncached()
    value = plain_input(value)
    return with_trace(value, children) if children and _traced(state, run) else value


def _retry_would_not_fit(
    error: BaseException, plan: Plan, settings: NodeSettings, run: RunTracker | None
) -> str | None:
    """Why LangGraph's retry of this failed attempt must not start, or None if it may (the rule
    is `retries.would_not_fit`, which the retry loop's guard applies to errors raised around
    the body)."""
    if settings.retry is None or plan.deadline is None or not isinstance(error, Exception):
        return None
    policy = next((p for p in policies(settings.retry) if retries_on(p, error)), None)
    if policy is None:
        return None
    reserve = settings.reserve if settings.reserve is not None else (run.reserve if run else 0.0)
    return would_not_fit(
        policy,
        error,
        name=plan.name,
        attempt=plan.attempt,
        deadline=plan.deadline,
        reserve=reserve,
        min_viable=plan.min_viable,
    )
