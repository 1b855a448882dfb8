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
from .trace import Trace, TraceRun, cut_short

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
    `exceeded_rate` is the share cut short, by itself or in a step it ran (`trace.cut_short`);
    `recommended_cap_ms` is the p99 of the `healthy` samples (completed, nothing inside cut
    short, in completed runs) and of the times steps were cut short at (each needed more), times
    the headroom, rounded up to 10 ms; `cap_at_least` when that p99 lies among the cut ones
    (the true value is more, and the cap is above it). `hedges`: extra copies its hedged calls
    started, `hedge_wins`: calls a later copy answered, `held`: calls whose next copy was not
    started, by reason (budget, outage, time). `dropped`: records cut at their own budget in
    runs that completed all the same (an `optional` branch the run went on without).
    `cap_is_run_budget`: the suggestion would have been above the whole budget of the runs the
    step ran in, and is that budget instead (no cap above the run's budget means anything).
    `kept`: records that kept time back for the steps after them (`held_ms`), `kept_ms` the
    median of that time, `cut_kept`: those cut there (`cancel_source="kept_back"`).
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
    cap_at_least: bool = False
    hedges: int = 0
    hedge_wins: int = 0
    held: tuple[tuple[str, int], ...] = ()
    stalled: int = 0  # cut at their idle cap: no progress for that long
    dropped: int = 0
    cap_is_run_budget: bool = False
    kept: int = 0
    kept_ms: float | None = None
    cut_kept: int = 0


def step_stats(trace: Trace, *, headroom: float = 1.2) -> list[StepStats]:
    """Per-step statistics, steps in the order they first appear in the trace."""
    order: dict[tuple[str, str], list[_Item]] = {}
    for run in trace.runs:
        for rec, short in zip(run.steps, cut_short(run.steps), strict=True):
            order.setdefault((rec.name, rec.kind), []).append((rec, run, short))
    for rec, short in zip(trace.loose, cut_short(trace.loose), strict=True):
        order.setdefault((rec.name, rec.kind), []).append((rec, None, short))
    return [_stats(name, kind, items, headroom) for (name, kind), items in order.items()]


_Item = tuple[StepRecord, TraceRun | None, bool]  # a record, its run, whether it was cut short


def _cap(healthy: list[float], cut_at: list[float], headroom: float) -> tuple[float | None, bool]:
    """The suggested cap (ms) from the healthy samples and the times steps were cut short at,
    and whether the p99 is only a bound below (a cut sample at or above it)."""
    samples = healthy + cut_at
    if not samples:
        return None, False
    p99 = percentile(samples, 99)
    steps = round(p99 * headroom / CAP_ROUNDING_MS, 6)  # no step up for a float's last bit
    cap = max(CAP_ROUNDING_MS, math.ceil(steps) * CAP_ROUNDING_MS)
    at_least = any(t >= p99 for t in cut_at)
    if at_least:  # it needed more than p99: never that or below
        cap = max(cap, (math.floor(p99 / CAP_ROUNDING_MS) + 1) * CAP_ROUNDING_MS)
    return cap, at_least


def _stats(name: str, kind: str, items: list[_Item], headroom: float) -> StepStats:
    started = [r for r, _, _ in items if r.status is not StepStatus.SKIPPED]
    elapsed = tuple(r.elapsed_ms for r in started)
    shares = [r.elapsed_ms / r.allocated_ms for r in started if r.allocated_ms]
    per_run: dict[str, tuple[float, float]] = {}
    for rec, run, _ in items:
        budget = run.budget_ms if run is not None else None
        if run is None or not budget or rec.status is StepStatus.SKIPPED:
            continue
        spent, _ = per_run.get(run.run_id, (0.0, budget))
        per_run[run.run_id] = (spent + rec.elapsed_ms, budget)
    healthy = [
        r.elapsed_ms
        for r, run, short in items
        if run is not None
        and run.terminal is Terminal.COMPLETED
        and r.status is StepStatus.COMPLETED
        and not short
    ]
    # A step cut short at t ms needed more than t: a sample of at least t (as a latency book
    # keeps it), so a step often cut short does not look fast.
    cut_at = [r.elapsed_ms for r, _, short in items if short and r.status is not StepStatus.SKIPPED]
    cap, at_least = _cap(healthy, cut_at, headroom)
    run_budgets = [b for _, run, _ in items if run is not None and (b := run.budget_ms)]
    above = cap is not None and bool(run_budgets) and cap > max(run_budgets)
    if above:
        cap = max(run_budgets)
    dropped = sum(
        short and r.status is not StepStatus.SKIPPED and run.terminal is Terminal.COMPLETED
        for r, run, short in items
        if run is not None
    )
    kept = [r.held_ms for r, _, _ in items if r.held_ms]
    held: dict[str, int] = {}
    for rec, _, _ in items:
        if rec.hedge_held is not None:
            held[rec.hedge_held] = held.get(rec.hedge_held, 0) + 1
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
        exceeded_rate=sum(short for _, _, short in items) / len(items),
        abandoned=sum(r.status is StepStatus.ABANDONED for r, _, _ in items),
        stalled=sum(r.stalled for r, _, _ in items),
        healthy=len(healthy),
        recommended_cap_ms=cap,
        cap_at_least=at_least,
        hedges=sum(r.hedges for r, _, _ in items),
        hedge_wins=sum(bool(r.hedges and r.winner) for r, _, _ in items),
        held=tuple(sorted(held.items())),
        dropped=dropped,
        cap_is_run_budget=above,
        kept=len(kept),
        kept_ms=percentile(kept, 50) if kept else None,
        cut_kept=sum(r.cancel_source == "kept_back" for r, _, _ in items),
    )
