"""`langgraph-deadline report` as text: the summary, one row per step, and the CLI's errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline.__main__ import main
from langgraph_deadline._core.observe import StepEvent
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline._report.report import format_report
from langgraph_deadline._report.stats import step_stats
from langgraph_deadline._report.trace import read_trace
from langgraph_deadline.types import StepStatus


def test_format_report_has_the_summary_and_one_row_per_step(trace_file: Path) -> None:
    trace = read_trace([trace_file])
    text = format_report(trace, step_stats(trace))
    assert text.startswith("12 runs (10 completed, 2 deadline_exceeded), 25 step records")
    assert "deadline_exceeded runs ended at: audit (1), fetch (1)" in text
    assert "skipped 2 lines" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:6].strip()}
    assert rows["fetch"][:3] == ["fetch", "node", "13"]
    assert rows["fetch"][-2:] == [">=990", "(10)"]  # one fetch was cut at 900 ms
    assert rows["audit"][-4:] == ["100%", "1", ">=150", "(0)"]
    assert "hedged" not in text  # nothing was


def test_the_report_says_how_a_hedged_step_was_hedged_and_why_copies_were_held(
    tmp_path: Path,
) -> None:
    record = StepRecord(
        name="search",
        kind="tool",
        attempt=1,
        remaining_ms=None,
        requested_ms=500.0,
        allocated_ms=500.0,
        clamped=False,
        elapsed_ms=20.0,
        status=StepStatus.COMPLETED,
    )
    kinds = [{}, {"hedges": 1, "winner": 1}, {"hedges": 1, "winner": 0}]
    kinds += [{"hedge_held": "outage"}] * 2 + [{"hedge_held": "budget"}] + [{}] * 14
    with JsonlTraceWriter(tmp_path / "trace.jsonl") as writer:
        for changes in kinds:
            writer.on_step(StepEvent(dataclasses.replace(record, **changes), None, None))
    trace = read_trace([tmp_path / "trace.jsonl"])
    text = format_report(trace, step_stats(trace))
    assert (
        "hedged search: 2 extra copies for 20 calls (10.0%), 1 answered by a later copy; "
        "copies not started: budget 1, outage 2"
    ) in text


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
