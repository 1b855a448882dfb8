"""Reading a JSON-lines trace back: steps grouped by run, bad lines counted, runs looked up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langgraph_deadline._report.trace import Trace, read_trace


def test_read_trace_groups_steps_by_run_and_counts_bad_lines(trace_file: Path) -> None:
    trace = read_trace([trace_file])
    assert [r.run_id for r in trace.runs][-2:] == ["late", "odd"]
    assert len(trace.runs) == 12
    assert trace.bad_lines == 2
    assert len(trace.loose) == 1
    late = trace.run("late")
    assert late.budget_ms == pytest.approx(1000.0)
    assert late.reserve_ms == 100.0
    assert [s.name for s in late.steps] == ["fetch", "answer"]


def test_default_run_to_draw_is_the_one_that_used_most_of_its_budget(trace_file: Path) -> None:
    trace = read_trace([trace_file])
    assert trace.run().run_id == "late"
    assert trace.run("od").run_id == "odd"
    with pytest.raises(LookupError, match="12 runs"):  # "" is a prefix of every id
        trace.run("")
    with pytest.raises(LookupError, match="no run"):
        trace.run("nope")
    with pytest.raises(LookupError, match="no runs"):
        Trace(runs=()).run()


def test_tokens_after_deadline_lines_are_skipped_not_bad(trace_file: Path) -> None:
    late = {"v": 1, "event": "tokens_after_deadline", "run_id": "late", "step": "m", "tokens": 1}
    with trace_file.open("a") as f:
        f.write(json.dumps(late) + "\n")
    trace = read_trace([trace_file])
    assert trace.bad_lines == 2 and len(trace.runs) == 12
