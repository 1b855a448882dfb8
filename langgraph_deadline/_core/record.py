"""Where a step record goes: the run's records, the enclosing node's trace, the observers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

from .observe import emit_step
from .plan import PARENT, RunTracker
from .records import StepRecord

__all__ = [
    "child_records",
    "commit_record",
    "cut_inside",
    "ends_its_run",
    "named_run",
    "record_child",
]


def commit_record(record: StepRecord, run: RunTracker | None, key: int | None = None) -> None:
    """The one place a step record is kept: the run's records, the enclosing node's children
    (for the trace in state), and the observers."""
    sink = _CHILDREN.get() if record.kind != "node" else None
    if run is None and sink is not None:
        run = sink.run  # a call inside a node that did not name the run (a middleware's)
    if run is not None:
        if key is not None:
            if not run.close(key, record):
                return
        else:
            run.records.append(record)
    if sink is not None:
        sink.append(record)
    if run is not None:
        emit_step(record, run.run_id, run.deadline.timestamp if run.deadline else None)
    else:
        emit_step(record, *(_NAMED.get() or (None, None)))


_NAMED: Final[ContextVar[tuple[str, float | None] | None]] = ContextVar(
    "langgraph_deadline.named_run", default=None
)


@contextmanager
def named_run(run_id: str, deadline_at: float | None) -> Iterator[None]:
    """The steps recorded in the block belong to run `run_id` (deadline `deadline_at`, epoch
    seconds) in their events: for a run kept without a tracker (`DeadlineMiddleware` alone),
    so that the observers, and the report, group its steps with its run's end."""
    token = _NAMED.set((run_id, deadline_at))
    try:
        yield
    finally:
        _NAMED.reset(token)


class _Sink(list[StepRecord]):
    """The records of the steps inside a node, the node's run (None outside one), and the
    name of a step inside that ends the run by itself when cut (`ends_its_run`)."""

    __slots__ = ("ender", "run")

    def __init__(self, run: RunTracker | None) -> None:
        super().__init__()
        self.run = run
        self.ender: str | None = None


def ends_its_run(name: str) -> None:
    """The step `name`, about to run inside a node, ends its run itself when the run's time
    runs out in it (the agent middleware's model call closes the agent in words). Its cut is
    due a hand-off before the node's; on a busy loop both are due at once and the node's may be
    handled first: the node then still names this step (`cut_inside`)."""
    sink = _CHILDREN.get()
    if sink is not None:
        sink.ender = name


def cut_inside(children: Sequence[StepRecord]) -> StepRecord | None:
    """The last step inside a node, when it was cut by the run's deadline and ends its run
    itself (`ends_its_run`): where the run ran out, whichever cut was handled first."""
    if not isinstance(children, _Sink) or children.ender is None or not children:
        return None
    last = children[-1]
    if last.name != children.ender or last.cancel_source != "run_deadline":
        return None
    return last if last.status.cut else None


_CHILDREN: Final[ContextVar[_Sink | None]] = ContextVar("langgraph_deadline.children", default=None)


class child_records:
    """Collect the records of the steps (tools, model calls, HTTP) run inside a node, so the
    node can add them to the run's trace in state along with its own. Given the node's
    `link` (`parent`), the steps planned inside name it as their `parent`; given its `run`, a
    step recorded inside without one (a middleware's model or tool call) joins that run's
    records and events."""

    __slots__ = ("_parent", "_parent_token", "_run", "_token", "sink")

    def __init__(self, parent: str | None = None, run: RunTracker | None = None) -> None:
        self._parent = parent
        self._run = run

    def __enter__(self) -> list[StepRecord]:
        run = self._run
        if run is None and (outer := _CHILDREN.get()) is not None:
            run = outer.run  # a block inside a node's (a middleware's tool call)
        self.sink = _Sink(run)
        self._token = _CHILDREN.set(self.sink)
        self._parent_token = None if self._parent is None else PARENT.set(self._parent)
        return self.sink

    def __exit__(self, *exc: object) -> None:
        if self._parent_token is not None:
            PARENT.reset(self._parent_token)
        _CHILDREN.reset(self._token)


def record_child(record: StepRecord, run: RunTracker | None) -> None:
    """Record a step that did not run through `run_async`/`run_sync` (a skipped or stale one)."""
    commit_record(record, run)
