"""Runs that end without LangGraph finishing them: a resume that comes after the deadline, and a
run the deadline cancelled as a whole (the backstop around `ainvoke`)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from langchain_core.runnables import RunnableConfig

from .._core.deadline import Deadline
from .._core.records import Outcome, StepRecord, Terminal
from .._core.tracker import RUN_KEY, RunTracker
from .state import deadline_from_state
from .terminal import emit_run_outcome, exceeded, outcome_from

if TYPE_CHECKING:
    from .graph import DeadlineGraph

__all__ = ["DEADLINE_META", "backstop", "kept_deadline", "late"]

DEADLINE_META: Final = "langgraph_deadline_at"
"""The checkpoint metadata key holding the run's deadline (epoch seconds)."""

_MAX_EPOCH: Final = 32_503_680_000.0  # year 3000, as `Deadline.at` accepts

log = logging.getLogger("langgraph_deadline")


def kept_deadline(snapshot: Any) -> Deadline | None:
    """The deadline a thread's checkpoint kept: its state's `deadline` field, else (state
    without the deadline fields) the one its run recorded in the checkpoint's metadata."""
    d = deadline_from_state(getattr(snapshot, "values", None))
    if d is not None:
        return d
    metadata = getattr(snapshot, "metadata", None) or {}
    at = metadata.get(DEADLINE_META)
    if isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at) and at >= 0:
        return Deadline.at(min(float(at), _MAX_EPOCH))
    return None


def late(graph: DeadlineGraph, snapshot: Any, run: RunTracker) -> Any:
    """A resume after the checkpointed deadline passed does not start: no node body runs,
    and the checkpoint stays as it was, so a resume that grants a new deadline
    (`Command(resume=..., update=deadline_input(s))`) continues where the run paused.
    Returns what the caller gets (graphs without deadline fields raise), or None to go on."""
    values = getattr(snapshot, "values", None)
    d = kept_deadline(snapshot)
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


async def backstop(graph: DeadlineGraph, run: RunTracker, cfg: RunnableConfig) -> Any:
    """The run's deadline passed with work in flight: it was cancelled as a whole.

    The writes of the superstep in flight are lost (a `reserve` lets nodes finish first);
    the step records are not: every record of this run reaches the returned trace.
    """
    outcome = outcome_from(run, "the run's deadline passed with steps in flight")
    emit_run_outcome(run, outcome)
    if not graph.deadline_settings.has_fields:
        raise exceeded(outcome, run.deadline, run.latest)
    latest = run.latest if isinstance(run.latest, Mapping) else {}
    saved = graph.checkpointer is not None and cfg.get("configurable", {}).get("thread_id")
    clean: RunnableConfig = {
        **cfg,
        "configurable": {k: v for k, v in cfg["configurable"].items() if k != RUN_KEY},
    }
    if saved:
        # The checkpoint may be ahead of the last streamed values (a superstep committed
        # just before the cancel): compare with it, so no record is written twice.
        with contextlib.suppress(Exception):
            latest = (await graph.aget_state(clean)).values
    known = list(latest.get("deadline_trace") or [])
    missing = [r for r in run.records if r not in known]
    if saved:
        update = {"deadline_outcome": outcome, "deadline_trace": missing}
        try:
            await graph.aupdate_state(clean, update, as_node=_last_node(missing, graph))
        except Exception:  # the caller still gets the outcome
            log.warning("could not write the deadline outcome to the checkpoint", exc_info=True)
    return {**latest, "deadline_outcome": outcome, "deadline_trace": [*known, *missing]}


def _last_node(records: list[StepRecord], graph: DeadlineGraph) -> str | None:
    for rec in reversed(records):
        if rec.name in graph.builder.nodes:
            return rec.name
    return None
