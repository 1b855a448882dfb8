"""What the demo shows: one row per run, the side-by-side table, what each user received, and
the picture (the deadline run's waterfall, with every run's answer)."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

__all__ = ["Row", "answer_of", "lookups_answered", "plot", "table"]


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


def plot(trace: Path, path: str, rows: Sequence[Row]) -> str:
    """Draw the traced run's waterfall and every run's answer into `path`; say where."""
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
        )
    except ImportError:
        return "(waterfall skipped: install the 'plot' extra for matplotlib)"
    return f"waterfall of the deadline run: {out}"
