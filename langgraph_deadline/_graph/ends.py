"""Runs that end without LangGraph finishing them: a resume that comes after the deadline, a run
drained because a step ran out, and a run the deadline cancelled as a whole (the backstop)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import RunControl
from langgraph.types import Command

from .._core.records import Outcome, Terminal
from .._core.tracker import RUN_KEY, RunTracker
from .messages import closing_reply, messages_of
from .state import deadline_from_state
from .terminal import emit_run_outcome, exceeded, outcome_from

if TYPE_CHECKING:
    from .graph import DeadlineGraph

__all__ = ["afinal_state", "akeep_records", "assemble", "final_state", "keep_records", "late"]

log = logging.getLogger("langgraph_deadline")
_PERSIST = "langgraph_deadline: write the outcome"


def late(graph: DeadlineGraph, snapshot: Any, run: RunTracker) -> Any:
    """A resume after the checkpointed deadline passed does not start: no node body runs,
    and the checkpoint stays as it was, so a resume that grants a new deadline
    (`Command(resume=..., update=deadline_input(s))`) continues where the run paused.
    Returns what the caller gets (graphs without deadline fields raise), or None to go on."""
    values = getattr(snapshot, "values", None)
    d = deadline_from_state(values)
    if d is None or not d.expired:
        return None
    pending = ", ".join(getattr(snapshot, "next", ()) or ()) or None
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=pending,
        reason="resumed after the run's deadline had passed: nothing was run",
        elapsed_ms=0.0,
    )
    emit_run_outcome(run, outcome)
    if not graph.deadline_settings.has_fields:
        raise exceeded(outcome, d, values)
    return {**(values or {}), "deadline_outcome": outcome}


def _clean(cfg: RunnableConfig) -> RunnableConfig:
    """The run's config for a call of our own: no run tracker, no callbacks of the caller."""
    return {
        **cfg,
        "callbacks": None,
        "configurable": {k: v for k, v in cfg.get("configurable", {}).items() if k != RUN_KEY},
    }


def _saved(graph: DeadlineGraph, cfg: RunnableConfig) -> bool:
    return graph.checkpointer is not None and bool(cfg.get("configurable", {}).get("thread_id"))


def _persist_control() -> RunControl:
    # A run that applies a `Command(update=...)` and drains before its first task: LangGraph
    # keeps the update as writes on the current checkpoint, its pending tasks untouched.
    control = RunControl()
    control.request_drain(_PERSIST)
    return control


def final_state(graph: DeadlineGraph, run: RunTracker, cfg: RunnableConfig, why: str | None) -> Any:
    """The state a run that ended early returns (see `assemble`). With a checkpointer the latest
    state is read from it (it holds the results of the steps that finished in the cut
    superstep), and the outcome, the records and the reply are written to it."""
    latest = run.latest
    if _saved(graph, cfg):
        with contextlib.suppress(Exception):
            latest = graph.get_state(_clean(cfg)).values
    state, update = assemble(graph, run, latest, why)
    if update and _saved(graph, cfg):
        try:
            CompiledStateGraph.invoke(
                graph, Command(update=update), _clean(cfg), control=_persist_control()
            )
        except GraphDrained:
            pass
        except Exception:  # the caller still gets the outcome
            log.warning("could not write the deadline outcome to the checkpoint", exc_info=True)
    return _returned(graph, run, state)


async def afinal_state(
    graph: DeadlineGraph, run: RunTracker, cfg: RunnableConfig, why: str | None
) -> Any:
    """`final_state`, reading and writing the checkpoint asynchronously."""
    latest = run.latest
    if _saved(graph, cfg):
        with contextlib.suppress(Exception):
            latest = (await graph.aget_state(_clean(cfg))).values
    state, update = assemble(graph, run, latest, why)
    if update and _saved(graph, cfg):
        try:
            await CompiledStateGraph.ainvoke(
                graph, Command(update=update), _clean(cfg), control=_persist_control()
            )
        except GraphDrained:
            pass
        except Exception:  # the caller still gets the outcome
            log.warning("could not write the deadline outcome to the checkpoint", exc_info=True)
    return _returned(graph, run, state)


def keep_records(graph: DeadlineGraph, run: RunTracker, cfg: RunnableConfig) -> None:
    """A run that failed (an error that is not the deadline's): its step records are written to
    the checkpoint, its pending steps left as they are for a resume after a fix."""
    if not (graph.deadline_settings.has_fields and _saved(graph, cfg) and run.records):
        return
    try:
        known = graph.get_state(_clean(cfg)).values.get("deadline_trace") or []
        missing = [r for r in run.records if r not in known]
        if missing:
            CompiledStateGraph.invoke(
                graph,
                Command(update={"deadline_trace": [r.to_dict() for r in missing]}),
                _clean(cfg),
                control=_persist_control(),
            )
    except GraphDrained:
        pass
    except Exception:
        log.warning("could not write the step records to the checkpoint", exc_info=True)


async def akeep_records(graph: DeadlineGraph, run: RunTracker, cfg: RunnableConfig) -> None:
    """`keep_records`, asynchronously."""
    if not (graph.deadline_settings.has_fields and _saved(graph, cfg) and run.records):
        return
    try:
        known = (await graph.aget_state(_clean(cfg))).values.get("deadline_trace") or []
        missing = [r for r in run.records if r not in known]
        if missing:
            await CompiledStateGraph.ainvoke(
                graph,
                Command(update={"deadline_trace": [r.to_dict() for r in missing]}),
                _clean(cfg),
                control=_persist_control(),
            )
    except GraphDrained:
        pass
    except Exception:
        log.warning("could not write the step records to the checkpoint", exc_info=True)


def _returned(graph: DeadlineGraph, run: RunTracker, state: dict[str, Any]) -> Any:
    if not graph.deadline_settings.has_fields:
        assert run.outcome is not None  # set by `assemble`
        raise exceeded(run.outcome, run.deadline, state)
    return state


def assemble(
    graph: DeadlineGraph, run: RunTracker, latest: Any, why: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state a run that ended early returns, and the update that brings its checkpoint
    there: the run's outcome, every step record of the run, and (with a `reserve`, for a
    messages state) a short reply telling the user the answer is incomplete.

    The step that was cut is not marked done: a resume that grants more time runs it again."""
    values: Mapping[str, Any] = latest if isinstance(latest, Mapping) else {}
    written = values.get("deadline_outcome")
    if isinstance(written, Outcome) and written.terminal is not Terminal.COMPLETED:
        outcome = written
    else:
        outcome = run.outcome or outcome_from(run, why)
    if run.outcome is None:
        run.outcome = outcome
    emit_run_outcome(run, outcome)
    state = dict(values)
    update: dict[str, Any] = {}
    settings = graph.deadline_settings
    messages = messages_of(values)
    if messages is not None and settings.closing_message and settings.reserve > 0:
        reply = closing_reply(messages, outcome)
        state["messages"] = [*messages, reply]
        update["messages"] = [reply]
    if settings.has_fields:
        known = list(values.get("deadline_trace") or [])
        missing = [r for r in run.records if r not in known]
        state["deadline_outcome"] = outcome
        state["deadline_trace"] = [*known, *missing]
        # Plain data, as the fields' channels checkpoint it (LangGraph stores these writes as
        # they are, and a strict msgpack loader refuses our classes).
        if written is None:
            update["deadline_outcome"] = outcome.to_dict()
        update["deadline_trace"] = [r.to_dict() for r in missing]
    return state, update
