"""Runs that end without LangGraph finishing them: a run drained because a step ran out, a run
the deadline cancelled as a whole (the backstop), and a run its caller cancelled.

One module because these ends share one way of reading the checkpoint and writing the outcome,
the records and the answers to open tool calls back to it."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
from langchain_core.messages import RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import RunControl
from langgraph.types import Command, Overwrite

from .._core.errors import DeadlineExceeded
from .._core.plan import RUN_KEY, RunTracker
from .._core.records import Outcome, StepRecord, Terminal
from .messages import answer_open_calls, ending_messages, is_ending, messages_of
from .resume import akeep_deadline, aresume, keep_deadline, resume, saved
from .state import RUN_OVER
from .terminal import emit_run_outcome, exceeded, final_outcome, outcome_from

if TYPE_CHECKING:
    from .graph import DeadlineRuns

__all__ = [
    "CANCEL_WRITE_S",
    "afinal_state",
    "agranted",
    "aresumed",
    "akeep_completed",
    "akeep_left",
    "akeep_records",
    "assemble",
    "final_state",
    "granted",
    "keep_completed",
    "keep_left",
    "keep_records",
    "ran_out_at_the_end",
    "resumed",
]

log = logging.getLogger("langgraph_deadline")

CANCEL_WRITE_S: Final = 1.0
"""How long a cancelled run may hold up its cancellation to write its outcome (a checkpointer
write takes milliseconds; a stuck one must not keep a cancelled caller waiting)."""
_PERSIST = "langgraph_deadline: write the outcome"


def ran_out_at_the_end(run: RunTracker) -> bool:
    """True when a run that LangGraph finished ended early all the same: a step ran out at its
    very end, or a sub-agent or a node in a subgraph wrote the outcome into the state."""
    if run.outcome is not None:
        return True
    values = run.latest
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


def _completes(graph: DeadlineRuns, cfg: RunnableConfig, outcome: Outcome | None) -> bool:
    return (
        outcome is not None
        and outcome.ok
        and graph.deadline_settings.has_fields
        and saved(graph, cfg)
    )


def keep_completed(graph: DeadlineRuns, cfg: RunnableConfig, outcome: Outcome | None) -> None:
    """A run that finished (`outcome` completed): with the deadline fields, the outcome is
    written to its checkpoint, which LangGraph's own end leaves without one, so that a thread
    read later tells it from a run cancelled or out of time. (Not from the state's channel:
    LangGraph tells channels a run ends also when `Send` tasks are still to come.)"""
    if outcome is not None and _completes(graph, cfg, outcome):
        _write(graph, cfg, {"deadline_outcome": outcome.to_dict()})


async def akeep_completed(
    graph: DeadlineRuns, cfg: RunnableConfig, outcome: Outcome | None
) -> None:
    """`keep_completed`, asynchronously."""
    if outcome is not None and _completes(graph, cfg, outcome):
        await _awrite(graph, cfg, {"deadline_outcome": outcome.to_dict()})


def _left(run: RunTracker, snapshot: Any, outcome: Outcome) -> tuple[Outcome, dict[str, Any]]:
    """How a run its caller left ends, from its thread (`snapshot`), and the update that says
    so (none when the thread ended already, or is an earlier run's that finished)."""
    values: Mapping[str, Any] = snapshot.values if isinstance(snapshot.values, Mapping) else {}
    written = values.get("deadline_outcome")
    done = not snapshot.next and not snapshot.interrupts
    if isinstance(written, Outcome) and (done or not written.ok):
        return outcome, {}
    if done:  # it had done all its work: the caller left after its last chunk
        outcome = final_outcome(run, values) or outcome
        return outcome, {"deadline_outcome": outcome.to_dict()}
    update = {"deadline_outcome": outcome.to_dict(), "deadline": RUN_OVER}
    return outcome, {**update, **_records_update(run, values)}


def keep_left(
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, outcome: Outcome
) -> Outcome:
    """A sync stream its caller closed before its end: see `akeep_left`."""
    if not (graph.deadline_settings.has_fields and saved(graph, cfg)):
        return outcome
    try:
        snapshot = graph.get_state(_clean(cfg))
    except Exception:
        log.warning("could not read the thread of a cancelled run", exc_info=True)
        return outcome
    outcome, update = _left(run, snapshot, outcome)
    _write(graph, cfg, update)
    return outcome


async def akeep_left(
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, outcome: Outcome
) -> Outcome:
    """A run its caller left (a stop, LangGraph Server's `runs.cancel`, a client gone, a stream
    closed): with the deadline fields, how it ended is written to its checkpoint, so that a
    thread read later tells it from a run completed or out of time. Returns that outcome:
    `outcome` (cancelled), with the records of the steps it cut; or `completed` when the thread
    shows the run had done all its work (the caller left after its last chunk, before the
    stream's end). A thread that ended already is left as it is. Shielded from the
    cancellation for at most `CANCEL_WRITE_S`."""
    if not (graph.deadline_settings.has_fields and saved(graph, cfg)):
        return outcome
    with anyio.move_on_after(CANCEL_WRITE_S, shield=True):
        try:
            snapshot = await graph.aget_state(_clean(cfg))
        except Exception:
            log.warning("could not read the thread of a cancelled run", exc_info=True)
            return outcome
        outcome, update = _left(run, snapshot, outcome)
        await _awrite(graph, cfg, update)
    return outcome


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
    if isinstance(written, Outcome) and not written.ok:
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
        if written is None or written.ok:  # a `completed` a subgraph gave is replaced
            update["deadline_outcome"] = outcome.to_dict()
            update["deadline"] = RUN_OVER  # the next run's deadline replaces this one
        update.update(_records_update(run, values))
    return state, update


def resumed(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Any:
    """`resume.resume`; a resume after the thread's deadline also leaves the thread valid for
    its next turn (see `_answered_late`). What the caller gets, or None to go on."""
    try:
        ended = resume(graph, run, cfg)
    except DeadlineExceeded as exc:  # a graph without deadline fields: refused
        exc.state, update = _answered_late(graph, exc.state, exc.outcome)
        _write(graph, cfg, update)
        raise
    if ended is not None:
        ended, update = _answered_late(graph, ended, ended["deadline_outcome"])
        _write(graph, cfg, update)
    return ended


async def aresumed(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Any:
    """`resumed`, asynchronously."""
    try:
        ended = await aresume(graph, run, cfg)
    except DeadlineExceeded as exc:
        exc.state, update = _answered_late(graph, exc.state, exc.outcome)
        await _awrite(graph, cfg, update)
        raise
    if ended is not None:
        ended, update = _answered_late(graph, ended, ended["deadline_outcome"])
        await _awrite(graph, cfg, update)
    return ended


def _answered_late(
    graph: DeadlineRuns, values: Any, outcome: Outcome
) -> tuple[Any, dict[str, Any]]:
    """A resume refused after the deadline (a human's approval that came too late): the thread
    stays paused where it was, for a grant, and the tool calls its messages leave open get the
    model-readable "skipped" answer (with the closing reply, given a `reserve`), marked as
    ending messages, as a run that ran out leaves them: the next turn's history is valid (no
    open tool call before a new user message), and a grant removes them before the paused
    run goes on. The state the caller gets, and the update for the checkpoint."""
    messages = messages_of(values)
    if not messages or not _removes(graph):
        return values, {}
    owed = answer_open_calls(messages, ())
    if not owed:
        return values, {}
    settings = graph.deadline_settings
    closing = settings.closing_message and settings.reserve > 0
    shown, stored = ending_messages(messages, owed, outcome, closing=closing)
    return {**values, "messages": shown}, {"messages": stored}


def _removes(graph: DeadlineRuns) -> bool:
    """True when the graph's `messages` reducer removes messages (`add_messages`)."""
    return getattr(graph.channels.get("messages"), "operator", None) is add_messages


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
    return saved(graph, cfg) and _removes(graph)


def _superseding(grant: Command[Any], values: Any) -> Command[Any]:
    ids = [m.id for m in messages_of(values) or [] if is_ending(m) and m.id]
    update = grant.update
    if not ids or not isinstance(update, Mapping):
        return grant
    given = update.get("messages")
    more = [] if given is None else (list(given) if isinstance(given, list) else [given])
    gone: list[Any] = [RemoveMessage(id=i) for i in ids]
    return dataclasses.replace(grant, update={**update, "messages": [*gone, *more]})
