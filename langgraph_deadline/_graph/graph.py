"""`DeadlineGraph`: a compiled graph whose every run carries one deadline, and says how it ended.

A run's whole life, in one module: its entry (`_start`, shared by `invoke`, `ainvoke`, `stream`
and `astream`), how a resume finds the deadline its thread kept and refuses to start once it
has passed, how a new run whose deadline passed before it started ends on every entry point,
and how a run ends that LangGraph did not finish (a drain because a step ran out, the backstop,
the caller's cancellation), with one way of reading the checkpoint and writing the outcome, the
records and the answers to open tool calls back to it.

Resume. A state with the deadline fields keeps the deadline there. A paused run of a state
without them keeps it beside its checkpoint, as one pending write of a task LangGraph does not
know: LangGraph keeps such a write with the checkpoint and otherwise leaves it alone (not
applied on a resume, not in the snapshot's values, metadata, tasks or config), so nothing of
ours shows where users look.

A late start. With the deadline fields, the run's input is applied as a run's input is, with the
outcome, and the run stops before its first node: `invoke` returns that state, `stream` yields
it in the modes asked for (a last `updates` chunk carries the outcome), and a checkpointed
thread holds it, its first node pending (a resume that grants time runs it). LangGraph Server
reads its answer from that stream and its thread from that checkpoint. Without the fields,
`DeadlineExceeded` is raised and nothing is written. A run LangGraph re-enters (the same run id
as its thread's checkpoint: a served run re-queued after its worker died mid-node) is resumed
by LangGraph whatever its input: its pending node is refused, and the run ends as a run drained
at a step that ran out, its outcome in its thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final, NamedTuple, Self, TypeAlias, TypeVar, cast

import anyio
from langchain_core.messages import RemoveMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.runnables.graph import Graph
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphDrained
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.runtime import RunControl
from langgraph.types import Command, Interrupt, Overwrite, StateUpdate

from .._core.clock import SYSTEM_CLOCK
from .._core.cut import Cut
from .._core.deadline import Deadline, earliest
from .._core.errors import DeadlineExceeded
from .._core.plan import RUN_KEY, RunAlarm, RunTracker, run_step_end
from .._core.records import Outcome, Terminal
from .._core.sync_http import ensure as ensure_http
from .._core.validate import check_timestamp
from .answers import answer_open_calls
from .chunks import (
    NotedStream,
    closing,
    closing_chunks,
    completed_chunks,
    deadline_given,
    note_chunk,
)
from .inputs import (
    a_result,
    ceiling,
    entry_input,
    plain_steps,
    request_limit,
    sets_deadline,
    without_fields,
)
from .messages import ending_messages, is_ending, messages_of
from .node import unwrapped
from .node_cache import deadline_cache
from .retries import ain_run, enter_run, in_run, leave_run
from .seams import DRAIN_REASON, check_thread, own_control
from .settings import GraphSettings
from .state import (
    RUN_OVER,
    TRACE_WINDOW,
    deadline_from_state,
    fresh_run_input,
    missing_records,
    traced,
)
from .terminal import (
    emit_run_outcome,
    exceeded,
    final_outcome,
    origin_of,
    outcome_from,
    raised,
    reraise_with_state,
)

__all__ = ["DeadlineGraph", "DeadlineRuns"]


# -- a resume: the deadline its thread kept ----------

log = logging.getLogger("langgraph_deadline")

KEPT_TASK: Final = "langgraph-deadline"
KEPT_CHANNEL: Final = "__langgraph_deadline__"
"""The task id and channel of the write that keeps a paused run's deadline (epoch seconds)."""


T = TypeVar("T")


class Io(NamedTuple):
    """One read or write of a run's thread, in both colours: `call(*args)` in sync code,
    `await acall(*args)` in async code. The run's bookkeeping is written once, as a generator
    of these (`Steps`), and `drive` or `adrive` performs it: one body for both colours."""

    call: Callable[..., Any]
    acall: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]


Steps: TypeAlias = Generator[Io, Any, T]


def drive(steps: Steps[T]) -> T:
    """Perform `steps` in sync code: each `Io` is called, its result (or its error) sent back.
    Anything else raised (a cancellation) closes `steps` on its way out."""
    value: Any = None
    error: Exception | None = None
    with contextlib.closing(steps):
        while True:
            try:
                io = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return cast(T, done.value)
            try:
                value, error = io.call(*io.args), None
            except Exception as exc:
                value, error = None, exc


async def adrive(steps: Steps[T]) -> T:
    """`drive`, awaiting each `Io`'s async call."""
    value: Any = None
    error: Exception | None = None
    with contextlib.closing(steps):
        while True:
            try:
                io = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return cast(T, done.value)
            try:
                value, error = await io.acall(*io.args), None
            except Exception as exc:
                value, error = None, exc


def kept_deadline(snapshot: Any, writes: Any = ()) -> Deadline | None:
    """The deadline a thread's checkpoint kept: its state's `deadline` field, else (state
    without the deadline fields) the one its paused run wrote beside it (`writes`, the
    checkpoint's pending writes)."""
    d = deadline_from_state(getattr(snapshot, "values", None))
    if d is not None:
        return d
    for task, channel, value in writes or ():
        if task == KEPT_TASK and channel == KEPT_CHANNEL:
            try:  # our own write, but a checkpoint is storage: read it defensively
                return Deadline._at(check_timestamp(value, KEPT_CHANNEL), SYSTEM_CLOCK)
            except (TypeError, ValueError):
                return None
    return None


def _keeps(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> RunnableConfig | None:
    """The thread's config, when a paused run of a state without the deadline fields must keep
    its deadline on its checkpoint for the resume."""
    if graph.deadline_settings.has_fields or run.deadline is None or not saved(graph, cfg):
        return None
    paused = (
        run.interrupted
        or run.outcome is not None
        or bool(graph.interrupt_before_nodes or graph.interrupt_after_nodes)
    )
    if not paused:
        return None
    conf = cfg.get("configurable", {})
    return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": ""}}


def saver(graph: DeadlineRuns) -> BaseCheckpointSaver[Any] | None:
    """The graph's own checkpointer (None, or `True` for a subgraph that uses its parent's)."""
    cp = graph.checkpointer
    return cp if isinstance(cp, BaseCheckpointSaver) else None


def keep_deadline(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Steps[None]:
    """Write a paused run's deadline beside its latest checkpoint (see `KEPT_TASK`)."""
    thread = _keeps(graph, run, cfg)
    cp = saver(graph)
    if thread is None or cp is None or run.deadline is None:
        return
    with _logged():
        saved = yield Io(cp.get_tuple, cp.aget_tuple, (thread,))
        if saved is not None:
            write = [(KEPT_CHANNEL, run.deadline.timestamp)]
            yield Io(cp.put_writes, cp.aput_writes, (saved.config, write, KEPT_TASK))


def saved(graph: DeadlineRuns, cfg: RunnableConfig) -> bool:
    """True when the run has a thread to checkpoint to."""
    return graph.checkpointer is not None and bool(cfg.get("configurable", {}).get("thread_id"))


@contextlib.contextmanager
def _logged() -> Iterator[None]:
    """A checkpointer that fails to keep the deadline is logged: the caller still gets its run."""
    try:
        yield
    except Exception:
        log.warning("could not keep the run's deadline beside its checkpoint", exc_info=True)


def resume(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Steps[Any]:
    """Give a resumed `run` its thread's deadline, read from its checkpoint (if it has one).
    Returns what the caller gets when that deadline has passed (see `late`), else None."""
    if not saved(graph, cfg):
        return _resumed(graph, run, None, ())
    snapshot = yield Io(graph.get_state, graph.aget_state, (cfg,))
    if graph.deadline_settings.has_fields or (cp := saver(graph)) is None:
        return _resumed(graph, run, snapshot, ())
    kept = yield Io(cp.get_tuple, cp.aget_tuple, (snapshot.config,))
    return _resumed(graph, run, snapshot, kept.pending_writes if kept else ())


def _resumed(graph: DeadlineRuns, run: RunTracker, snapshot: Any, writes: Any) -> Any:
    """The thread's deadline (in state, or beside its checkpoint: `writes`), or `timeout` from
    now for a thread that kept none, bounds the run. An entrypoint's saved value is the user's,
    never read for a deadline."""
    if snapshot is not None and not graph.deadline_settings.has_state:
        snapshot = snapshot._replace(values=None)
    kept = kept_deadline(snapshot, writes)
    timeout = graph.deadline_settings.timeout
    if kept is None and timeout is not None:
        kept = Deadline.after(timeout)
    run.deadline = earliest(run.deadline, kept)
    return late(graph, snapshot, run, writes)


def late(graph: DeadlineRuns, snapshot: Any, run: RunTracker, writes: Any = ()) -> Any:
    """A resume after the checkpointed deadline passed does not start: no node body runs,
    and the checkpoint stays as it was, so a resume that grants a new deadline
    (`Command(resume=..., update=deadline_input(s))`) continues where the run paused.
    Returns what the caller gets (graphs without deadline fields raise), or None to go on."""
    values = getattr(snapshot, "values", None)
    d = kept_deadline(snapshot, writes)
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


def thread_deadline(snapshot: Any) -> float | None:
    """The deadline a thread's state holds (epoch seconds), or None."""
    d = deadline_from_state(getattr(snapshot, "values", None))
    return None if d is None else d.timestamp


# -- the ends LangGraph did not finish ----------


CANCEL_WRITE_S: Final = 1.0
"""How long a cancelled run may hold up its cancellation to write its outcome (a checkpointer
write takes milliseconds; a stuck one must not keep a cancelled caller waiting)."""
_PERSIST = "langgraph_deadline: write the outcome"


def ran_out_at_the_end(run: RunTracker, values: Any = None) -> bool:
    """True when a run that LangGraph finished ended early all the same: a step ran out at its
    very end, or a sub-agent or a node in a subgraph wrote the outcome into the state (its last
    `values`, when the caller has them; else the run's `latest`)."""
    if run.outcome is not None:
        return True
    if values is None:
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


def _read(
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig
) -> Steps[tuple[Any, tuple[Interrupt, ...]]]:
    """The run's latest state, and the interrupts its checkpoint holds pending (a branch that
    paused in the superstep the deadline cut: LangGraph's own run would return them)."""
    if not graph.deadline_settings.has_state:
        return None, ()
    if not saved(graph, cfg):
        return run.latest, ()
    try:
        snapshot = yield Io(graph.get_state, graph.aget_state, (_clean(cfg),))
    except Exception:
        return run.latest, ()
    return snapshot.values, snapshot.interrupts


def _write(graph: DeadlineRuns, cfg: RunnableConfig, update: dict[str, Any]) -> Steps[None]:
    """Write `update` to the run's checkpoint, by a run of LangGraph's own stream (not ours:
    it must not be taken for a user's resume) that drains before any task."""
    if not (update and saved(graph, cfg)):
        return
    with _writing():
        yield Io(_update_run, _aupdate_run, (graph, Command(update=update), _clean(cfg)))


def _update_run(graph: DeadlineRuns, update: Command[Any], cfg: RunnableConfig) -> None:
    for _ in CompiledStateGraph.stream(graph, update, cfg, control=_persist_control()):
        pass


async def _aupdate_run(graph: DeadlineRuns, update: Command[Any], cfg: RunnableConfig) -> None:
    async for _ in CompiledStateGraph.astream(graph, update, cfg, control=_persist_control()):
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


def final_state(
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, why: str | None
) -> Steps[Any]:
    """The state a run that ended early returns (see `assemble`). With a checkpointer the latest
    state is read from it (it holds the results of the steps that finished in the cut
    superstep), and the outcome, the records and the reply are written to it."""
    latest, pending = yield from _read(graph, run, cfg)
    state, update = assemble(graph, run, latest, why)
    run.final_news = bool(update)
    yield from _write(graph, cfg, update)
    yield from keep_deadline(graph, run, cfg)
    return _returned(graph, run, state, pending)


def keep_records(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Steps[None]:
    """A run that failed (an error that is not the deadline's): its step records are written to
    the checkpoint, its pending steps left as they are for a resume after a fix."""
    if graph.deadline_settings.has_fields and saved(graph, cfg) and run.records:
        latest, _ = yield from _read(graph, run, cfg)
        yield from _write(graph, cfg, _records_update(run, latest))


def keep_end(
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, outcome: Outcome | None, values: Any
) -> Steps[None]:
    """A run that finished (`outcome` completed) or paused on an interrupt (None): with the
    deadline fields, its checkpoint gets the records its nodes left out of their updates (see
    `RunTracker.trace_at_end`) and a completed run its outcome, which LangGraph's own end
    leaves without one, so that a thread read later tells it from a run cancelled or out of
    time. (Not from the state's channel: LangGraph tells channels a run ends also when `Send`
    tasks are still to come.) `values`: the run's last state, as LangGraph gave it."""
    if run.final is None and graph.deadline_settings.has_fields and saved(graph, cfg):
        yield from _write(graph, cfg, _end_update(run, outcome, values))


def _end_update(run: RunTracker, outcome: Outcome | None, values: Any) -> dict[str, Any]:
    update = _records_update(run, values)
    if outcome is not None and outcome.ok:
        update["deadline_outcome"] = outcome.to_dict()
    return update


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
    graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig, left: list[Outcome]
) -> Steps[None]:
    """A run its caller left (a stop, LangGraph Server's `runs.cancel`, a client gone, a stream
    closed): with the deadline fields, how it ended is written to its checkpoint, so that a
    thread read later tells it from a run completed or out of time. `left` holds the outcome
    (cancelled), replaced as soon as it is known by the one to return: the same, with the
    records of the steps it cut; or `completed` when the thread shows the run had done all its
    work (the caller left after its last chunk, before the stream's end). A thread that ended
    already is left as it is. (An async caller shields it from the cancellation for at most
    `CANCEL_WRITE_S`: a write cut then still returns the outcome known.)"""
    if not (graph.deadline_settings.has_fields and saved(graph, cfg)):
        return
    try:
        snapshot = yield Io(graph.get_state, graph.aget_state, (_clean(cfg),))
    except Exception:
        log.warning("could not read the thread of a cancelled run", exc_info=True)
        return
    left[0], update = _left(run, snapshot, left[0])
    yield from _write(graph, cfg, update)


def _records_update(run: RunTracker, latest: Any) -> dict[str, Any]:
    """The write that gives a run's checkpoint the records its state lacks (under
    `with_deadlines` its steps leave them out of their updates: `RunTracker.trace_at_end`),
    appended in the order they ended; given no state (a stream that did not carry values),
    the run's last records."""
    values: Mapping[str, Any] = latest if isinstance(latest, Mapping) else {}
    missing = missing_records(values, run.records)[-TRACE_WINDOW:]  # the field keeps no more
    # Plain data, as the fields' channels checkpoint it (LangGraph stores these writes as
    # they are, and a strict msgpack loader refuses our classes).
    return {"deadline_trace": [r.to_dict() for r in missing]} if missing else {}


def _returned(
    graph: DeadlineRuns, run: RunTracker, state: dict[str, Any], pending: tuple[Interrupt, ...]
) -> Any:
    """What a run that ended early returns (its state, with the `__interrupt__` list of the
    interrupts left pending, as LangGraph's own run returns them), or raises for a graph
    without the deadline fields."""
    if pending:
        state["__interrupt__"] = list(pending)
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
        state["deadline_trace"] = traced(values, run.records)
        if written is None or written.ok:  # a `completed` a subgraph gave is replaced
            update["deadline_outcome"] = outcome.to_dict()
            update["deadline"] = RUN_OVER  # the next run's deadline replaces this one
        update.update(_records_update(run, values))
    return state, update


def resumed(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Steps[Any]:
    """`resume`; a resume after the thread's deadline also leaves the thread valid for its
    next turn (see `_answered_late`). What the caller gets, or None to go on."""
    try:
        ended = yield from resume(graph, run, cfg)
    except DeadlineExceeded as exc:  # a graph without deadline fields: refused
        exc.state, update = _answered_late(graph, exc.state, exc.outcome)
        yield from _write(graph, cfg, update)
        raise
    if ended is not None:
        ended, update = _answered_late(graph, ended, ended["deadline_outcome"])
        yield from _write(graph, cfg, update)
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


def granted(graph: DeadlineRuns, cfg: RunnableConfig, input: Any) -> Steps[Any]:
    """`input`; a grant of more time (`Command(update=deadline_input(s))`) on a thread whose last
    run ran out also removes the messages that ended that run (`ENDING`: the cut step's owed
    answers, the closing reply), so that the cut step, still pending, runs again on the state
    it would have seen (docs/concepts.md, rule 3)."""
    if not _removable(graph, cfg, input):
        return input
    try:
        snapshot = yield Io(graph.get_state, graph.aget_state, (_clean(cfg),))
    except Exception:
        return input
    return _superseding(input, snapshot.values)


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


# -- a run that starts after its deadline ----------

_FIELDS: Final = frozenset({"deadline", "deadline_outcome", "deadline_trace"})
_REASON: Final = "the run's deadline had passed before it started: nothing was run"


def too_late(graph: DeadlineRuns, run: RunTracker, input: Any) -> Any:
    """The state a new run whose deadline had passed before it started ends with (its input and
    the outcome), or None to go on. Graphs without deadline fields raise `DeadlineExceeded`."""
    d = run.deadline
    if d is None or not d.expired:
        return None
    outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, reason=_REASON, elapsed_ms=0.0)
    run.outcome = outcome
    emit_run_outcome(run, outcome)
    state = (
        {k: v for k, v in input.items() if k not in _FIELDS} if isinstance(input, Mapping) else {}
    )
    if not graph.deadline_settings.has_fields:
        raise exceeded(outcome, d, state if graph.deadline_settings.has_state else None)
    return {**state, "deadline": d.timestamp, "deadline_outcome": outcome, "deadline_trace": []}


def _applied(
    graph: DeadlineRuns, run: RunTracker, input: Any, cfg: RunnableConfig
) -> dict[str, Any] | None:
    """The input LangGraph applies for the late run (the outcome in it), or None when there is
    no thread to write to (the caller gets the input and the outcome, at the cost of a dict) or
    the input is not a state (a `Command` granting a deadline: nothing is applied)."""
    if not isinstance(input, Mapping) or run.outcome is None or not saved(graph, cfg):
        return None
    return {
        **input,
        "deadline_outcome": Overwrite(run.outcome.to_dict()),
        "deadline_trace": Overwrite([]),
    }


def _kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    # Interrupting before every node stops the run once its input is applied (and checkpointed),
    # with the input's values streamed as any run's; the interrupt itself is not passed on.
    return {**kwargs, "interrupt_before": "*"}


def _interrupt(chunk: Any) -> bool:
    """True for the `{"__interrupt__": ()}` update of the stop before the first node."""
    payload = chunk.get("data") if isinstance(chunk, dict) and "type" in chunk else chunk
    if isinstance(payload, tuple) and payload:
        payload = payload[-1]
    return isinstance(payload, dict) and set(payload) == {"__interrupt__"}


def _last_update(
    graph: DeadlineRuns, state: Mapping[str, Any], kwargs: Mapping[str, Any], values_seen: bool
) -> list[Any]:
    """The chunks LangGraph's stream of the late run did not give: the update with the outcome
    (no node ran to give it), and the values when none were streamed (a `Command` input)."""
    return closing_chunks(
        state,
        None,
        kwargs.get("stream_mode") or graph.stream_mode,
        subgraphs=bool(kwargs.get("subgraphs", False)),
        version=str(kwargs.get("version", "v1")),
        kinds=("updates",) if values_seen else ("updates", "values"),
    )


def late_chunks(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig, **kw: Any
) -> Iterator[Any]:
    """The stream of a late run (see the module's docstring)."""
    applied = _applied(graph, run, input, cfg)
    seen = False
    if applied is not None:
        try:
            for chunk in CompiledStateGraph.stream(graph, applied, cfg, **_kwargs(kw)):
                if not _interrupt(chunk):
                    seen = True
                    yield chunk
        except GraphDrained as exc:  # a re-entered run's pending node was refused
            if exc.reason != DRAIN_REASON:
                raise
            refused = drive(final_state(graph, run, cfg, None))
            seen = False  # the values it ends with are these, the outcome in them
    yield from _last_update(graph, refused, kw, seen)


async def alate_chunks(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig, **kw: Any
) -> AsyncIterator[Any]:
    """`late_chunks`, asynchronously."""
    applied = _applied(graph, run, input, cfg)
    seen = False
    if applied is not None:
        try:
            async for chunk in CompiledStateGraph.astream(graph, applied, cfg, **_kwargs(kw)):
                if not _interrupt(chunk):
                    seen = True
                    yield chunk
        except GraphDrained as exc:  # a re-entered run's pending node was refused
            if exc.reason != DRAIN_REASON:
                raise
            refused = await adrive(final_state(graph, run, cfg, None))
            seen = False  # the values it ends with are these, the outcome in them
    for chunk in _last_update(graph, refused, kw, seen):
        yield chunk


def late_result(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig
) -> Any:
    """What `invoke` returns for a late run: the state its stream ends with."""
    state = refused
    if saved(graph, cfg):
        for chunk in late_chunks(graph, run, refused, input, cfg, stream_mode="values"):
            state = chunk
    return state


async def alate_result(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig
) -> Any:
    """`late_result`, asynchronously."""
    state = refused
    if saved(graph, cfg):
        async for chunk in alate_chunks(graph, run, refused, input, cfg, stream_mode="values"):
            state = chunk
    return state


# -- the wrapped graph and its runs ----------

_IN_FLIGHT = "the run's deadline passed with steps in flight"
_KEPT = ("_output_mapper", "_state_mapper", "_serde_allowlist")
"""What `StateGraph.compile` sets on a compiled graph after making it: `version="v2"` outputs'
pydantic or dataclass type, and the strict-msgpack allowlist of the state's types."""


class DeadlineRuns(Pregel[Any, Any, Any, Any]):
    """What every `with_deadlines` graph's runs share: one deadline each, and how they end."""

    _lgd_settings: GraphSettings

    def __init__(
        self, *args: Any, _lgd_settings: GraphSettings | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._lgd_settings = GraphSettings() if _lgd_settings is None else _lgd_settings

    @classmethod
    def of(cls, compiled: Pregel[Any, Any, Any, Any], settings: GraphSettings) -> Self:
        """`compiled`, as this class, with `settings`: built from its attributes as LangGraph's
        own `Pregel.copy` (and so `with_config`) does, since LangGraph 1.2 has no seam for the
        class `StateGraph.compile` builds. `tests/graph/test_seams.py` fails if that changes."""
        attrs = {k: v for k, v in vars(compiled).items() if k != "__orig_class__"}
        attrs["_lgd_settings"] = settings
        attrs["cache"] = deadline_cache(compiled.cache)  # our fields stay out of it
        return cls(**attrs)._keep(compiled)

    def copy(self, update: dict[str, Any] | None = None) -> Self:
        """Like `Pregel.copy` (so `with_config`), keeping what `compile` set after the graph
        was made (`_KEPT`), which LangGraph's own copy leaves behind."""
        return super().copy(update)._keep(self)

    def _keep(self, source: Pregel[Any, Any, Any, Any]) -> Self:
        for key in _KEPT:
            if key in vars(source):
                setattr(self, key, vars(source)[key])
        return self

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Graph:
        """LangGraph's drawing of the graph, with each node as the user gave it (not our
        budgeted wrapper around it)."""
        return super(DeadlineRuns, self._as_given()).get_graph(config, xray=xray)

    async def aget_graph(
        self, config: RunnableConfig | None = None, *, xray: int | bool = False
    ) -> Graph:
        return await super(DeadlineRuns, self._as_given()).aget_graph(config, xray=xray)

    def _as_given(self) -> Self:
        drawn = copy.copy(self)
        drawn.nodes = {
            name: node.copy({"bound": unwrapped(node.bound)}) for name, node in self.nodes.items()
        }
        return drawn

    @property
    def deadline_settings(self) -> GraphSettings:
        """The options `with_deadlines` was given (timeout, reserve), and whether the state has
        the deadline fields."""
        return self._lgd_settings

    # -- entry --------------------------------------------------------------------------------

    def _start(
        self, input: Any, config: RunnableConfig | None
    ) -> tuple[RunTracker, Any, RunnableConfig]:
        cfg: RunnableConfig = dict(config or {})  # type: ignore[assignment]
        existing = cfg.get("configurable", {}).get(RUN_KEY)
        if isinstance(existing, RunTracker) and existing.entry is self:
            existing.entry = None  # ainvoke prepared this run; astream goes on with it
            return existing, input, cfg
        check_thread(self.checkpointer, cfg)
        settings = self._lgd_settings
        # Nothing the caller sends is later than this (a served run's headers included).
        limit = request_limit(cfg.get("configurable", {}), settings.timeout, settings.queue_time)
        input = entry_input(input, limit, fields=settings.has_fields)
        given = None if a_result(input) else deadline_given(input)
        # (a resume's joins the thread's: see `resume`)
        d = limit if given is None else given.earliest(limit)
        if settings.has_fields and isinstance(input, Mapping):  # a new run's input
            empty = (  # no thread, and not run inside another graph (whose thread it would use)
                self.checkpointer is None
                and not cfg.get("configurable", {}).get("checkpoint_ns")
                and var_child_runnable_config.get() is None
            )
            input = fresh_run_input(input, None if d is None else d.timestamp, empty=empty)
        ensure_http()  # (a model call its library runs on a thread: `sync_http.py`)
        run = RunTracker(
            deadline=d, reserve=settings.reserve, resumable=saved(self, cfg), origin=origin_of(cfg)
        )
        run.book = settings.book
        run.trace_at_end = settings.has_fields
        run.keep_partial = (
            settings.partial_answer and settings.closing_message and settings.reserve > 0
        )
        cfg["configurable"] = {**cfg.get("configurable", {}), RUN_KEY: run}
        return run, input, cfg

    def _prepared(self, config: RunnableConfig | None) -> RunTracker | None:
        """The run our own `invoke`/`ainvoke` prepared for the stream it reads through
        LangGraph's (None: a caller's stream)."""
        run = (config or {}).get("configurable", {}).get(RUN_KEY)
        return run if isinstance(run, RunTracker) and run.entry is self else None

    def _sent(self, input: Any) -> Any:
        """`input` as LangGraph gets it: without the deadline fields a state lacks (the run
        has read its deadline from them; LangGraph would warn of writes to unknown channels)."""
        return input if self._lgd_settings.has_fields else without_fields(input, self.channels)

    def _resuming(self, input: Any) -> bool:
        """A resume (None or a Command) that does not grant a new deadline (`deadline_input`)."""
        if input is None:
            return True
        if not isinstance(input, Command):
            return False
        update = input.update if isinstance(input.update, Mapping) else {}
        return not isinstance(update.get("deadline"), Overwrite)

    # -- state updates: a `Deadline` in them is stored as plain epoch seconds ------------------

    def bulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        """Like LangGraph's; a deadline in the updates can only bring the thread's forward
        (`deadline_input` grants a new one explicitly), and none is later than `timeout` from
        now (or the deadline in context)."""
        steps = list(supersteps)
        now = thread_deadline(self.get_state(config)) if sets_deadline(steps) else None
        limit = ceiling(self._lgd_settings.timeout)
        return super().bulk_update_state(config, plain_steps(steps, not_after=now, limit=limit))

    async def abulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        steps = list(supersteps)
        now = thread_deadline(await self.aget_state(config)) if sets_deadline(steps) else None
        limit = ceiling(self._lgd_settings.timeout)
        plain = plain_steps(steps, not_after=now, limit=limit)
        return await super().abulk_update_state(config, plain)

    # -- streaming ----------------------------------------------------------------------------

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        prepared = self._prepared(config) is not None
        run, input, cfg = self._start(input, config)
        mode = kwargs.get("stream_mode", self.stream_mode)
        if not prepared and self._resuming(input):
            if (ended := drive(resumed(self, run, cfg))) is not None:
                yield from closing(ended, run, mode, kwargs, news=True)
                return
        elif not prepared and (refused := too_late(self, run, input)) is not None:
            yield from late_chunks(self, run, refused, input, cfg, **kwargs)
            return
        input = input if prepared else self._sent(drive(granted(self, cfg, input)))
        try:
            guarded = self._lgd_settings.guarded_retries
            options = kwargs if prepared else _run_options(kwargs)
            # (LangGraph's stream in no local: closed with ours, it must end, and write its
            # checkpoint, before ours writes the outcome there)
            for chunk in in_run(run, super().stream(input, cfg, **options), guarded=guarded):
                note_chunk(run, chunk, mode)
                yield chunk
        except GraphDrained as exc:
            if exc.reason != DRAIN_REASON:
                emit_run_outcome(run, raised(exc))
                raise
            yield from closing(drive(final_state(self, run, cfg, None)), run, mode, kwargs)
            return
        except DeadlineExceeded as exc:
            emit_run_outcome(run, exc.outcome)
            drive(keep_deadline(self, run, cfg))
            reraise_with_state(exc, run)
        except Exception as exc:
            emit_run_outcome(run, raised(exc))
            drive(keep_records(self, run, cfg))
            raise
        except GeneratorExit as exc:  # the caller closed the stream before its end
            left = [raised(exc)]
            if not prepared:
                drive(keep_left(self, run, cfg, left))
            emit_run_outcome(run, left[0])
            raise
        except BaseException as exc:
            emit_run_outcome(run, raised(exc))
            raise
        if ran_out_at_the_end(run):
            yield from closing(drive(final_state(self, run, cfg, None)), run, mode, kwargs)
            return
        drive(keep_deadline(self, run, cfg))
        if not prepared:
            emit_run_outcome(run, done := final_outcome(run, run.latest))
            drive(keep_end(self, run, cfg, done, run.latest))
            yield from completed_chunks(self._lgd_settings.has_fields, done, run, mode, kwargs)

    def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        if (run := self._prepared(config)) is not None:
            # The stream under our `ainvoke` (through LangGraph's), which ends the run itself:
            # only the chunks are noted, by an object rather than one more generator frame.
            run.entry = None  # (its config is the one `ainvoke` made: it goes on as it is)
            mode = kwargs.get("stream_mode", self.stream_mode)
            if mode == ["updates", "values"] and not kwargs.get("subgraphs"):
                # LangGraph's `ainvoke` keeps the last values: the run's nodes give it a reader
                # of the same state, which it reads only when it must end early
                run.select = kwargs.get("output_keys") or self.output_channels
            stream = cast(AsyncGenerator[Any, None], super().astream(input, config, **kwargs))
            return NotedStream(stream, run, mode)
        return self._astream(input, config, **kwargs)

    async def _astream(
        self, input: Any, config: RunnableConfig | None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        run, input, cfg = self._start(input, config)
        mode = kwargs.get("stream_mode", self.stream_mode)
        if self._resuming(input):
            if (ended := await adrive(resumed(self, run, cfg))) is not None:
                for chunk in closing(ended, run, mode, kwargs, news=True):
                    yield chunk
                return
        elif (refused := too_late(self, run, input)) is not None:
            async for chunk in alate_chunks(self, run, refused, input, cfg, **kwargs):
                yield chunk
            return
        input = self._sent(await adrive(granted(self, cfg, input)))
        try:
            guarded = self._lgd_settings.guarded_retries
            options = _run_options(kwargs)
            stream = ain_run(run, super().astream(input, cfg, **options), guarded=guarded)
            async with contextlib.aclosing(stream) as inner:
                async for chunk in inner:
                    note_chunk(run, chunk, mode)
                    yield chunk
        except BaseException as exc:
            if (state := await self._aended(run, cfg, exc)) is None:
                raise
            for chunk in closing(state, run, mode, kwargs):
                yield chunk
        else:
            if ran_out_at_the_end(run):
                state = await adrive(final_state(self, run, cfg, None))
                for chunk in closing(state, run, mode, kwargs):
                    yield chunk
            else:
                await adrive(keep_deadline(self, run, cfg))
                emit_run_outcome(run, done := final_outcome(run, run.latest))
                await adrive(keep_end(self, run, cfg, done, run.latest))
                for chunk in completed_chunks(
                    self._lgd_settings.has_fields, done, run, mode, kwargs
                ):
                    yield chunk
        finally:
            run.close_alarm()

    async def _aended(self, run: RunTracker, cfg: RunnableConfig, exc: BaseException) -> Any:
        """How a run whose LangGraph stream raised `exc` ends: the state it returns, when a step
        that ran out drained it; None when `exc` goes on up, told to the observers (a failed
        run's records kept in its checkpoint). A `DeadlineExceeded` is raised again complete,
        with the run's latest state."""
        if isinstance(exc, GraphDrained):
            if exc.reason == DRAIN_REASON:
                return await adrive(final_state(self, run, cfg, None))
            emit_run_outcome(run, raised(exc))
            return None
        if isinstance(exc, DeadlineExceeded):
            emit_run_outcome(run, exc.outcome)
            await adrive(keep_deadline(self, run, cfg))
            reraise_with_state(exc, run)
        if isinstance(exc, GeneratorExit | anyio.get_cancelled_exc_class()):
            # The consumer gave up (closed the stream, or was cancelled): stop the run's steps,
            # wherever LangGraph runs them, instead of letting them go on to their deadline.
            run.signal.cancel("run_deadline" if run.backstop_fired else "caller")
            if not run.backstop_fired:  # the backstop reports the run itself
                left = [raised(exc)]
                with anyio.move_on_after(CANCEL_WRITE_S, shield=True):
                    await adrive(keep_left(self, run, cfg, left))
                emit_run_outcome(run, left[0])
            return None
        emit_run_outcome(run, raised(exc))
        if isinstance(exc, Exception):
            await adrive(keep_records(self, run, cfg))
        return None

    # -- invoke -------------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        run, input, cfg = self._start(input, config)
        if self._resuming(input):
            ended = drive(resumed(self, run, cfg))
            if ended is not None:
                return ended
        elif (refused := too_late(self, run, input)) is not None:
            return late_result(self, run, refused, input, cfg)
        input = self._sent(drive(granted(self, cfg, input)))
        run.entry = self
        values = super().invoke(input, cfg, **_run_options(kwargs))
        result, done = self._completed(values, run)
        drive(keep_end(self, run, cfg, done, values))
        return result

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Like `CompiledStateGraph.ainvoke`; also cancels the whole run at its deadline."""
        run, input, cfg = self._start(input, config)
        if self._resuming(input):
            ended = await adrive(resumed(self, run, cfg))
            if ended is not None:
                return ended
        elif (refused := too_late(self, run, input)) is not None:
            return await alate_result(self, run, refused, input, cfg)
        input = self._sent(await adrive(granted(self, cfg, input)))
        run.entry = self
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None  # LangGraph runs on asyncio
        backstop = Cut(loop, task)
        if run.deadline is not None:  # one timer: the nodes' end, then the backstop
            then = (run.deadline, _fire_backstop, run, backstop)
            run.alarm = RunAlarm(loop, run_step_end(run), run.signal, then)
        token = enter_run(run) if self._lgd_settings.guarded_retries else None
        try:  # the run's end is written outside the backstop: it must not cut that
            try:
                with backstop:
                    result = await super().ainvoke(input, cfg, **_run_options(kwargs))
            finally:
                leave_run(token)
                run.close_alarm()
        except BaseException as exc:
            if (state := await self._aended(run, cfg, exc)) is None:
                raise
            return state
        if backstop.caught:
            run.signal.cancel("run_deadline")  # its steps, wherever LangGraph runs them
            return await adrive(final_state(self, run, cfg, _IN_FLIGHT))
        if ran_out_at_the_end(run, result if run.select is not None else None):
            return await adrive(final_state(self, run, cfg, None))
        returned, done = self._completed(result, run)  # (it notes an interrupt in `result`)
        if run.resumable:  # a thread to keep its deadline (when paused) and its end in
            await adrive(keep_deadline(self, run, cfg))
            await adrive(keep_end(self, run, cfg, done, result))
        return returned

    def _completed(self, result: Any, run: RunTracker) -> tuple[Any, Outcome | None]:
        """What `invoke` returns for a run LangGraph finished, and its outcome when the run
        completed (None when it ended early or is paused: nothing more to write)."""
        if run.final is not None:  # ended early: the state its stream ended with
            return run.final, None
        if isinstance(result, dict) and "__interrupt__" in result:
            run.interrupted = True
        outcome = final_outcome(run, result)
        emit_run_outcome(run, outcome)
        if self._lgd_settings.has_fields and isinstance(result, dict):
            result = {**result, "deadline_trace": traced(result, run.records)}
            if outcome is not None and _completed_or_none(result.get("deadline_outcome")):
                result["deadline_outcome"] = outcome
        return result, outcome


class DeadlineGraph(DeadlineRuns, CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph whose runs each carry one deadline. Made by `with_deadlines`."""


def _completed_or_none(outcome: Any) -> bool:
    """True for no outcome, or a `completed` one (a subgraph's, a remote graph's): the run's
    own `completed` replaces it."""
    return outcome is None or (isinstance(outcome, Outcome) and outcome.ok)


def _run_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's options for a run, with a drain control of the run's own when it runs inside
    another run (`seams.own_control`): its deadline's drain must not stop its caller's run."""
    given = kwargs.get("control")
    control = own_control(given)
    return kwargs if control is given else {**kwargs, "control": control}


def _fire_backstop(run: RunTracker, backstop: Cut) -> None:
    """The run's deadline passed: close the steps still in flight, then cancel the run."""
    run.fire_backstop()
    backstop.cancel()
