"""`langgraph-deadline report` as text: the summary, one row per step, and the CLI's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_deadline.__main__ import main
from langgraph_deadline._report.report import format_report
from langgraph_deadline._report.stats import step_stats
from langgraph_deadline._report.trace import read_trace


def test_format_report_has_the_summary_and_one_row_per_step(trace_file: Path) -> None:
    trace = read_trace([trace_file])
    text = format_report(trace, step_stats(trace))
    assert text.startswith("12 runs (10 completed, 2 deadline_exceeded), 25 step records")
    assert "deadline_exceeded runs ended at: audit (1), fetch (1)" in text
    assert "skipped 2 lines" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:6].strip()}
    assert rows["fetch"][:3] == ["fetch", "node", "13"]
    assert rows["fetch"][-2:] == [">=990", "(10)"]  # one fetch was cut at 900 ms
    assert rows["audit"][-5:] == ["100%", "1", "0", ">=150", "(0)"]  # abandoned 1, stalled 0


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
