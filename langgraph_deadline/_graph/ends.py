"""Runs that end without LangGraph finishing them: a resume that comes after the deadline, a run
drained because a step ran out, and a run the deadline cancelled as a whole (the backstop).

One module because these ends share one way of reading the checkpoint and writing the outcome,
the records and the answers to open tool calls back to it."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.messages import RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import RunControl
from langgraph.types import Command, Overwrite

from .._core.records import Outcome, StepRecord, Terminal
from .._core.tracker import RUN_KEY, RunTracker
from .messages import answer_open_calls, ending_messages, is_ending, messages_of
from .resume import akeep_deadline, keep_deadline, saved
from .state import RUN_OVER
from .terminal import emit_run_outcome, exceeded, outcome_from

if TYPE_CHECKING:
    from .graph import DeadlineRuns

__all__ = [
    "afinal_state",
    "agranted",
    "akeep_records",
    "assemble",
    "final_state",
    "granted",
    "keep_records",
    "too_late",
    "ended_in_state",
]

log = logging.getLogger("langgraph_deadline")
_PERSIST = "langgraph_deadline: write the outcome"


def too_late(graph: DeadlineRuns, run: RunTracker, input: Any) -> Any:
    """A new run whose deadline had passed before it started does not start: no node runs,
    nothing is written (a checkpoint stays as it was). Returns what the caller gets (graphs
    without deadline fields raise), or None to go on."""
    d = run.deadline
    if d is None or not d.expired:
        return None
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        reason="the run's deadline had passed before it started: nothing was run",
        elapsed_ms=0.0,
    )
    run.outcome = outcome
    emit_run_outcome(run, outcome)
    state = (
        {k: v for k, v in input.items() if k not in _FIELDS} if isinstance(input, Mapping) else {}
    )
    if not graph.deadline_settings.has_fields:
        raise exceeded(outcome, d, state if graph.deadline_settings.has_state else None)
    return {**state, "deadline": d.timestamp, "deadline_outcome": outcome, "deadline_trace": []}


_FIELDS = frozenset({"deadline", "deadline_outcome", "deadline_trace"})


def ended_in_state(values: Any) -> bool:
    """True when a state says its run ended early (a sub-agent, or a node in a subgraph, wrote
    the outcome) though no step of this graph ran out."""
    outcome = values.get("deadline_outcome") if isinstance(values, Mapping) else None
    return isinstance(outcome, Outcome) and outcome.terminal is not Terminal.COMPLETED


def _clean(cfg: RunnableConfig) -> RunnableConfig:
    """The run's config for a call of our own: no run tracker, no callbacks of the caller."""
    return {
        **cfg,
        "callbacks": None,
        "configurable": {k: v for k, v in cfg.get("configurable", {}).items() if k != RUN_KEY},
    }


def _persist_control() -> RunControl:
    # A run that applies a `Command(update=...)` and drains before its first task: LangGraph
    # keeps the update as writes on the current checkpoint, its pending tasks untouched.
    control = RunControl()
    control.request_drain(_PERSIST)
    return control


def _read(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Any:
    if not graph.deadline_settings.has_state:
        return None
    if not saved(graph, cfg):
        return run.latest
    try:
        return graph.get_state(_clean(cfg)).values
    except Exception:
        return run.latest


async def _aread(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Any:
    if not graph.deadline_settings.has_state:
        return None
    if not saved(graph, cfg):
        return run.latest
    try:
        return (await graph.aget_state(_clean(cfg))).values
    except Exception:
        return run.latest


def _write(graph: DeadlineRuns, cfg: RunnableConfig, update: dict[str, Any]) -> None:
    if not (update and saved(graph, cfg)):
        return
    with _writing():
        # LangGraph's own stream, not ours: this run must not be taken for a user's resume.
        for _ in CompiledStateGraph.stream(
            graph, Command(update=update), _clean(cfg), control=_persist_control()
        ):
            pass


async def _awrite(graph: DeadlineRuns, cfg: RunnableConfig, update: dict[str, Any]) -> None:
    if not (update and saved(graph, cfg)):
        return
    with _writing():
        async for _ in CompiledStateGraph.astream(
            graph, Command(update=update), _clean(cfg), control=_persist_control()
        ):
            pass


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    """The drain that ends our writing run is its normal end; any other error is logged: the
    caller still gets the outcome."""
    try:
        yield
    except GraphDrained:
        pass
    except Exception:
        log.warning("could not write the deadline outcome to the checkpoint", exc_info=True)


def final_state(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, why: str | None) -> Any:
    """The state a run that ended early returns (see `assemble`). With a checkpointer the latest
    state is read from it (it holds the results of the steps that finished in the cut
    superstep), and the outcome, the records and the reply are written to it."""
    state, update = assemble(graph, run, _read(graph, run, cfg), why)
    run.final_news = bool(update)
    _write(graph, cfg, update)
    keep_deadline(graph, run, cfg)
    return _returned(graph, run, state)


async def afinal_state(
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, why: str | None
) -> Any:
    """`final_state`, reading and writing the checkpoint asynchronously."""
    state, update = assemble(graph, run, await _aread(graph, run, cfg), why)
    run.final_news = bool(update)
    await _awrite(graph, cfg, update)
    await akeep_deadline(graph, run, cfg)
    return _returned(graph, run, state)


def keep_records(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> None:
    """A run that failed (an error that is not the deadline's): its step records are written to
    the checkpoint, its pending steps left as they are for a resume after a fix."""
    if graph.deadline_settings.has_fields and saved(graph, cfg) and run.records:
        _write(graph, cfg, _records_update(run, _read(graph, run, cfg)))


async def akeep_records(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> None:
    """`keep_records`, asynchronously."""
    if graph.deadline_settings.has_fields and saved(graph, cfg) and run.records:
        await _awrite(graph, cfg, _records_update(run, await _aread(graph, run, cfg)))


def _missing(run: RunTracker, values: Mapping[str, Any]) -> list[StepRecord]:
    known = list(values.get("deadline_trace") or [])
    return [r for r in run.records if r not in known]


def _records_update(run: RunTracker, latest: Any) -> dict[str, Any]:
    values: Mapping[str, Any] = latest if isinstance(latest, Mapping) else {}
    missing = _missing(run, values)
    # Plain data, as the fields' channels checkpoint it (LangGraph stores these writes as
    # they are, and a strict msgpack loader refuses our classes).
    return {"deadline_trace": [r.to_dict() for r in missing]} if missing else {}


def _returned(graph: DeadlineRuns, run: RunTracker, state: dict[str, Any]) -> Any:
    if not graph.deadline_settings.has_fields:
        assert run.outcome is not None  # set by `assemble`
        raise exceeded(
            run.outcome, run.deadline, state if graph.deadline_settings.has_state else None
        )
    return state


def assemble(
    graph: DeadlineRuns, run: RunTracker, latest: Any, why: str | None
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
    if messages is not None:
        owed = list(run.owed)
        if run.backstop_fired:
            # The run was cancelled as a whole while a step was answering tool calls: they are
            # answered here, as that step would have, so the history stays valid for the next
            # turn (and, marked as ending messages, a grant removes them and runs the step).
            owed += answer_open_calls(messages, run.records)
        closing = settings.closing_message and settings.reserve > 0
        shown, stored = ending_messages(
            messages, owed, outcome, closing=closing, partial=run.partial
        )
        if stored:
            state["messages"] = shown
            update["messages"] = stored
    if settings.has_fields:
        state["deadline_outcome"] = outcome
        state["deadline_trace"] = [*(values.get("deadline_trace") or []), *_missing(run, values)]
        if written is None:
            update["deadline_outcome"] = outcome.to_dict()
            update["deadline"] = RUN_OVER  # the next run's deadline replaces this one
        update.update(_records_update(run, values))
    return state, update


def granted(graph: DeadlineRuns, cfg: RunnableConfig, input: Any) -> Any:
    """`input`; a grant of more time (`Command(update=deadline_input(s))`) on a thread whose last
    run ran out also removes the messages that ended that run (`ENDING`: the cut step's owed
    answers, the closing reply), so that the cut step, still pending, runs again on the state
    it would have seen (docs/concepts.md, rule 3)."""
    if not _removable(graph, cfg, input):
        return input
    try:
        values = graph.get_state(_clean(cfg)).values
    except Exception:
        return input
    return _superseding(input, values)


async def agranted(graph: DeadlineRuns, cfg: RunnableConfig, input: Any) -> Any:
    """`granted`, reading the checkpoint asynchronously."""
    if not _removable(graph, cfg, input):
        return input
    try:
        values = (await graph.aget_state(_clean(cfg))).values
    except Exception:
        return input
    return _superseding(input, values)


def _removable(graph: DeadlineRuns, cfg: RunnableConfig, input: Any) -> bool:
    """A grant, a thread to read, and a `messages` field whose reducer removes (`add_messages`)."""
    if not isinstance(input, Command) or not isinstance(input.update, Mapping):
        return False
    if not isinstance(input.update.get("deadline"), Overwrite):
        return False
    channel = graph.channels.get("messages")
    return saved(graph, cfg) and getattr(channel, "operator", None) is add_messages


def _superseding(grant: Command[Any], values: Any) -> Command[Any]:
    ids = [m.id for m in messages_of(values) or [] if is_ending(m) and m.id]
    update = grant.update
    if not ids or not isinstance(update, Mapping):
        return grant
    given = update.get("messages")
    more = [] if given is None else (list(given) if isinstance(given, list) else [given])
    gone: list[Any] = [RemoveMessage(id=i) for i in ids]
    return dataclasses.replace(grant, update={**update, "messages": [*gone, *more]})
