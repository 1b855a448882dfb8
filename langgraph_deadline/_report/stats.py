"""Per-step numbers over a trace: how long a step takes (p50/p95/p99), how much of its own budget
and of the run's it uses, how often it runs out, how much work was abandoned, and what cap the
healthy runs suggest.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Final

from .._core.records import StepRecord, StepStatus, Terminal
from .trace import Trace, TraceRun

__all__ = ["CAP_ROUNDING_MS", "StepStats", "percentile", "step_stats"]

CAP_ROUNDING_MS: Final = 10.0


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
