"""What the agent middleware keeps about a run: the state fields it adds, when the run started,
the record of a step that did not start, and the run's end told to the observers."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated, Any, Final, NotRequired, cast

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import PrivateStateAttr

from .._core.observe import RunEvent
from .._core.plan import new_run_id, run_from_config
from .._core.records import Outcome
from .._core.step import named_run
from .._graph.chunks import graph_run
from .._graph.run import origin_of, tell_run_ended
from .._graph.seams import running_config
from .._graph.state import DeadlineState

__all__ = [
    "RUN",
    "DeadlineAgentState",
    "elapsed_ms",
    "entry_keeps_trace",
    "fields",
    "run_started",
    "steps_of",
    "tell_ended",
]

RUN: Final = "deadline_run"
"""The private state field: which deadline the middleware stamped, and when the run started."""


class DeadlineAgentState(AgentState[Any], DeadlineState):
    """`AgentState` plus the deadline fields (`deadline`, `deadline_outcome`, `deadline_trace`).

    `DeadlineMiddleware` adds it to the agent for you. `deadline_run` is private bookkeeping
    (which deadline this middleware stamped, when the run started, whether it runs inside a
    parent graph or joined a turn in progress, the run's id and whether it tells its own end);
    it is neither input nor output.
    """

    deadline_run: NotRequired[
        Annotated[dict[str, float | bool | str | None] | None, PrivateStateAttr]
    ]


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


def run_started(
    at: float | None, reserve: float, **notes: bool
) -> dict[str, float | bool | str | None]:
    """The private record of a run that starts now with deadline `at` (epoch seconds) and the
    middleware's `reserve`: its id, the framework's names for it, and `told` when this
    middleware tells its end: not when `with_deadlines` runs the agent (it tells every run's
    end) nor inside a parent graph or a turn in progress (`nested`, `joined`: the parent's run
    is the one that ends)."""
    config = running_config() or {}
    quiet = run_from_config(config) is not None or any(notes.values())
    origin = dict(origin_of(config))
    return {
        "at": at,
        "started": time.time(),
        "id": new_run_id(),
        "reserve": reserve,
        "told": not quiet,
        "lg_run_id": origin.get("run_id"),
        "thread_id": origin.get("thread_id"),
        **notes,
    }


def tell_ended(state: Mapping[str, Any], outcome: Outcome) -> None:
    """A run this middleware keeps on its own ended with `outcome`: told to the observers (and
    logged when it did not complete), as `with_deadlines` tells its runs' ends."""
    run = state.get(RUN) or {}
    if not run.get("told"):
        return
    started, at, reserve = run.get("started"), run.get("at"), run.get("reserve")
    origin = tuple(
        (key, str(value))
        for key, value in (("run_id", run.get("lg_run_id")), ("thread_id", run.get("thread_id")))
        if value is not None
    )
    tell_run_ended(
        RunEvent(
            outcome=outcome,
            run_id=str(run.get("id")),
            started_at=started if isinstance(started, float) else time.time(),
            deadline_at=at if isinstance(at, float) else None,
            reserve_s=reserve if isinstance(reserve, float) else 0.0,
        ),
        origin,
    )


def steps_of(state: Mapping[str, Any]) -> AbstractContextManager[None]:
    """The block's step records name the run this middleware keeps on its own (the one whose
    end it tells), so that its steps and its end are grouped in the observers' events."""
    run = state.get(RUN) or {}
    if not run.get("told"):
        return nullcontext()
    at = run.get("at")
    return named_run(str(run.get("id")), at if isinstance(at, float) else None)


def entry_keeps_trace() -> bool:
    """True when `with_deadlines` runs the agent: its entry writes the run's records at the
    run's end (`GraphRun.trace_at_end`), so the middleware's calls leave theirs out of their
    updates, as its nodes do (they reach the run's records through the node they run in)."""
    run = graph_run(running_config())
    return run is not None and run.trace_at_end
