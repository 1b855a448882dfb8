"""`langgraph-deadline report` arithmetic on hand-written traces: percentiles, rates, caps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_deadline.__main__ import main
from langgraph_deadline._report.report import (
    Trace,
    format_report,
    percentile,
    read_trace,
    step_stats,
)

T0 = 1_700_000_000.0


def _step(run: str | None, name: str, elapsed: float, status: str = "completed", **kw: Any) -> str:
    data = {
        "v": 1,
        "event": "step",
        "run_id": run,
        "deadline_at": T0 + 1.0,
        "name": name,
        "kind": kw.pop("kind", "node"),
        "attempt": 1,
        "status": status,
        "remaining_ms": 1000.0,
        "requested_ms": None,
        "allocated_ms": kw.pop("allocated", 1000.0),
        "clamped": True,
        "elapsed_ms": elapsed,
        "side_effect_started": False,
        "cancel_source": None,
        "started_at": kw.pop("started_at", T0),
    }
    return json.dumps(data)


def _run(run: str, terminal: str, elapsed: float, step: str | None = None) -> str:
    return json.dumps(
        {
            "v": 1,
            "event": "run",
            "run_id": run,
            "terminal": terminal,
            "step": step,
            "elapsed_ms": elapsed,
            "started_at": T0,
            "deadline_at": T0 + 1.0,
            "budget_ms": 1000.0,
            "reserve_ms": 100.0,
        }
    )


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    lines = []
    for i in range(10):  # healthy runs: fetch takes 10..100 ms, answer 50 ms
        run = f"ok{i}"
        lines += [_step(run, "fetch", 10.0 * (i + 1)), _step(run, "answer", 50.0)]
        lines.append(_run(run, "completed", 10.0 * (i + 1) + 50.0))
    # one run where fetch hung: cut at its budget, answer skipped
    lines += [
        _step("late", "fetch", 900.0, "timed_out", allocated=900.0),
        _step("late", "answer", 0.0, "skipped", allocated=0.0),
        _run("late", "deadline_exceeded", 905.0, step="fetch"),
    ]
    # a run that completed although fetch was slow, with sync work abandoned in `audit`
    lines += [
        _step("odd", "fetch", 700.0),
        _step("odd", "audit", 120.0, "abandoned", allocated=100.0),
        _run("odd", "deadline_exceeded", 830.0, step="audit"),
        "not json",
        json.dumps({"event": "something else"}),
        _step(None, "fetch", 5.0),  # a step outside any run
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0], 99) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 95) == 95.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


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


def test_step_stats_per_step(trace_file: Path) -> None:
    stats = {s.name: s for s in step_stats(read_trace([trace_file]))}
    fetch = stats["fetch"]
    assert fetch.count == 13  # 10 healthy + late + odd + loose
    assert fetch.p50 == pytest.approx(60.0)  # median of 5, 10..100, 700, 900
    assert fetch.exceeded_rate == pytest.approx(1 / 13)
    # recommended cap: p99 of completed fetches in completed runs only (10..100 ms) x 1.2
    assert fetch.healthy == 10
    assert fetch.recommended_cap_ms == 120.0
    answer = stats["answer"]
    assert answer.elapsed == (50.0,) * 10  # the skipped one did not start
    assert answer.exceeded_rate == pytest.approx(1 / 11)
    assert answer.run_share == pytest.approx(0.05)
    assert answer.budget_used == pytest.approx(0.05)
    audit = stats["audit"]
    assert audit.abandoned == 1
    assert audit.recommended_cap_ms is None  # never seen healthy
    assert audit.budget_used == pytest.approx(1.2)


def test_headroom_scales_the_cap(trace_file: Path) -> None:
    stats = {s.name: s for s in step_stats(read_trace([trace_file]), headroom=2.0)}
    assert stats["fetch"].recommended_cap_ms == 200.0


def test_format_report_has_the_summary_and_one_row_per_step(trace_file: Path) -> None:
    trace = read_trace([trace_file])
    text = format_report(trace, step_stats(trace))
    assert text.startswith("12 runs (10 completed, 2 deadline_exceeded), 25 step records")
    assert "deadline_exceeded runs ended at: audit (1), fetch (1)" in text
    assert "skipped 2 lines" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:6].strip()}
    assert rows["fetch"][:3] == ["fetch", "node", "13"]
    assert rows["fetch"][-2:] == ["120", "(10)"]
    assert rows["audit"][-4:] == ["100%", "1", "-", "(0)"]


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


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["report", str(empty)]) == 1
    assert "no step or run events" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", str(empty), "--plot", "out.pdf"])
    with pytest.raises(SystemExit):
        main(["report", str(empty), "--headroom", "0.5"])
