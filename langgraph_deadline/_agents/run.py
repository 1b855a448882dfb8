"""What the agent middleware keeps about a run: the state fields it adds, when the run started,
and the record of a step that did not start."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any, Final, NotRequired, cast

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import PrivateStateAttr

from .._core.plan import Plan
from .._core.record import record_child
from .._core.records import StepRecord, StepStatus
from .._graph.state import DeadlineState

__all__ = ["RUN", "DeadlineAgentState", "elapsed_ms", "fields", "skipped"]

RUN: Final = "deadline_run"
"""The private state field: which deadline the middleware stamped, and when the run started."""


class DeadlineAgentState(AgentState[Any], DeadlineState):
    """`AgentState` plus the deadline fields (`deadline`, `deadline_outcome`, `deadline_trace`).

    `DeadlineMiddleware` adds it to the agent for you. `deadline_run` is private bookkeeping
    (which deadline this middleware stamped, when the run started, whether it runs inside a
    parent graph or joined a turn in progress); it is neither input nor output.
    """

    deadline_run: NotRequired[Annotated[dict[str, float | bool | None] | None, PrivateStateAttr]]


def fields(state: AgentState[Any]) -> Mapping[str, Any]:
    """The agent state with the fields this middleware adds (`DeadlineAgentState`)."""
    return cast("Mapping[str, Any]", state)


def elapsed_ms(state: Mapping[str, Any]) -> float | None:
    """The run's wall time so far, when the middleware saw it start."""
    run = state.get(RUN) or {}
    started = run.get("started")
    if not isinstance(started, float):
        return None
    return round((time.time() - started) * 1000.0, 3)


def skipped(plan: Plan) -> StepRecord:
    """The record of a step not started for lack of time, reported to the observers."""
    record = plan.record(StepStatus.SKIPPED)
    record_child(record, None)
    return record
