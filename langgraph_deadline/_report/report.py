"""`langgraph-deadline report`: where the budget went, as a plain-text table.

Formats what `read_trace` read and `step_stats` computed: a summary of the runs, then one row per
step.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.records import Terminal
from .stats import CAP_ROUNDING_MS, StepStats, percentile
from .trace import Trace

__all__ = ["format_report"]


def format_report(trace: Trace, stats: Sequence[StepStats], *, headroom: float = 1.2) -> str:
    """The report as plain text: a summary of the runs, then one row per step."""
    lines = _summary(trace)
    headers = (
        "step",
        "kind",
        "n",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "used/budget",
        "of run",
        "exceeded",
        "abandoned",
        "stalled",
        "cap ms (from n)",
    )
    rows = [
        (
            s.name,
            s.kind,
            str(s.count),
            _ms(s.p50),
            _ms(s.p95),
            _ms(s.p99),
            _pct(s.budget_used),
            _pct(s.run_share),
            _pct(s.exceeded_rate),
            str(s.abandoned),
            str(s.stalled),
            f"{_cap(s)} ({s.healthy})",
        )
        for s in stats
    ]
    lines += ["", *_table(headers, rows), ""]
    lines += _hedging(stats)
    lines += _dropped(stats)
    lines += _kept(stats)
    lines.append(
        "used/budget: median elapsed / allocated budget. of run: mean share of the run's budget "
        "spent in the step per run."
    )
    lines.append(
        "exceeded: skipped, timed out or abandoned, itself or in a step it ran (a tool call in "
        "its node). stalled: cut at their idle cap, no progress for that long. "
        "cap: p99 elapsed of the other completed steps in completed runs and of "
        f"the steps cut short (at their cut) x {headroom:g}, rounded up to "
        f"{CAP_ROUNDING_MS:g} ms; >=: that p99 lies among the cut ones, which needed more; "
        "run: that would be above the run's whole budget, so it is the budget (a step cut "
        "there each time, as an optional branch is, gives no higher bound)."
    )
    return "\n".join(lines)


def _summary(trace: Trace) -> list[str]:
    """The runs in a few lines: how they ended, their budgets and wall times, where the ones
    that ran out ended, and what of the trace was not read."""
    runs = [r for r in trace.runs if r.terminal is not None]
    n_steps = sum(len(r.steps) for r in trace.runs) + len(trace.loose)
    counts: dict[str, int] = {}
    for run in runs:
        counts[str(run.terminal)] = counts.get(str(run.terminal), 0) + 1
    by_terminal = ", ".join(
        f"{n} {t}" for t, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    lines = [f"{len(runs)} runs ({by_terminal or 'none ended'}), {n_steps} step records"]
    budgets = [b for r in runs if (b := r.budget_ms) is not None]
    walls = [r.elapsed_ms for r in runs if r.elapsed_ms is not None]
    if budgets:
        lines.append(f"run budget: p50 {_ms(percentile(budgets, 50))} ms")
    if walls:
        lines.append(
            "run wall time: "
            + ", ".join(f"p{q} {_ms(percentile(walls, q))} ms" for q in (50, 95, 99))
        )
    ended: dict[str, int] = {}
    for run in runs:
        if run.terminal is Terminal.DEADLINE_EXCEEDED:
            ended[run.ended_at or "?"] = ended.get(run.ended_at or "?", 0) + 1
    if ended:
        where = ", ".join(
            f"{s} ({n})" for s, n in sorted(ended.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        lines.append(f"deadline_exceeded runs ended at: {where}")
    if trace.bad_lines:
        lines.append(f"skipped {trace.bad_lines} lines that are not step or run events")
    return lines


def _hedging(stats: Sequence[StepStats]) -> list[str]:
    """One line per hedged step: the extra copies, the calls a copy answered, those held back."""
    out = []
    for s in stats:
        if not s.hedges and not s.held:
            continue
        line = (
            f"hedged {s.name}: {s.hedges} extra copies for {s.count} calls "
            f"({s.hedges / s.count:.1%}), {s.hedge_wins} answered by a later copy"
        )
        if s.held:
            line += "; copies not started: " + ", ".join(f"{why} {n}" for why, n in s.held)
        out.append(line)
    return [*out, ""] if out else []


def _dropped(stats: Sequence[StepStats]) -> list[str]:
    """One line per step the runs went on without: cut at its own budget in a completed run."""
    out = [
        f"dropped {s.name}: {s.dropped} of {s.count} cut at their own budget, the run went on "
        "without them (optional)"
        for s in stats
        if s.dropped
    ]
    return [*out, ""] if out else []


def _kept(stats: Sequence[StepStats]) -> list[str]:
    """One line per step that kept time back for the steps after it: how often, how much, and
    how many were cut there."""
    out = [
        f"kept back by {s.name}: {s.kept} of {s.count} kept a median {_ms(s.kept_ms)} ms for "
        f"the steps after it, {s.cut_kept} cut there"
        for s in stats
        if s.kept
    ]
    return [*out, ""] if out else []


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def fmt(cells: Sequence[str]) -> str:
        out = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return [fmt(headers), *(fmt(r) for r in rows)]


def _ms(value: float | None, *, whole: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if whole or value >= 100 else f"{value:.1f}"


def _cap(stats: StepStats) -> str:
    """The suggested cap; `>=` when it is only a bound below (steps cut short needed more),
    `run` when it is the run's whole budget (it would have been above it)."""
    if stats.cap_is_run_budget:
        return "run " + _ms(stats.recommended_cap_ms, whole=True)
    return (">=" if stats.cap_at_least else "") + _ms(stats.recommended_cap_ms, whole=True)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"
