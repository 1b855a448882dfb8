"""What the demo shows: one row per run, the side-by-side table, what each user received, and
the picture (the naive and the deadline run's waterfalls, with every run's answer)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from .. import StepRecord, Terminal
from .._report.trace import TraceRun
from ..types import StepStatus

__all__ = [
    "Row",
    "Span",
    "answer_of",
    "lookups_answered",
    "plot",
    "quiet_run_log",
    "span_of",
    "table",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    label: str
    budget: float
    wall: float
    terminal: str
    lookups_done: float | None  # seconds from the start to the end of the lookups (None: never)
    tool_requests_past_deadline: int
    tokens_after_deadline: int | None
    model_requests_after_deadline: int | None
    lookups_answered: int
    answer: str  # what the user received: the run's last assistant message
    started_at: float = 0.0  # epoch seconds
    nodes: tuple[Span, ...] = ()  # each node's time, as the run's stream told it


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """A node of a run, from the stream: when it started and ended (s from the run's start)."""

    node: str
    start: float
    end: float
    status: StepStatus

    @property
    def said(self) -> str:
        """How the node ended, on the demo's progress line."""
        if self.status is StepStatus.SKIPPED:
            return "not started: no time left"
        return "cut at its budget" if self.status.cut else "done"


def span_of(node: str, update: Any, start: float, end: float) -> Span:
    """`node`'s span, from its update: its own record says whether the deadline cut it (a node
    with no record, the naive run's, completed)."""
    records = (update.get(node) or {}).get("deadline_trace") or ()
    found = (r.status for r in records if getattr(r, "name", None) == node)
    return Span(node, start, end, next(found, StepStatus.COMPLETED))


@contextlib.contextmanager
def quiet_run_log() -> Iterator[None]:
    """The table says how each run ended: the WARNING a run that did not complete writes is for
    a server's log, not the demo's screen."""
    log = logging.getLogger("langgraph_deadline")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _as_trace_run(row: Row) -> TraceRun:
    """A run that left no trace (the naive one), drawn from its stream: one record per node."""
    steps = tuple(
        StepRecord(
            name=span.node,
            kind="node",
            attempt=1,
            remaining_ms=None,
            requested_ms=None,
            allocated_ms=None,
            clamped=False,
            elapsed_ms=(span.end - span.start) * 1000.0,
            status=span.status,
            started_at=row.started_at + span.start,
        )
        for span in row.nodes
    )
    return TraceRun(
        run_id=row.label,
        steps=steps,
        terminal=Terminal.COMPLETED if row.terminal.startswith("completed") else None,
        elapsed_ms=row.wall * 1000.0,
        started_at=row.started_at,
        deadline_at=row.started_at + row.budget,  # the user's budget: drawn as the deadline
    )


def answer_of(state: dict[str, Any]) -> str:
    """The run's answer to the user: its last assistant message that asks no tool."""
    for m in reversed(state.get("messages") or []):
        if isinstance(m, AIMessage) and not m.tool_calls:
            return m.text
    return ""


def lookups_answered(state: dict[str, Any]) -> int:
    """How many lookups answered (not with an error or a timeout message)."""
    return sum(
        1
        for m in state.get("messages") or []
        if isinstance(m, ToolMessage) and m.status == "success"
    )


def table(rows: Sequence[Row], lookups: int, notes: Sequence[str] = ()) -> str:
    """The runs side by side, `notes` under them, then what each user received."""
    head = (
        "run",
        "budget s",
        "wall s",
        "terminal",
        "lookups done at s",
        "lookups answered",
        "tool requests alive past deadline",
        "tokens streamed after deadline",
    )

    def n(value: int | None) -> str:
        return "n/a" if value is None else str(value)

    cells = [
        (
            r.label,
            f"{r.budget:.1f}",
            f"{r.wall:.2f}",
            r.terminal,
            "-" if r.lookups_done is None else f"{r.lookups_done:.2f}",
            f"{r.lookups_answered}/{lookups}",
            str(r.tool_requests_past_deadline),
            n(r.tokens_after_deadline),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    out += [textwrap.fill(note, width=100, subsequent_indent="  ") for note in notes]
    out.append("")
    out.append("What the user received:")
    for r in rows:
        lines = (r.answer or "(no answer)").splitlines()
        text = "\n".join(textwrap.fill(line, width=96) for line in lines if line.strip())
        out += [f"  {r.label} (after {r.wall:.2f} s):", textwrap.indent(text, "    ")]
    return "\n".join(out)


def plot(trace: Path, path: str, rows: Sequence[Row], *, traced: Row, beside: Row) -> str:
    """Draw the `traced` run's waterfall, `beside`'s (from its stream) above it, and every
    run's answer into `path`; say where."""
    try:
        from .._report.plot import write_plot
        from .._report.report import format_report
        from .._report.stats import step_stats
        from .._report.trace import read_trace
    except ImportError:
        return "(waterfall skipped: install the 'plot' extra for matplotlib)"
    data = read_trace([trace])
    stats = step_stats(data)
    if not data.runs:
        return "(no run recorded)"
    try:
        answers = [(f"{r.label}, after {r.wall:.2f} s ({r.terminal})", r.answer) for r in rows]
        out = write_plot(
            path,
            data,
            stats,
            data.runs[-1],
            report_text=format_report(data, stats),
            answers=answers,
            title=traced.label,
            beside=[(beside.label, _as_trace_run(beside))],
        )
    except ImportError:
        return "(waterfall skipped: install the 'plot' extra for matplotlib)"
    return f"waterfalls of the {beside.label} and {traced.label} runs: {out}"
