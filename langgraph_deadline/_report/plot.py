"""The report's figure (the `plot` extra, matplotlib): one run's waterfall and the per-step
distribution of elapsed times, written as PNG, SVG, or an HTML page with the SVG inline.

matplotlib renders PNG and SVG itself, with no browser or external renderer to install; the
figure is built on a bare `Figure` (no pyplot), so it touches no global backend state.
"""

from __future__ import annotations

import html
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .._core.records import StepRecord, StepStatus
from .stats import StepStats
from .trace import Trace, TraceRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FORMATS", "write_plot"]

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


def write_plot(
    path: str | os.PathLike[str],
    trace: Trace,
    stats: Sequence[StepStats],
    run: TraceRun,
    *,
    report_text: str = "",
) -> Path:
    """Draw `run`'s waterfall and the per-step distributions into `path` (.png, .svg, .html).

    Raises:
        ValueError: an extension other than .png, .svg or .html.
        ImportError: matplotlib is not installed (`pip install 'langgraph-deadline[plot]'`).
    """
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--plot needs a .png, .svg or .html file, got {out.name!r}")
    import matplotlib

    fig = _figure(run, stats)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "langgraph-deadline"}):
        if suffix == ".html":
            buf = io.StringIO()
            fig.savefig(buf, format="svg")
            out.write_text(_html(run, buf.getvalue(), report_text), encoding="utf-8")
        else:
            fig.savefig(out, format=suffix[1:], dpi=120)
    return out


def _figure(run: TraceRun, stats: Sequence[StepStats]) -> Figure:
    from matplotlib.figure import Figure

    steps = sorted(run.steps, key=lambda s: s.started_at or 0.0)
    shown = [s for s in stats if s.elapsed]
    top, bottom = max(len(steps), 1), max(len(shown), 1)
    fig = Figure(figsize=(11.0, 2.6 + 0.42 * (top + bottom)), layout="constrained")
    waterfall, distribution = fig.subplots(2, 1, height_ratios=[top + 1.5, bottom + 1.5])
    _waterfall(waterfall, run, steps)
    _distribution(distribution, shown)
    return fig


def _waterfall(ax: Axes, run: TraceRun, steps: Sequence[StepRecord]) -> None:
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
        ax.barh(
            y,
            max(rec.elapsed_ms, 0.5),
            left=left,
            height=0.4,
            color=STATUS_COLORS.get(rec.status, "#333333"),
            label=f"used: {rec.status}" if rec.status not in seen else None,
        )
        seen.add(rec.status)
        ax.annotate(
            f"{rec.elapsed_ms:.0f} ms",
            (left + rec.elapsed_ms, y),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize="small",
        )
        attempt = f" #{rec.attempt}" if rec.attempt > 1 else ""
        labels.append(f"{rec.name}{attempt} ({rec.kind})")
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
    ax.set_title(
        f"run {run.run_id[:12]}: {run.terminal or 'no outcome'}{ended}, {used}{budget_text}",
        loc="left",
    )
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def _distribution(ax: Axes, stats: Sequence[StepStats]) -> None:
    if not stats:
        ax.set_axis_off()
        return
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
