"""A long run on one thread: what a checkpoint stores for the deadline stays bounded (the trace
keeps its most recent `TRACE_WINDOW` records, not one more per step, and under `with_deadlines`
it is written once, at the run's end: a checkpoint taken mid-run holds none), on a real
`StateGraph` loop with `InMemorySaver` and SQLite; and the thread still works: an interrupt
resumes, a cut run is granted more time and finishes, and every record still reaches the
observers and the report."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_deadline import DeadlineState, Terminal, deadline_input, with_deadlines
from langgraph_deadline._graph.state import TRACE_WINDOW
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline._report.trace import read_trace
from langgraph_deadline.instrument import get_observers, set_observers
from langgraph_deadline.types import StepStatus

STEPS = 3 * TRACE_WINDOW + 5


class State(DeadlineState):
    n: int


@pytest.fixture(params=["memory", "sqlite"])
async def saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield InMemorySaver()
    else:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "long.sqlite")) as sqlite:
            yield sqlite


@pytest.fixture
def observed(tmp_path: Path) -> Iterator[Path]:
    """Every step record, written by `JsonlTraceWriter` (what the report reads)."""
    saved = get_observers()
    path = tmp_path / "trace.jsonl"
    with JsonlTraceWriter(path) as writer:
        set_observers([writer])
        try:
            yield path
        finally:
            set_observers(saved)


def _loop(steps: int, *, on_step: Any = None) -> StateGraph[Any, Any, Any, Any]:
    """One node that counts, routed back to itself until it has run `steps` times."""

    async def step(state: State) -> dict[str, Any]:
        if on_step is not None:
            await on_step(state["n"] + 1)
        return {"n": state["n"] + 1}

    b = StateGraph(State)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step", ["step", END])
    return b


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": STEPS + 10}


async def _stored_traces(saver: BaseCheckpointSaver[Any], thread: str) -> list[bytes]:
    """The serialized `deadline_trace` of every checkpoint of the thread, as the saver holds it."""
    stored = []
    async for tup in saver.alist({"configurable": {"thread_id": thread}}):
        value = tup.checkpoint["channel_values"].get("deadline_trace")
        if value is not None:
            stored.append(saver.serde.dumps_typed(value)[1])
    return stored


@pytest.mark.anyio
async def test_a_checkpoint_stores_a_bounded_trace_however_long_the_run(saver: Any) -> None:
    window = with_deadlines(_loop(TRACE_WINDOW), timeout=60.0, checkpointer=saver)
    graph = with_deadlines(_loop(STEPS), timeout=60.0, checkpointer=saver)
    await window.ainvoke({"n": 0}, _cfg("window"))
    out = await graph.ainvoke({"n": 0}, _cfg("long"))
    assert out["n"] == STEPS
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert len(out["deadline_trace"]) == TRACE_WINDOW  # the most recent records
    assert [r.name for r in out["deadline_trace"]] == ["step"] * TRACE_WINDOW
    assert (await graph.aget_state(_cfg("long"))).values["deadline_trace"] == out["deadline_trace"]

    stored = await _stored_traces(saver, "long")
    assert len(stored) > STEPS  # one checkpoint per step
    full = max(len(b) for b in await _stored_traces(saver, "window"))  # a run of one window
    # Old code: the last checkpoint held STEPS records, three times a window's.
    assert max(len(b) for b in stored) <= 1.1 * full
    assert full < 200 * TRACE_WINDOW  # bytes: a record's plain data, without its defaults


@pytest.mark.anyio
async def test_the_run_writes_its_records_once_at_its_end_not_at_every_step(saver: Any) -> None:
    graph = with_deadlines(_loop(STEPS), timeout=60.0, checkpointer=saver)
    out = await graph.ainvoke({"n": 0}, _cfg("once"))
    history = [s async for s in graph.aget_state_history(_cfg("once"))]
    assert len(history) > STEPS  # one checkpoint per step
    latest, *earlier = history
    # Old code: every checkpoint after the first steps held a window of records.
    assert [s.values["n"] for s in earlier if s.values.get("deadline_trace")] == []
    assert latest.values["deadline_trace"] == out["deadline_trace"]
    assert len(out["deadline_trace"]) == TRACE_WINDOW
    starts = [r.started_at for r in out["deadline_trace"]]
    assert starts == sorted(starts) and len(set(starts)) == TRACE_WINDOW


@pytest.mark.anyio
async def test_a_streamed_run_tells_its_records_in_its_last_chunks(saver: Any) -> None:
    graph = with_deadlines(_loop(STEPS), timeout=60.0, checkpointer=saver)
    chunks = [
        c
        async for c in graph.astream({"n": 0}, _cfg("streamed"), stream_mode=["updates", "values"])
    ]
    updates = [c for mode, c in chunks if mode == "updates"]
    *steps, last = updates
    assert len(steps) == STEPS
    # Old code: each node's update carried its record.
    assert [u for u in steps if "deadline_trace" in u["step"]] == []
    assert last["deadline"]["deadline_outcome"].terminal is Terminal.COMPLETED
    trace = last["deadline"]["deadline_trace"]
    assert len(trace) == TRACE_WINDOW and trace[-1].status is StepStatus.COMPLETED
    assert chunks[-1] == ("values", {**chunks[-1][1], "deadline_trace": trace})
    assert (await graph.aget_state(_cfg("streamed"))).values["deadline_trace"] == trace


@pytest.mark.anyio
async def test_every_record_of_a_long_run_reaches_the_observers_and_the_report(
    saver: Any, observed: Path
) -> None:
    graph = with_deadlines(_loop(STEPS), timeout=60.0, checkpointer=saver)
    out = await graph.ainvoke({"n": 0}, _cfg("observed"))
    [run] = read_trace([observed]).runs
    assert run.terminal is Terminal.COMPLETED
    assert [s.name for s in run.steps] == ["step"] * STEPS
    assert list(run.steps[-TRACE_WINDOW:]) == out["deadline_trace"]


@pytest.mark.anyio
async def test_a_long_thread_resumes_after_an_interrupt(saver: Any) -> None:
    pause = STEPS - 5

    async def ask(n: int) -> None:
        if n == pause:
            interrupt("go on?")

    graph = with_deadlines(_loop(STEPS, on_step=ask), timeout=60.0, checkpointer=saver)
    cfg = _cfg("paused")
    paused = await graph.ainvoke({"n": 0}, cfg)
    assert paused["n"] == pause - 1
    assert "__interrupt__" in paused
    # The pause is a run's end: its records are written to the thread.
    before = (await graph.aget_state(cfg)).values["deadline_trace"]
    assert before == paused["deadline_trace"] and len(before) == TRACE_WINDOW
    out = await graph.ainvoke(Command(resume="yes"), cfg)
    assert out["n"] == STEPS
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    # The window: the paused run's last records, then the resumed run's, in order.
    trace = out["deadline_trace"]
    assert len(trace) == TRACE_WINDOW
    assert trace[: TRACE_WINDOW - 6] == before[6:]
    starts = [r.started_at for r in trace]
    assert starts == sorted(starts) and len(set(starts)) == TRACE_WINDOW
    assert (await graph.aget_state(cfg)).values["deadline_trace"] == trace


@pytest.mark.anyio
async def test_a_long_run_cut_by_its_deadline_keeps_its_latest_records_and_a_grant_finishes_it(
    saver: Any, observed: Path
) -> None:
    hung: list[int] = []

    async def hang_once(n: int) -> None:
        if n == 2 * TRACE_WINDOW and not hung:
            hung.append(n)
            await asyncio.sleep(30)

    graph = with_deadlines(_loop(STEPS, on_step=hang_once), timeout=1.0, checkpointer=saver)
    cfg = _cfg("cut")
    cut = await graph.ainvoke({"n": 0}, cfg)
    assert cut["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert cut["deadline_outcome"].step == "step"
    assert cut["n"] == 2 * TRACE_WINDOW - 1
    trace = (await graph.aget_state(cfg)).values["deadline_trace"]
    assert trace == cut["deadline_trace"]
    # The window ends with the cut step, after the steps just before it, once each, in order.
    assert len(trace) == TRACE_WINDOW
    assert trace[-1].status is StepStatus.TIMED_OUT
    assert all(r.status is StepStatus.COMPLETED for r in trace[:-1])
    starts = [r.started_at for r in trace]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    [run] = read_trace([observed]).runs  # every record of the run, in the order they ended
    assert trace == list(run.steps[-TRACE_WINDOW:])

    out = await graph.ainvoke(Command(update=deadline_input(5.0)), cfg)
    assert out["n"] == STEPS
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert len(out["deadline_trace"]) == TRACE_WINDOW
