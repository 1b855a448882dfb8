"""`langgraph-deadline report`: where the budget went, from a JSON-lines trace.

Reads what `JsonlTraceWriter` wrote and answers, per step: how long it takes (p50/p95/p99), how
much of its own budget and of the run's it uses, how often it runs out of budget, how much work
was abandoned, and what cap the healthy runs suggest.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from .._core.records import StepRecord, StepStatus, Terminal

__all__ = [
    "StepStats",
    "Trace",
    "TraceRun",
    "format_report",
    "percentile",
    "read_trace",
    "step_stats",
]

CAP_ROUNDING_MS: Final = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class TraceRun:
    """One run of a trace: its steps in the order they ended, and its run line when there is
    one (`terminal` None: the trace has no run line for it, e.g. a run still going)."""

    run_id: str
    steps: tuple[StepRecord, ...]
    terminal: Terminal | None = None
    ended_at: str | None = None  # the step where the run ended
    elapsed_ms: float | None = None
    started_at: float | None = None
    deadline_at: float | None = None
    reserve_ms: float = 0.0

    @property
    def budget_ms(self) -> float | None:
        if self.deadline_at is None or self.started_at is None:
            return None
        return (self.deadline_at - self.started_at) * 1000.0

    @property
    def origin(self) -> float | None:
        """Epoch seconds of the run's start (its first step's when there is no run line)."""
        if self.started_at is not None:
            return self.started_at
        starts = [s.started_at for s in self.steps if s.started_at]
        return min(starts) if starts else None


@dataclasses.dataclass(frozen=True, slots=True)
class Trace:
    """Runs in the order they first appear; `loose` holds steps outside any run."""

    runs: tuple[TraceRun, ...]
    loose: tuple[StepRecord, ...] = ()
    bad_lines: int = 0

    def run(self, run_id: str | None = None) -> TraceRun:
        """The run `run_id` (a unique prefix will do). By default the slowest run relative to
        its budget (the largest share of its budget used, or the longest when runs have no
        deadline); the last one on a tie; the last run when none has a run line.

        Raises:
            LookupError: no such run, or the trace has none.
        """
        if not self.runs:
            raise LookupError("the trace has no runs")
        if run_id is None:
            timed = [r for r in self.runs if r.elapsed_ms is not None]
            if not timed:
                return self.runs[-1]
            return max(reversed(timed), key=_slowness)
        found = [r for r in self.runs if r.run_id.startswith(run_id)]
        if len(found) != 1:
            what = "no run" if not found else f"{len(found)} runs"
            raise LookupError(f"{what} with id {run_id!r} in the trace")
        return found[0]


def _slowness(run: TraceRun) -> tuple[float, float]:
    elapsed = run.elapsed_ms or 0.0
    budget = run.budget_ms
    return (elapsed / budget if budget else 0.0, elapsed)


def read_trace(paths: Iterable[str | os.PathLike[str]]) -> Trace:
    """Read JSON-lines traces (as written by `JsonlTraceWriter`). Tokens-after-deadline lines are
    skipped; other lines that are not step or run events are counted in `bad_lines`.

    Raises:
        OSError: a file cannot be read.
    """
    steps: dict[str | None, list[StepRecord]] = {}
    runs: dict[str, dict[str, Any]] = {}
    bad = 0
    for path in paths:
        with Path(path).open(encoding="utf-8") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    kind = data.get("event")
                    if kind == "step":
                        steps.setdefault(data.get("run_id"), []).append(StepRecord.from_dict(data))
                    elif kind == "run":
                        runs[str(data["run_id"])] = data
                        steps.setdefault(str(data["run_id"]), [])
                    elif kind == "tokens_after_deadline":
                        continue  # counted by the metrics backends, not part of the report
                    else:
                        bad += 1
                except (ValueError, KeyError, TypeError, AttributeError):
                    bad += 1
    loose = tuple(steps.pop(None, []))
    out = []
    for run_id, records in steps.items():
        info = runs.get(str(run_id), {})
        terminal = info.get("terminal")
        out.append(
            TraceRun(
                run_id=str(run_id),
                steps=tuple(records),
                terminal=_terminal(terminal),
                ended_at=info.get("step"),
                elapsed_ms=info.get("elapsed_ms"),
                started_at=info.get("started_at"),
                deadline_at=info.get("deadline_at"),
                reserve_ms=info.get("reserve_ms") or 0.0,
            )
        )
    return Trace(runs=tuple(out), loose=loose, bad_lines=bad)


def _terminal(value: object) -> Terminal | None:
    try:
        return Terminal(value) if isinstance(value, str) else None
    except ValueError:
        return None


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100), interpolating linearly between the closest ranks.

    Raises:
        ValueError: `values` is empty.
    """
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclasses.dataclass(frozen=True, slots=True)
class StepStats:
    """One step's numbers over a trace. Times in ms; shares and rates in 0..1; None: no data.

    `elapsed` holds the elapsed times of the records that started (not skipped);
    `recommended_cap_ms` is the p99 of the completed records of completed runs times the
    headroom, rounded up to 10 ms, from `healthy` samples.
    """

    name: str
    kind: str
    count: int
    elapsed: tuple[float, ...]
    p50: float | None
    p95: float | None
    p99: float | None
    budget_used: float | None  # median of elapsed / allocated
    run_share: float | None  # mean, over the runs it ran in, of its time / the run's budget
    exceeded_rate: float
    abandoned: int
    healthy: int
    recommended_cap_ms: float | None


def step_stats(trace: Trace, *, headroom: float = 1.2) -> list[StepStats]:
    """Per-step statistics, steps in the order they first appear in the trace."""
    order: dict[tuple[str, str], list[tuple[StepRecord, TraceRun | None]]] = {}
    for run in trace.runs:
        for rec in run.steps:
            order.setdefault((rec.name, rec.kind), []).append((rec, run))
    for rec in trace.loose:
        order.setdefault((rec.name, rec.kind), []).append((rec, None))
    return [_stats(name, kind, items, headroom) for (name, kind), items in order.items()]


def _stats(
    name: str, kind: str, items: list[tuple[StepRecord, TraceRun | None]], headroom: float
) -> StepStats:
    started = [r for r, _ in items if r.status is not StepStatus.SKIPPED]
    elapsed = tuple(r.elapsed_ms for r in started)
    shares = [r.elapsed_ms / r.allocated_ms for r in started if r.allocated_ms]
    per_run: dict[str, tuple[float, float]] = {}
    for rec, run in items:
        budget = run.budget_ms if run is not None else None
        if run is None or not budget or rec.status is StepStatus.SKIPPED:
            continue
        spent, _ = per_run.get(run.run_id, (0.0, budget))
        per_run[run.run_id] = (spent + rec.elapsed_ms, budget)
    healthy = [
        r.elapsed_ms
        for r, run in items
        if run is not None
        and run.terminal is Terminal.COMPLETED
        and r.status is StepStatus.COMPLETED
    ]
    cap = None
    if healthy:
        raw = percentile(healthy, 99) * headroom
        cap = max(CAP_ROUNDING_MS, math.ceil(raw / CAP_ROUNDING_MS) * CAP_ROUNDING_MS)
    return StepStats(
        name=name,
        kind=kind,
        count=len(items),
        elapsed=elapsed,
        p50=percentile(elapsed, 50) if elapsed else None,
        p95=percentile(elapsed, 95) if elapsed else None,
        p99=percentile(elapsed, 99) if elapsed else None,
        budget_used=percentile(shares, 50) if shares else None,
        run_share=(sum(s / b for s, b in per_run.values()) / len(per_run)) if per_run else None,
        exceeded_rate=sum(r.status.ran_out for r, _ in items) / len(items),
        abandoned=sum(r.status is StepStatus.ABANDONED for r, _ in items),
        healthy=len(healthy),
        recommended_cap_ms=cap,
    )


def format_report(trace: Trace, stats: Sequence[StepStats], *, headroom: float = 1.2) -> str:
    """The report as plain text: a summary of the runs, then one row per step."""
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
            f"{_ms(s.recommended_cap_ms, whole=True)} ({s.healthy})",
        )
        for s in stats
    ]
    lines += ["", *_table(headers, rows), ""]
    lines.append(
        "used/budget: median elapsed / allocated budget. of run: mean share of the run's budget "
        "spent in the step per run."
    )
    lines.append(
        "exceeded: skipped, timed out or abandoned. cap: p99 elapsed of completed steps in "
        f"completed runs x {headroom:g}, rounded up to {CAP_ROUNDING_MS:g} ms."
    )
    return "\n".join(lines)


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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"
