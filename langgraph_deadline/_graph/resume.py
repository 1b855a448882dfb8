"""A resume runs to the deadline its thread kept, and does not start once it has passed.

A state with the deadline fields keeps it there. A paused run of a state without them keeps it
beside its checkpoint, as one pending write of a task LangGraph does not know: LangGraph keeps
such a write with the checkpoint and otherwise leaves it alone (not applied on a resume, not in
the snapshot's values, metadata, tasks or config), so nothing of ours shows where users look."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from .._core.clock import SYSTEM_CLOCK
from .._core.deadline import Deadline, earliest
from .._core.plan import RunTracker
from .._core.records import Outcome, Terminal
from .._core.validate import check_timestamp
from .state import deadline_from_state
from .terminal import emit_run_outcome, exceeded

if TYPE_CHECKING:
    from .graph import DeadlineRuns

__all__ = [
    "KEPT_CHANNEL",
    "KEPT_TASK",
    "akeep_deadline",
    "aresume",
    "late",
    "resume",
    "keep_deadline",
    "kept_deadline",
    "saved",
    "saver",
    "thread_deadline",
]

log = logging.getLogger("langgraph_deadline")

KEPT_TASK: Final = "langgraph-deadline"
KEPT_CHANNEL: Final = "__langgraph_deadline__"
"""The task id and channel of the write that keeps a paused run's deadline (epoch seconds)."""


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


def keep_deadline(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> None:
    """Write a paused run's deadline beside its latest checkpoint (see `KEPT_TASK`)."""
    thread = _keeps(graph, run, cfg)
    cp = saver(graph)
    if thread is None or cp is None or run.deadline is None:
        return
    with _logged():
        saved = cp.get_tuple(thread)
        if saved is not None:
            cp.put_writes(saved.config, [(KEPT_CHANNEL, run.deadline.timestamp)], KEPT_TASK)


async def akeep_deadline(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> None:
    """`keep_deadline`, asynchronously."""
    thread = _keeps(graph, run, cfg)
    cp = saver(graph)
    if thread is None or cp is None or run.deadline is None:
        return
    with _logged():
        saved = await cp.aget_tuple(thread)
        if saved is not None:
            write = [(KEPT_CHANNEL, run.deadline.timestamp)]
            await cp.aput_writes(saved.config, write, KEPT_TASK)


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


def resume(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Any:
    """Give a resumed `run` its thread's deadline, read from its checkpoint (if it has one).
    Returns what the caller gets when that deadline has passed (see `late`), else None."""
    if not saved(graph, cfg):
        return _resumed(graph, run, None, ())
    snapshot = graph.get_state(cfg)
    if graph.deadline_settings.has_fields or (cp := saver(graph)) is None:
        return _resumed(graph, run, snapshot, ())
    kept = cp.get_tuple(snapshot.config)
    return _resumed(graph, run, snapshot, kept.pending_writes if kept else ())


async def aresume(graph: DeadlineRuns, run: RunTracker, cfg: RunnableConfig) -> Any:
    """`resume`, asynchronously."""
    if not saved(graph, cfg):
        return _resumed(graph, run, None, ())
    snapshot = await graph.aget_state(cfg)
    if graph.deadline_settings.has_fields or (cp := saver(graph)) is None:
        return _resumed(graph, run, snapshot, ())
    kept = await cp.aget_tuple(snapshot.config)
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
