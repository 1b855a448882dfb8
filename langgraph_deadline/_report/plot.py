"""The report's figure (the `plot` extra, matplotlib): one run's waterfall, the per-step
distribution of elapsed times (when the trace has enough runs to show one), and the answers the
user received (when the caller has them), written as PNG, SVG, or an HTML page with the SVG inline.

matplotlib renders PNG and SVG itself, with no browser or external renderer to install; the
figure is built on a bare `Figure` (no pyplot), so it touches no global backend state.
"""

from __future__ import annotations

import html
import io
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .._core.records import StepRecord, StepStatus
from .stats import StepStats
from .trace import Trace, TraceRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FORMATS", "MIN_SAMPLES", "write_plot"]

FORMATS: Final = (".png", ".svg", ".html")

STATUS_COLORS: Final = {
    StepStatus.COMPLETED: "#4c9a5b",
    StepStatus.STALE: "#8fbc8f",
    StepStatus.SKIPPED: "#b0b0b0",
    StepStatus.TIMED_OUT: "#d1493f",
    StepStatus.ABANDONED: "#8b2fc9",
    StepStatus.CANCELLED: "#e39b2d",
    StepStatus.FAILED: "#5a5a5a",
}

SEVERITY: Final = {
    StepStatus.COMPLETED: 0,
    StepStatus.STALE: 1,
    StepStatus.SKIPPED: 2,
    StepStatus.CANCELLED: 3,
    StepStatus.FAILED: 4,
    StepStatus.ABANDONED: 5,
    StepStatus.TIMED_OUT: 5,
}
"""How bad a step's end is: a node is drawn in the colour of the worst of its own end and the
ends of the steps inside it (a tools node that completed with one tool cut is not all green)."""

MIN_SAMPLES: Final = 3
"""The fewest elapsed times of one step worth a distribution: with fewer, the panel is left out."""

_ANSWER_CHARS: Final = 1200


def write_plot(
    path: str | os.PathLike[str],
    trace: Trace,
    stats: Sequence[StepStats],
    run: TraceRun,
    *,
    report_text: str = "",
    answers: Sequence[tuple[str, str]] = (),
    title: str | None = None,
    beside: Sequence[tuple[str, TraceRun]] = (),
) -> Path:
    """Draw `run`'s waterfall, the per-step distributions (steps with at least `MIN_SAMPLES`
    runs) and `answers` (label, what the user received) into `path` (.png, .svg, .html).
    `title` names the run (default: `run <its id>`); `beside` are other runs (name, run) drawn
    above it on the same time axis, to compare with.

    Raises:
        ValueError: an extension other than .png, .svg or .html.
        ImportError: matplotlib is not installed (`pip install 'langgraph-deadline[plot]'`).
    """
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--plot needs a .png, .svg or .html file, got {out.name!r}")
    import matplotlib

    fig = _figure(run, stats, answers, title=title, beside=beside)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "langgraph-deadline"}):
        if suffix == ".html":
            buf = io.StringIO()
            fig.savefig(buf, format="svg")
            out.write_text(_html(run, buf.getvalue(), report_text), encoding="utf-8")
        else:
            fig.savefig(out, format=suffix[1:], dpi=120)
    return out


def _figure(
    run: TraceRun,
    stats: Sequence[StepStats],
    answers: Sequence[tuple[str, str]],
    *,
    title: str | None = None,
    beside: Sequence[tuple[str, TraceRun]] = (),
) -> Figure:
    """The waterfalls of the runs `beside` (name, run), then `run`'s, on one time axis; then
    the distributions and the answers."""
    from matplotlib.figure import Figure

    runs = [*beside, (title or f"run {run.run_id[:12]}", run)]
    drawn = [(name, r, sorted(r.steps, key=lambda s: s.started_at or 0.0)) for name, r in runs]
    shown = [s for s in stats if len(s.elapsed) >= MIN_SAMPLES]
    wrapped = [(label, _wrap(text)) for label, text in answers]
    heights = [max(len(steps), 1) + 1.5 for _, _, steps in drawn]
    if shown:
        heights.append(len(shown) + 1.5)
    heights += [0.3 * (text.count("\n") + 1) + 0.7 for _, text in wrapped]
    fig = Figure(figsize=(11.0, 1.2 + 0.42 * sum(heights)), layout="constrained")
    axes = list(fig.subplots(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0])
    waterfalls = [axes.pop(0) for _ in drawn]
    for ax, (name, run, steps) in zip(waterfalls, drawn, strict=True):
        _waterfall(ax, run, steps, name)
    right = max(ax.get_xlim()[1] for ax in waterfalls)
    for ax in waterfalls:  # one time axis: the runs compare at a glance
        ax.set_xlim(0, right)
    if shown:
        _distribution(axes.pop(0), shown)
    _answers(axes, wrapped)
    return fig


def _wrap(text: str) -> str:
    """`text` cut to `_ANSWER_CHARS` and wrapped, its paragraphs and list lines kept."""
    flat = text.strip() or "(no answer)"
    if len(flat) > _ANSWER_CHARS:
        flat = flat[: _ANSWER_CHARS - 1] + "…"
    lines = [textwrap.fill(line, width=110) for line in flat.splitlines() if line.strip()]
    return "\n".join(lines)


def _answers(axes: Sequence[Axes], answers: Sequence[tuple[str, str]]) -> None:
    """What each run answered the user, one panel per run, top to bottom."""
    for i, (ax, (label, text)) in enumerate(zip(axes, answers, strict=True)):
        ax.set_axis_off()
        title = f"what the user received: {label}" if i == 0 else label
        ax.set_title(title, loc="left", fontsize="medium")
        ax.text(
            0.0, 1.0, text, transform=ax.transAxes, va="top", family="monospace", fontsize="small"
        )


def _worst_inside(node: StepRecord, steps: Sequence[StepRecord]) -> StepRecord | None:
    """The step inside `node` (a tool or model call that started while it ran) that ended
    worst, when it ended worse than the node itself."""
    if node.kind != "node" or node.started_at is None:
        return None
    end = node.started_at + node.elapsed_ms / 1000.0
    inside = [
        s
        for s in steps
        if s.kind != "node" and s.started_at is not None and node.started_at <= s.started_at <= end
    ]
    worst = max(inside, key=lambda s: SEVERITY.get(s.status, 0), default=None)
    if worst is None or SEVERITY.get(worst.status, 0) <= SEVERITY.get(node.status, 0):
        return None
    return worst


def _waterfall(ax: Axes, run: TraceRun, steps: Sequence[StepRecord], name: str) -> None:
    origin = run.origin or 0.0
    labels = []
    seen: set[StepStatus] = set()
    allocated_shown = False
    for y, rec in enumerate(steps):
        left = ((rec.started_at or origin) - origin) * 1000.0
        if rec.allocated_ms is not None:
            ax.barh(
                y,
                rec.allocated_ms,
                left=left,
                height=0.72,
                color="#dfe7f2",
                edgecolor="#7a93b8",
                hatch="//",
                label=None if allocated_shown else "allocated budget",
            )
            allocated_shown = True
        worst = _worst_inside(rec, steps)
        shown = rec.status if worst is None else worst.status
        ax.barh(
            y,
            max(rec.elapsed_ms, 0.5),
            left=left,
            height=0.4,
            color=STATUS_COLORS.get(shown, "#333333"),
            label=f"used: {shown}" if shown not in seen else None,
        )
        seen.add(shown)
        inside = "" if worst is None else f", {rec.status} with {worst.name} {worst.status}"
        ax.annotate(
            f"{rec.elapsed_ms:.0f} ms{inside}",
            (left + rec.elapsed_ms, y),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize="small",
        )
        attempt = f" #{rec.attempt}" if rec.attempt > 1 else ""
        nested = "" if rec.kind == "node" else "↳ "  # a step inside a node
        labels.append(f"{nested}{rec.name}{attempt} ({rec.kind})")
    budget = run.budget_ms
    if budget is not None:
        if run.reserve_ms:
            ax.axvspan(
                budget - run.reserve_ms, budget, color="#d1493f", alpha=0.12, label="reserve"
            )
        ax.axvline(budget, color="#d1493f", linestyle="--", linewidth=1.5, label="deadline")
    if run.elapsed_ms is not None:
        ax.axvline(run.elapsed_ms, color="black", linestyle=":", linewidth=1.2, label="run ended")
    ax.set_yticks(range(len(steps)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the run started")
    ax.set_xlim(left=0)
    ended = f" at {run.ended_at}" if run.ended_at else ""
    budget_text = f" of a {budget:.0f} ms budget" if budget is not None else ""
    used = f"{run.elapsed_ms:.0f} ms" if run.elapsed_ms is not None else "?"
    ax.set_title(f"{name}: {run.terminal or 'no outcome'}{ended}, {used}{budget_text}", loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _distribution(ax: Axes, stats: Sequence[StepStats]) -> None:
    labels = [f"{s.name} ({s.kind})" for s in stats]
    ax.boxplot(
        [list(s.elapsed) for s in stats],
        orientation="horizontal",
        tick_labels=labels,
        widths=0.5,
        flierprops={"markersize": 3},
    )
    caps = [(s.recommended_cap_ms, y) for y, s in enumerate(stats, start=1)]
    xs = [c for c, _ in caps if c is not None]
    ys = [y for c, y in caps if c is not None]
    if xs:
        ax.scatter(xs, ys, marker="|", s=300, color="#d1493f", label="recommended cap", zorder=3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("elapsed ms per step, all runs")
    ax.set_title("where the time goes: elapsed per step", loc="left")
    ax.grid(axis="x", alpha=0.3)


def _html(run: TraceRun, svg: str, report_text: str) -> str:
    start = svg.find("<svg")
    body = svg[start:] if start >= 0 else svg
    title = f"langgraph-deadline report: run {html.escape(run.run_id)}"
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{title}</title>\n"
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
        "pre{background:#f6f8fa;padding:1em;overflow-x:auto}svg{max-width:100%;height:auto}"
        "</style>\n</head>\n<body>\n"
        f"<h1>{title}</h1>\n"
        f"<figure class='deadline-plot'>\n{body}\n</figure>\n"
        f"<pre class='deadline-report'>{html.escape(report_text)}</pre>\n"
        "</body>\n</html>\n"
    )
