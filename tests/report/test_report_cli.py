"""`langgraph-deadline report` on a trace recorded from real graph runs: the table, and a PNG,
an SVG and an HTML page that open."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, with_deadlines
from langgraph_deadline.__main__ import main
from langgraph_deadline._core.observe import get_observers, set_observers
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline._report.trace import read_trace

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class State(DeadlineState):
    log: list[str]
    slow: bool


@pytest.fixture(autouse=True)
def _restore_observers() -> Iterator[None]:
    saved = get_observers()
    yield
    set_observers(saved)


def _graph() -> StateGraph[Any, Any, Any, Any]:
    """plan -> search (hangs when asked to) -> answer."""

    async def plan(state: State) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"log": ["plan"]}

    async def search(state: State) -> dict[str, Any]:
        await asyncio.sleep(5 if state["slow"] else 0.04)
        return {"log": [*state["log"], "search"]}

    async def answer(state: State) -> dict[str, Any]:
        await asyncio.sleep(0.02)
        return {"log": [*state["log"], "answer"]}

    b = StateGraph(State)
    b.add_node("plan", plan)
    b.add_node("search", search)
    b.add_node("answer", answer)
    b.add_edge(START, "plan")
    b.add_edge("plan", "search")
    b.add_edge("search", "answer")
    b.add_edge("answer", END)
    return b


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six healthy runs and two that hang in `search`, written by JsonlTraceWriter."""
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    saved = get_observers()

    async def record() -> list[Terminal]:
        graph = with_deadlines(_graph(), timeout=1.0, reserve=0.05)  # roomy on a loaded machine
        outs = [await graph.ainvoke({"log": [], "slow": i >= 6}) for i in range(8)]
        return [out["deadline_outcome"].terminal for out in outs]

    try:
        with JsonlTraceWriter(path) as writer:
            set_observers([writer])
            terminals = asyncio.run(record())
    finally:
        set_observers(saved)
    assert terminals == [Terminal.COMPLETED] * 6 + [Terminal.DEADLINE_EXCEEDED] * 2
    return path


def _rows(text: str) -> dict[str, list[str]]:
    """The rows of the main table (the latency book's table follows it)."""
    text = text.split("latency book")[0]
    return {
        line.split()[0]: line.split()
        for line in text.splitlines()
        if line.split() and line.split()[0] in {"plan", "search", "answer"}
    }


def _book_rows(text: str) -> dict[str, list[str]]:
    text = text.split("latency book")[1]
    return {
        line.split()[0]: line.split()
        for line in text.splitlines()
        if line.split() and line.split()[0] in {"plan", "search", "answer"}
    }


def test_report_prints_the_table_and_writes_a_png(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "budget.png"
    assert main(["report", str(recorded), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("8 runs (6 completed, 2 deadline_exceeded), 22 step records")
    assert "deadline_exceeded runs ended at: search (2)" in out
    assert "p50 ms" in out
    assert "cap ms (from n)" in out
    rows = _rows(out)
    assert rows["plan"][:3] == ["plan", "node", "8"]
    assert rows["search"][2] == "8"
    assert rows["search"][8] == "25%"  # exceeded: 2 of 8
    assert rows["search"][-1] == "(6)"  # 6 healthy runs
    assert rows["answer"][2] == "6"  # after the cut in search, no node body runs
    assert rows["answer"][8] == "0%"
    # 2 of 8 cut near the deadline: the p99 lies among them, and a cap above the time they were
    # cut at is above the run's whole budget (1 s): the suggestion is that budget
    assert rows["search"][-3:-1] == ["run", "1000"]
    cut = [r.elapsed_ms for r in read_trace([recorded]).runs[-1].steps if r.name == "search"]
    assert max(cut) < 1000
    assert "wrote" in out
    book = _book_rows(out)
    assert book["search"][:4] == ["search", "node", "8", "25%"]  # 2 of 8 cut: censored
    assert book["search"][6].startswith(">=")  # its p99 lies among the cut ones
    assert book["search"][-1] == "-"  # 8 samples: too few to learn a cap

    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    from PIL import Image

    with Image.open(png) as image:
        image.load()
        assert image.format == "PNG"
        assert image.width > 600
        assert image.height > 300


def test_report_writes_an_html_page_and_an_svg_with_the_plot(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "budget.html"
    assert main(["report", str(recorded), "--plot", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>")
    svg_start, svg_end = html.index("<svg"), html.index("</svg>") + len("</svg>")
    root = ET.fromstring(html[svg_start:svg_end])  # well-formed SVG inline
    text = "".join(root.itertext())
    for expected in ("search (node)", "deadline", "reserve", "recommended cap", "timed_out"):
        assert expected in text
    assert "deadline_exceeded at search" in text  # the default run is one that hit the deadline
    assert "cap ms (from n)" in html  # the table is on the page too

    svg = tmp_path / "budget.svg"
    assert main(["report", str(recorded), "--plot", str(svg), "--run", _first_run(recorded)]) == 0
    assert "completed" in "".join(ET.parse(svg).getroot().itertext())


def _first_run(trace: Path) -> str:
    import json

    return str(json.loads(trace.read_text().splitlines()[0])["run_id"])[:8]


def test_report_runs_as_a_console_command(recorded: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_deadline", "report", str(recorded)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "8 runs" in done.stdout
