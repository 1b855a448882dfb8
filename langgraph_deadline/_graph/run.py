"""`Run`: one run of a wrapped graph, as an object: the graph, its tracker and its config, and
what the run's life needs beyond LangGraph's own loop.

How a resume finds the deadline its thread kept and refuses to start once it has passed, how a
new run whose deadline passed before it started ends on every entry point, and how a run ends
that LangGraph did not finish (a drain because a step ran out, the backstop, the caller's
cancellation), with one way of reading the checkpoint and writing the outcome, the records and
the answers to open tool calls back to it. Each of those is written once, as a generator of
`Io` (a read or write of the thread in both colours): `drive` performs it in sync code,
`adrive` in async code. The graph's four faces (`invoke`, `ainvoke`, `stream`, `astream`) are
in `graph.py`.

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

How a run ended: its `Outcome` from what it returned or raised (`terminal_of`), told to the
observers once, and logged when it did not complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
)
from typing import Any, Final, NamedTuple, TypeAlias, TypeVar, cast

from langchain_core.messages import RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphDrained, GraphRecursionError, NodeTimeoutError
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.runtime import RunControl
from langgraph.types import Command, Interrupt, Overwrite

from .._core.deadline import SYSTEM_CLOCK, Deadline, earliest
from .._core.errors import DeadlineExceeded
from .._core.observe import RunEvent, emit_run
from .._core.plan import RUN_KEY
from .._core.records import Outcome, Terminal
from .._core.validate import check_timestamp
from .answers import answer_open_calls
from .chunks import GraphRun, closing_chunks
from .messages import ending_messages, is_ending, messages_of
from .seams import DRAIN_REASON
from .settings import GraphSettings
from .state import RUN_OVER, deadline_from_state, traced

__all__ = [
    "CANCEL_WRITE_S",
    "adrive",
    "drive",
    "exceeded",
    "origin_of",
    "raised",
    "saved",
    "tell_run_ended",
    "terminal_of",
    "thread_deadline",
    "Io",
    "Run",
    "Steps",
]

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


@contextlib.contextmanager
def _logged() -> Iterator[None]:
    """A checkpointer that fails to keep the deadline is logged: the caller still gets its run."""
    try:
        yield
    except Exception:
        log.warning("could not keep the run's deadline beside its checkpoint", exc_info=True)


def thread_deadline(snapshot: Any) -> float | None:
    """The deadline a thread's state holds (epoch seconds), or None."""
    d = deadline_from_state(getattr(snapshot, "values", None))
    return None if d is None else d.timestamp


# -- how a run ended: its outcome, told once ----------


def raised(exc: BaseException) -> Outcome:
    """The outcome of a run that ended by raising (or whose consumer gave up)."""
    terminal = Terminal.CANCELLED if isinstance(exc, GeneratorExit) else terminal_of(exc)
    return Outcome(terminal=terminal or Terminal.FAILED, reason=type(exc).__name__)


def exceeded(outcome: Outcome, deadline: Deadline | None, state: Any) -> DeadlineExceeded:
    """What a graph without deadline fields raises: the outcome, and the partial state."""
    return DeadlineExceeded(
        outcome.reason, deadline=deadline, step=outcome.step, outcome=outcome, state=state
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


# -- the ends LangGraph did not finish ----------


CANCEL_WRITE_S: Final = 1.0
"""How long a cancelled run may hold up its cancellation to write its outcome (a checkpointer
write takes milliseconds; a stuck one must not keep a cancelled caller waiting)."""
_PERSIST = "langgraph_deadline: write the outcome"


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


def _update_run(
    graph: Pregel[Any, Any, Any, Any], update: Command[Any], cfg: RunnableConfig
) -> None:
    for _ in CompiledStateGraph.stream(graph, update, cfg, control=_persist_control()):
        pass


async def _aupdate_run(
    graph: Pregel[Any, Any, Any, Any], update: Command[Any], cfg: RunnableConfig
) -> None:
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


# -- the wrapped graph and its runs ----------


def saved(graph: Pregel[Any, Any, Any, Any], cfg: RunnableConfig) -> bool:
    """True when a run of `graph` with `cfg` has a thread to checkpoint to."""
    return graph.checkpointer is not None and bool(cfg.get("configurable", {}).get("thread_id"))


class Run:
    """One run of a wrapped graph: `graph` (the compiled graph that runs it), `tracker` (its
    bookkeeping, shared by its steps) and `cfg` (its config), and each thing its life needs
    beyond LangGraph's own loop, as a method. Those that read or write the thread return
    `Steps`: `drive(run.final_state(why))` in sync code, `await adrive(...)` in async code."""

    __slots__ = ("cfg", "graph", "settings", "tracker")

    def __init__(
        self,
        graph: Pregel[Any, Any, Any, Any],
        settings: GraphSettings,
        tracker: GraphRun,
        cfg: RunnableConfig,
    ) -> None:
        self.graph = graph
        self.settings = settings
        self.tracker = tracker
        self.cfg = cfg

    def tell(self, outcome: Outcome | None) -> None:
        """Tell the observers how the run ended, once (`tell_run_ended`)."""
        run = self.tracker
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

    def _keeps(self) -> RunnableConfig | None:
        """The thread's config, when a paused run of a state without the deadline fields must keep
        its deadline on its checkpoint for the resume."""
        graph, run, cfg = self.graph, self.tracker, self.cfg
        if self.settings.has_fields or run.deadline is None or not self.saved():
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

    def saver(self) -> BaseCheckpointSaver[Any] | None:
        """The graph's own checkpointer (None, or `True` for a subgraph that uses its parent's)."""
        graph = self.graph
        cp = graph.checkpointer
        return cp if isinstance(cp, BaseCheckpointSaver) else None

    def keep_deadline(self) -> Steps[None]:
        """Write a paused run's deadline beside its latest checkpoint (see `KEPT_TASK`)."""
        run = self.tracker
        thread = self._keeps()
        cp = self.saver()
        if thread is None or cp is None or run.deadline is None:
            return
        with _logged():
            saved = yield Io(cp.get_tuple, cp.aget_tuple, (thread,))
            if saved is not None:
                write = [(KEPT_CHANNEL, run.deadline.timestamp)]
                yield Io(cp.put_writes, cp.aput_writes, (saved.config, write, KEPT_TASK))

    def saved(self) -> bool:
        """True when the run has a thread to checkpoint to."""
        return saved(self.graph, self.cfg)

    def resume(self) -> Steps[Any]:
        """Give a resumed `run` its thread's deadline, read from its checkpoint (if it has one).
        Returns what the caller gets when that deadline has passed (see `late`), else None."""
        graph, cfg = self.graph, self.cfg
        if not self.saved():
            return self._resumed(None, ())
        snapshot = yield Io(graph.get_state, graph.aget_state, (cfg,))
        if self.settings.has_fields or (cp := self.saver()) is None:
            return self._resumed(snapshot, ())
        kept = yield Io(cp.get_tuple, cp.aget_tuple, (snapshot.config,))
        return self._resumed(snapshot, kept.pending_writes if kept else ())

    def _resumed(self, snapshot: Any, writes: Any) -> Any:
        """The thread's deadline (in state, or beside its checkpoint: `writes`), or `timeout` from
        now for a thread that kept none, bounds the run. An entrypoint's saved value is the user's,
        never read for a deadline."""
        run = self.tracker
        if snapshot is not None and not self.settings.has_state:
            snapshot = snapshot._replace(values=None)
        kept = kept_deadline(snapshot, writes)
        timeout = self.settings.timeout
        if kept is None and timeout is not None:
            kept = Deadline.after(timeout)
        run.deadline = earliest(run.deadline, kept)
        return self.late(snapshot, writes)

    def late(self, snapshot: Any, writes: Any = ()) -> Any:
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
        self.tell(outcome)
        if not self.settings.has_fields:
            raise exceeded(outcome, d, values)
        return {**(values or {}), "deadline_outcome": outcome}

    def _read(self) -> Steps[tuple[Any, tuple[Interrupt, ...]]]:
        """The run's latest state, and the interrupts its checkpoint holds pending (a branch that
        paused in the superstep the deadline cut: LangGraph's own run would return them)."""
        graph, run, cfg = self.graph, self.tracker, self.cfg
        if not self.settings.has_state:
            return None, ()
        if not self.saved():
            return run.latest, ()
        try:
            snapshot = yield Io(graph.get_state, graph.aget_state, (_clean(cfg),))
        except Exception:
            return run.latest, ()
        return snapshot.values, snapshot.interrupts

    def _write(self, update: dict[str, Any]) -> Steps[None]:
        """Write `update` to the run's checkpoint, by a run of LangGraph's own stream (not ours:
        it must not be taken for a user's resume) that drains before any task."""
        graph, cfg = self.graph, self.cfg
        if not (update and self.saved()):
            return
        with _writing():
            yield Io(_update_run, _aupdate_run, (graph, Command(update=update), _clean(cfg)))

    def final_state(self, why: str | None) -> Steps[Any]:
        """The state a run that ended early returns (see `assemble`). With a checkpointer the latest
        state is read from it (it holds the results of the steps that finished in the cut
        superstep), and the outcome, the records and the reply are written to it."""
        run = self.tracker
        latest, pending = yield from self._read()
        state, update = self.assemble(latest, why)
        run.final_news = bool(update)
        yield from self._write(update)
        yield from self.keep_deadline()
        return self._returned(state, pending)

    def keep_records(self) -> Steps[None]:
        """A run that failed (an error that is not the deadline's): its step records are written to
        the checkpoint, its pending steps left as they are for a resume after a fix."""
        run = self.tracker
        if self.settings.has_fields and self.saved() and run.records:
            latest, _ = yield from self._read()
            yield from self._write(run.records_update(latest))

    def keep_end(self, outcome: Outcome | None, values: Any) -> Steps[None]:
        """A run that finished (`outcome` completed) or paused on an interrupt (None): with the
        deadline fields, its checkpoint gets the records its nodes left out of their updates (see
        `GraphRun.trace_at_end`) and a completed run its outcome, which LangGraph's own end
        leaves without one, so that a thread read later tells it from a run cancelled or out of
        time. (Not from the state's channel: LangGraph tells channels a run ends also when `Send`
        tasks are still to come.) `values`: the run's last state, as LangGraph gave it."""
        run = self.tracker
        if run.final is None and self.settings.has_fields and self.saved():
            update = run.records_update(values)
            if outcome is not None and outcome.ok:
                update["deadline_outcome"] = outcome.to_dict()
            yield from self._write(update)

    def keep_left(self, left: list[Outcome]) -> Steps[None]:
        """A run its caller left (a stop, LangGraph Server's `runs.cancel`, a client gone, a stream
        closed): with the deadline fields, how it ended is written to its checkpoint, so that a
        thread read later tells it from a run completed or out of time. `left` holds the outcome
        (cancelled), replaced as soon as it is known by the one to return: the same, with the
        records of the steps it cut; or `completed` when the thread shows the run had done all its
        work (the caller left after its last chunk, before the stream's end). A thread that ended
        already is left as it is. (An async caller shields it from the cancellation for at most
        `CANCEL_WRITE_S`: a write cut then still returns the outcome known.)"""
        graph, cfg = self.graph, self.cfg
        if not (self.settings.has_fields and self.saved()):
            return
        try:
            snapshot = yield Io(graph.get_state, graph.aget_state, (_clean(cfg),))
        except Exception:
            log.warning("could not read the thread of a cancelled run", exc_info=True)
            return
        left[0], update = self._left(snapshot, left[0])
        yield from self._write(update)

    def _left(self, snapshot: Any, outcome: Outcome) -> tuple[Outcome, dict[str, Any]]:
        """How a run its caller left ends, from its thread (`snapshot`), and the update that
        says so (none when the thread ended already, or is an earlier run's that finished)."""
        run = self.tracker
        values: Mapping[str, Any] = snapshot.values if isinstance(snapshot.values, Mapping) else {}
        written = values.get("deadline_outcome")
        done = not snapshot.next and not snapshot.interrupts
        if isinstance(written, Outcome) and (done or not written.ok):
            return outcome, {}
        if done:  # it had done all its work: the caller left after its last chunk
            outcome = run.final_outcome(values) or outcome
            return outcome, {"deadline_outcome": outcome.to_dict()}
        update = {"deadline_outcome": outcome.to_dict(), "deadline": RUN_OVER}
        return outcome, {**update, **run.records_update(values)}

    def _returned(self, state: dict[str, Any], pending: tuple[Interrupt, ...]) -> Any:
        """What a run that ended early returns (its state, with the `__interrupt__` list of the
        interrupts left pending, as LangGraph's own run returns them), or raises for a graph
        without the deadline fields."""
        run = self.tracker
        if pending:
            state["__interrupt__"] = list(pending)
        if not self.settings.has_fields:
            assert run.outcome is not None  # set by `assemble`
            raise exceeded(run.outcome, run.deadline, state if self.settings.has_state else None)
        return state

    def assemble(self, latest: Any, why: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state a run that ended early returns, and the update that brings its checkpoint
        there: the run's outcome, every step record of the run, and (with a `reserve`, for a
        messages state) a short reply telling the user the answer is incomplete.

        The step that was cut is not marked done: a resume that grants more time runs it again."""
        run = self.tracker
        values: Mapping[str, Any] = latest if isinstance(latest, Mapping) else {}
        written = values.get("deadline_outcome")
        if isinstance(written, Outcome) and not written.ok:
            outcome = written
        else:
            outcome = run.outcome or run.ran_out(why)
        if run.outcome is None:
            run.outcome = outcome
        self.tell(outcome)
        state = dict(values)
        update: dict[str, Any] = {}
        settings = self.settings
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
            update.update(run.records_update(values))
        return state, update

    def resumed(self) -> Steps[Any]:
        """`resume`; a resume after the thread's deadline also leaves the thread valid for its
        next turn (see `_answered_late`). What the caller gets, or None to go on."""
        try:
            ended = yield from self.resume()
        except DeadlineExceeded as exc:  # a graph without deadline fields: refused
            exc.state, update = self._answered_late(exc.state, exc.outcome)
            yield from self._write(update)
            raise
        if ended is not None:
            ended, update = self._answered_late(ended, ended["deadline_outcome"])
            yield from self._write(update)
        return ended

    def _answered_late(self, values: Any, outcome: Outcome) -> tuple[Any, dict[str, Any]]:
        """A resume refused after the deadline (a human's approval that came too late): the thread
        stays paused where it was, for a grant, and the tool calls its messages leave open get the
        model-readable "skipped" answer (with the closing reply, given a `reserve`), marked as
        ending messages, as a run that ran out leaves them: the next turn's history is valid (no
        open tool call before a new user message), and a grant removes them before the paused
        run goes on. The state the caller gets, and the update for the checkpoint."""
        messages = messages_of(values)
        if not messages or not self._removes():
            return values, {}
        owed = answer_open_calls(messages, ())
        if not owed:
            return values, {}
        settings = self.settings
        closing = settings.closing_message and settings.reserve > 0
        shown, stored = ending_messages(messages, owed, outcome, closing=closing)
        return {**values, "messages": shown}, {"messages": stored}

    def _removes(self) -> bool:
        """True when the graph's `messages` reducer removes messages (`add_messages`)."""
        graph = self.graph
        return getattr(graph.channels.get("messages"), "operator", None) is add_messages

    def granted(self, input: Any) -> Steps[Any]:
        """`input`; a grant of more time (`Command(update=deadline_input(s))`) on a thread whose
        last run ran out also removes the messages that ended that run (`ENDING`: the cut step's
        owed answers, the closing reply), so that the cut step, still pending, runs again on the
        state it would have seen (docs/concepts.md, rule 3)."""
        graph, cfg = self.graph, self.cfg
        if not self._removable(input):
            return input
        try:
            snapshot = yield Io(graph.get_state, graph.aget_state, (_clean(cfg),))
        except Exception:
            return input
        return _superseding(input, snapshot.values)

    def _removable(self, input: Any) -> bool:
        """A grant, a thread to read, and a `messages` field whose reducer removes
        (`add_messages`)."""
        if not isinstance(input, Command) or not isinstance(input.update, Mapping):
            return False
        if not isinstance(input.update.get("deadline"), Overwrite):
            return False
        return self.saved() and self._removes()

    def too_late(self, input: Any) -> Any:
        """The state a new run whose deadline had passed before it started ends with (its input and
        the outcome), or None to go on. Graphs without deadline fields raise `DeadlineExceeded`."""
        run = self.tracker
        d = run.deadline
        if d is None or not d.expired:
            return None
        outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, reason=_REASON, elapsed_ms=0.0)
        run.outcome = outcome
        self.tell(outcome)
        state = (
            {k: v for k, v in input.items() if k not in _FIELDS}
            if isinstance(input, Mapping)
            else {}
        )
        if not self.settings.has_fields:
            raise exceeded(outcome, d, state if self.settings.has_state else None)
        return {**state, "deadline": d.timestamp, "deadline_outcome": outcome, "deadline_trace": []}

    def _applied(self, input: Any) -> dict[str, Any] | None:
        """The input LangGraph applies for the late run (the outcome in it), or None when there is
        no thread to write to (the caller gets the input and the outcome, at the cost of a dict) or
        the input is not a state (a `Command` granting a deadline: nothing is applied)."""
        run = self.tracker
        if not isinstance(input, Mapping) or run.outcome is None or not self.saved():
            return None
        return {
            **input,
            "deadline_outcome": Overwrite(run.outcome.to_dict()),
            "deadline_trace": Overwrite([]),
        }

    def _last_update(
        self, state: Mapping[str, Any], kwargs: Mapping[str, Any], values_seen: bool
    ) -> list[Any]:
        """The chunks LangGraph's stream of the late run did not give: the update with the outcome
        (no node ran to give it), and the values when none were streamed (a `Command` input)."""
        graph = self.graph
        return closing_chunks(
            state,
            None,
            kwargs.get("stream_mode") or graph.stream_mode,
            subgraphs=bool(kwargs.get("subgraphs", False)),
            version=str(kwargs.get("version", "v1")),
            kinds=("updates",) if values_seen else ("updates", "values"),
        )

    def late_chunks(self, refused: Any, input: Any, **kw: Any) -> Iterator[Any]:
        """The stream of a late run (see the module's docstring)."""
        graph, cfg = self.graph, self.cfg
        applied = self._applied(input)
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
                refused = drive(self.final_state(None))
                seen = False  # the values it ends with are these, the outcome in them
        yield from self._last_update(refused, kw, seen)

    async def alate_chunks(self, refused: Any, input: Any, **kw: Any) -> AsyncIterator[Any]:
        """`late_chunks`, asynchronously."""
        graph, cfg = self.graph, self.cfg
        applied = self._applied(input)
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
                refused = await adrive(self.final_state(None))
                seen = False  # the values it ends with are these, the outcome in them
        for chunk in self._last_update(refused, kw, seen):
            yield chunk

    def late_result(self, refused: Any, input: Any) -> Any:
        """What `invoke` returns for a late run: the state its stream ends with."""
        state = refused
        if self.saved():
            for chunk in self.late_chunks(refused, input, stream_mode="values"):
                state = chunk
        return state

    async def alate_result(self, refused: Any, input: Any) -> Any:
        """`late_result`, asynchronously."""
        state = refused
        if self.saved():
            async for chunk in self.alate_chunks(refused, input, stream_mode="values"):
                state = chunk
        return state
