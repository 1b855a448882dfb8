"""`langgraph-deadline report` arithmetic on a hand-written trace: percentiles, rates, caps."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_deadline._report.stats import percentile, step_stats
from langgraph_deadline._report.trace import read_trace


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0], 99) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 95) == 95.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_step_stats_per_step(trace_file: Path) -> None:
    stats = {s.name: s for s in step_stats(read_trace([trace_file]))}
    fetch = stats["fetch"]
    assert fetch.count == 13  # 10 healthy + late + odd + loose
    assert fetch.p50 == pytest.approx(60.0)  # median of 5, 10..100, 700, 900
    assert fetch.exceeded_rate == pytest.approx(1 / 13)
    # recommended cap: p99 of completed fetches in completed runs (10..100 ms) and of the one
    # cut at 900 ms (it needed more): 820 ms x 1.2, a bound below (the cut one is above it)
    assert fetch.healthy == 10
    assert (fetch.recommended_cap_ms, fetch.cap_at_least) == (990.0, True)
    answer = stats["answer"]
    assert answer.elapsed == (50.0,) * 10  # the skipped one did not start
    assert answer.exceeded_rate == pytest.approx(1 / 11)
    assert answer.run_share == pytest.approx(0.05)
    assert answer.budget_used == pytest.approx(0.05)
    audit = stats["audit"]
    assert audit.abandoned == 1
    # never seen healthy, abandoned at 120 ms: it needs more than that
    assert (audit.recommended_cap_ms, audit.cap_at_least) == (150.0, True)
    assert audit.budget_used == pytest.approx(1.2)


def test_headroom_scales_the_cap(trace_file: Path) -> None:
    stats = {s.name: s for s in step_stats(read_trace([trace_file]), headroom=2.0)}
    assert stats["answer"].recommended_cap_ms == 100.0  # 50 ms x 2
    # 820 ms x 2 is above the runs' whole budget (1000 ms): the suggestion is that budget
    assert (stats["fetch"].recommended_cap_ms, stats["fetch"].cap_is_run_budget) == (1000.0, True)
