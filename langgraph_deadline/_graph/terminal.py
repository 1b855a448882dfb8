"""How a run ended: its `Outcome` from what it returned or raised, told to the observers once."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from typing import Any

from langgraph.errors import GraphRecursionError, NodeTimeoutError

from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.observe import RunEvent, emit_run
from .._core.plan import RunTracker
from .._core.records import Outcome, Terminal

__all__ = [
    "emit_run_outcome",
    "origin_of",
    "exceeded",
    "final_outcome",
    "outcome_from",
    "raised",
    "reraise_with_state",
    "tell_run_ended",
    "terminal_of",
]

log = logging.getLogger("langgraph_deadline")


def raised(exc: BaseException) -> Outcome:
    """The outcome of a run that ended by raising (or whose consumer gave up)."""
    terminal = Terminal.CANCELLED if isinstance(exc, GeneratorExit) else terminal_of(exc)
    return Outcome(terminal=terminal or Terminal.FAILED, reason=type(exc).__name__)


def exceeded(outcome: Outcome, deadline: Deadline | None, state: Any) -> DeadlineExceeded:
    """What a graph without deadline fields raises: the outcome, and the partial state."""
    return DeadlineExceeded(
        outcome.reason, deadline=deadline, step=outcome.step, outcome=outcome, state=state
    )


def final_outcome(run: RunTracker, state: Any) -> Outcome | None:
    """The outcome of a run that returned normally: the early end in its state (a sub-agent's,
    a subgraph's), else completed, in this run's time (None while it is paused on an
    interrupt)."""
    if isinstance(state, Mapping) and isinstance(state.get("deadline_outcome"), Outcome):
        found: Outcome = state["deadline_outcome"]
        if not found.ok:
            return found
    if run.outcome is not None:
        return run.outcome
    if run.interrupted:
        return None
    elapsed = round((run.clock_now() - run.started) * 1000.0, 3)
    return Outcome(terminal=Terminal.COMPLETED, elapsed_ms=elapsed)


def outcome_from(run: RunTracker, default_reason: str | None) -> Outcome:
    """A `deadline_exceeded` outcome naming the steps of this run that ran out."""
    steps = sorted({r.name for r in run.records if r.status.ran_out})
    step = ", ".join(steps) if steps else None
    if default_reason is None:
        default_reason = f"{step} ran out of budget" if step else "the deadline passed"
    elapsed = (run.clock_now() - run.started) * 1000.0
    return Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=step,
        reason=default_reason,
        elapsed_ms=round(elapsed, 3),
    )


def emit_run_outcome(run: RunTracker, outcome: Outcome | None) -> None:
    """Tell the observers how the run ended, once (`tell_run_ended`)."""
    if outcome is None or run.emitted:
        return
    run.emitted = True
    tell_run_ended(
        RunEvent(
            outcome=outcome,
            run_id=run.run_id,
            started_at=run.started_at,
            deadline_at=run.deadline.timestamp if run.deadline else None,
            reserve_s=run.reserve,
        ),
        run.origin,
    )


def tell_run_ended(event: RunEvent, origin: tuple[tuple[str, str], ...] = ()) -> None:
    """A run's end, told to the observers; one that did not complete is also logged by the
    `langgraph_deadline` logger (a server's log says its runs succeeded): a WARNING when it ran
    out of time or steps, INFO when it was cancelled or failed (the caller already knows: the
    error or the cancellation reached it). `origin`: the framework's names for the run."""
    if not event.outcome.ok:
        _log_outcome(event.run_id, origin, event.outcome)
    emit_run(event)


def origin_of(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The framework's names for a run, from its config: LangGraph's (and LangGraph Server's,
    LangSmith's) `run_id`, and the `thread_id`, when given."""
    configurable = config.get("configurable") or {}
    found = (("run_id", config.get("run_id")), ("thread_id", configurable.get("thread_id")))
    return tuple((key, str(value)) for key, value in found if value is not None)


def _log_outcome(run_id: str, origin: tuple[tuple[str, str], ...], outcome: Outcome) -> None:
    """One line for a run that did not complete: its ids, terminal, step and reason (nothing is
    built when the logger would drop it: a burst of runs cut together pays no logging)."""
    level = (
        logging.INFO
        if outcome.terminal in (Terminal.CANCELLED, Terminal.FAILED)
        else logging.WARNING
    )
    if not log.isEnabledFor(level):
        return
    names = dict(origin)
    notes = [f"{key}={value}" for key, value in origin if key != "run_id"]
    if "run_id" in names:  # the framework's id first: the one its own log shows
        notes.append(f"deadline run {run_id}")
    log.log(
        level,
        "run %s ended %s%s%s: %s%s",
        names.get("run_id", run_id),
        outcome.terminal.value,
        f" at {outcome.step}" if outcome.step else "",
        "" if outcome.elapsed_ms is None else f" after {outcome.elapsed_ms:.0f} ms",
        outcome.reason or "no reason given",
        f" ({'; '.join(notes)})" if notes else "",
        extra={
            "deadline_run_id": run_id,
            "deadline_terminal": outcome.terminal.value,
            "deadline_step": outcome.step,
            "deadline_reason": outcome.reason,
            "deadline_elapsed_ms": outcome.elapsed_ms,
            **{f"deadline_{key}": value for key, value in origin},
        },
    )


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")  # trio's Cancelled, when trio runs this (never imported here)
    return trio is not None and isinstance(exc, trio.Cancelled)


def terminal_of(result: BaseException | Mapping[str, Any] | None) -> Terminal | None:
    """The `Terminal` of a run, from what `invoke` returned or the exception it raised.

    `DeadlineExceeded`, any other `TimeoutError` (LangGraph's `step_timeout`) and LangGraph's
    `NodeTimeoutError` → `DEADLINE_EXCEEDED`; a cancellation → `CANCELLED`; LangGraph's
    recursion limit → `STEP_LIMIT`; any other exception → `FAILED`; a returned state → its
    `deadline_outcome`, or `COMPLETED`. A state paused on an interrupt has not ended: `None`.
    `None` (a graph with no output) is `COMPLETED`.

    Raises:
        TypeError: `result` is neither a state mapping, an exception nor None.
    """
    if result is None:
        return Terminal.COMPLETED
    if not isinstance(result, BaseException | Mapping):
        raise TypeError(
            "terminal_of() takes what a run returned (a state mapping) or the exception it "
            f"raised, got {type(result).__name__}: {result!r}"
        )
    if isinstance(result, DeadlineExceeded):
        return result.outcome.terminal
    if isinstance(result, NodeTimeoutError | TimeoutError):
        return Terminal.DEADLINE_EXCEEDED
    if isinstance(result, BaseException):
        if _is_cancellation(result):
            return Terminal.CANCELLED
        if isinstance(result, GraphRecursionError):
            return Terminal.STEP_LIMIT
        return Terminal.FAILED
    outcome = result.get("deadline_outcome")
    if isinstance(outcome, Outcome):
        return outcome.terminal
    return None if "__interrupt__" in result else Terminal.COMPLETED


def reraise_with_state(exc: DeadlineExceeded, run: RunTracker) -> None:
    """Re-raise `exc`; one that carries no state yet is raised again, complete, with the run's
    latest state (never set on the error after it was raised)."""
    if exc.state is not None:
        raise exc
    raise DeadlineExceeded(
        str(exc),
        deadline=exc.deadline,
        step=exc.step,
        outcome=exc.outcome,
        scopes=exc.scopes,
        state=run.latest,
    ) from exc
