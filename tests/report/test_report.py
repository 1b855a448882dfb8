"""`langgraph-deadline report` as text: the summary, one row per step, and the CLI's errors."""

from __future__ import annotations

import asyncio
import dataclasses
import operator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, StepRecord, Terminal, with_deadlines
from langgraph_deadline.__main__ import main
from langgraph_deadline._core.observe import StepEvent, get_observers, set_observers
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
    assert rows["audit"][-5:] == ["100%", "1", "0", ">=150", "(0)"]  # abandoned 1, stalled 0
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


def _optional_branch() -> StateGraph[Any, Any, Any, Any]:
    """extra (optional, hangs) -> answer."""

    async def extra(state: _Log) -> dict[str, Any]:
        await asyncio.sleep(10)
        return {"log": ["extra"]}

    async def answer(state: _Log) -> dict[str, Any]:
        return {"log": ["answer"]}

    b = StateGraph(_Log)
    b.add_node("extra", extra)
    b.add_node("answer", answer)
    b.add_edge(START, "extra")
    b.add_edge("extra", "answer")
    b.add_edge("answer", END)
    return b


class _Log(DeadlineState, total=False):
    log: Annotated[list[str], operator.add]


def _report_of_a_run(graph: Any, tmp_path: Path) -> str:
    """The report of one run of `graph`, which completes without `extra` (dropped)."""
    saved = get_observers()
    try:
        with JsonlTraceWriter(tmp_path / "trace.jsonl") as writer:
            set_observers([writer])
            out = asyncio.run(graph.ainvoke({}))
    finally:
        set_observers(saved)
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["log"] == ["answer"]
    trace = read_trace([tmp_path / "trace.jsonl"])
    return format_report(trace, step_stats(trace))


def test_an_optional_branch_is_reported_dropped_and_never_capped_above_the_run(
    tmp_path: Path,
) -> None:
    """An optional branch cut at a cap near the run's budget: the report says the run went on
    without it, and suggests no cap above the run's whole budget (its cut x headroom is)."""
    graph = with_deadlines(_optional_branch(), timeout=1.5, caps={"extra": 1.3}, optional={"extra"})
    text = _report_of_a_run(graph, tmp_path)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:6].strip()}
    assert rows["extra"][-3:] == ["run", "1500", "(0)"]  # not >=1560: 1.2 x its 1.3 s cut
    assert "dropped extra: 1 of 1 cut at their own budget, the run went on" in text


def test_the_report_shows_the_time_kept_back_and_the_steps_cut_there(tmp_path: Path) -> None:
    """With a book, the optional branch keeps the answer's time back and is cut there."""
    from langgraph_deadline.learn import LatencyBook

    book = LatencyBook(listen=False)
    for _ in range(40):
        book.record("node", "answer", 0.3)
    graph = with_deadlines(_optional_branch(), timeout=1.5, book=book, optional={"extra"})
    text = _report_of_a_run(graph, tmp_path)
    (line,) = [x for x in text.splitlines() if x.startswith("kept back by extra:")]
    assert line.startswith("kept back by extra: 1 of 1 kept a median ")
    assert line.endswith(" ms for the steps after it, 1 cut there")


def test_plot_on_a_trace_without_runs_says_why_nothing_was_drawn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    record = StepRecord(
        name="search",
        kind="tool",
        attempt=1,
        remaining_ms=900.0,
        requested_ms=500.0,
        allocated_ms=500.0,
        clamped=False,
        elapsed_ms=20.0,
        status=StepStatus.COMPLETED,
    )
    with JsonlTraceWriter(tmp_path / "trace.jsonl") as writer:  # steps under a deadline_scope
        writer.on_step(StepEvent(record, None, None))
    assert main(["report", str(tmp_path / "trace.jsonl"), "--plot", str(tmp_path / "a.png")]) == 1
    out = capsys.readouterr()
    assert "search" in out.out  # the table is printed first
    assert "--plot draws one run, and this trace has none" in out.err
    assert "1 step records ran outside any run" in out.err
    assert not (tmp_path / "a.png").exists()
