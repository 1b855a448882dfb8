"""Where a step record goes: the run's records, the enclosing node's trace, the observers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

from .observe import emit_step
from .plan import PARENT, RunTracker
from .records import StepRecord

__all__ = ["child_records", "commit_record", "named_run", "record_child"]


def commit_record(record: StepRecord, run: RunTracker | None, key: int | None = None) -> None:
    """The one place a step record is kept: the run's records, the enclosing node's children
    (for the trace in state), and the observers."""
    if run is not None:
        if key is not None:
            if not run.close(key, record):
                return
        else:
            run.records.append(record)
    if record.kind != "node" and (sink := _CHILDREN.get()) is not None:
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


_CHILDREN: Final[ContextVar[list[StepRecord] | None]] = ContextVar(
    "langgraph_deadline.children", default=None
)


class child_records:
    """Collect the records of the steps (tools, model calls, HTTP) run inside a node, so the
    node can add them to the run's trace in state along with its own. Given the node's
    `link` (`parent`), the steps planned inside name it as their `parent`."""

    __slots__ = ("_parent", "_parent_token", "_token", "sink")

    def __init__(self, parent: str | None = None) -> None:
        self._parent = parent

    def __enter__(self) -> list[StepRecord]:
        self.sink: list[StepRecord] = []
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
