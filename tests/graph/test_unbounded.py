"""A node that nothing bounds (the run was given no deadline, the node has no cap) runs as it
would bare: no record when it completes, recorded as any other when it does not. Tested on the
prebuilt ToolNode / tools_condition loop with a SQLite checkpointer, as users run it."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from langgraph_deadline import (
    DeadlineState,
    StepRecord,
    Terminal,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.types import StepStatus


class State(MessagesState, DeadlineState):
    pass


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


@deadline_tool(cap=0.2)
async def slow_lookup(city: str) -> str:
    """Look a city up, slowly (it hangs past its own cap)."""
    await asyncio.sleep(5)
    return f"{city}: rain"


def _agent_loop(tools: list[Any]) -> StateGraph[Any, Any, Any, Any]:
    """The tutorial loop: a "model" node that asks for every tool once, then answers."""

    def model(state: State) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done")]}
        calls = [
            {"name": t.name, "args": {"city": "Oslo"}, "id": f"call_{i}"}
            for i, t in enumerate(tools)
        ]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    b = StateGraph(State)
    b.add_node("model", model)
    b.add_node("tools", ToolNode(tools))
    b.add_edge(START, "model")
    b.add_conditional_edges("model", tools_condition)
    b.add_edge("tools", "model")
    return b


def test_a_run_without_a_deadline_leaves_no_node_records(
    saver: SqliteSaver, steps: list[StepRecord]
) -> None:
    graph = with_deadlines(_agent_loop([lookup]), checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "t"}}
    out = graph.invoke({"messages": [HumanMessage("weather?")]}, cfg)
    assert out["messages"][-1].content == "done"
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["deadline_trace"] == []
    assert graph.get_state(cfg).values["deadline_trace"] == []
    assert steps == []


def test_a_capped_node_in_a_run_without_a_deadline_is_still_recorded(
    saver: SqliteSaver,
) -> None:
    graph = with_deadlines(_agent_loop([lookup]), checkpointer=saver, caps={"model": 5.0})
    out = graph.invoke(
        {"messages": [HumanMessage("weather?")]}, {"configurable": {"thread_id": "t"}}
    )
    trace = out["deadline_trace"]
    assert [(r.name, r.status) for r in trace] == [("model", StepStatus.COMPLETED)] * 2
    assert trace[0].requested_ms == 5000.0 and trace[0].remaining_ms is None


def test_a_capped_tool_node_in_a_run_without_a_deadline_records_each_call(
    saver: SqliteSaver,
) -> None:
    """A ToolNode's cap is each call's (docs/concepts.md): the calls are the capped steps."""
    graph = with_deadlines(_agent_loop([lookup]), checkpointer=saver, caps={"tools": 5.0})
    out = graph.invoke(
        {"messages": [HumanMessage("weather?")]}, {"configurable": {"thread_id": "t"}}
    )
    trace = out["deadline_trace"]
    assert [(r.name, r.kind, r.status) for r in trace] == [("lookup", "tool", StepStatus.COMPLETED)]
    assert trace[0].requested_ms == 5000.0 and trace[0].remaining_ms is None


@pytest.mark.anyio
async def test_the_records_of_steps_inside_an_unbounded_node_reach_the_trace() -> None:
    """The capped tool timed out inside the ToolNode: its record is kept, the node's is not."""
    graph = with_deadlines(_agent_loop([lookup, slow_lookup]))
    out = await graph.ainvoke({"messages": [HumanMessage("weather?")]})
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert [(r.name, r.kind, r.status) for r in out["deadline_trace"]] == [
        ("slow_lookup", "tool", StepStatus.TIMED_OUT)
    ]
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 2 and out["messages"][-1].content == "done"


@pytest.mark.anyio
async def test_a_node_that_fails_is_recorded_and_raises(steps: list[StepRecord]) -> None:
    async def broken(state: State) -> dict[str, Any]:
        raise ValueError("boom")

    b = StateGraph(State)
    b.add_node("broken", broken)
    b.add_edge(START, "broken")
    with pytest.raises(ValueError, match="boom"):
        await with_deadlines(b).ainvoke({"messages": []})
    assert [(r.name, r.status) for r in steps] == [("broken", StepStatus.FAILED)]
    assert steps[0].elapsed_ms >= 0.0 and steps[0].started_at is not None


def test_a_sync_node_that_fails_is_recorded_and_raises(steps: list[StepRecord]) -> None:
    entered: list[float] = []

    def broken(state: State) -> dict[str, Any]:
        entered.append(time.time())
        time.sleep(0.05)
        raise ValueError("boom")

    b = StateGraph(State)
    b.add_node("broken", broken)
    b.add_edge(START, "broken")
    t0 = time.time()
    with pytest.raises(ValueError, match="boom"):
        with_deadlines(b).invoke({"messages": []})
    [record] = steps
    assert record.status is StepStatus.FAILED and record.elapsed_ms >= 40.0
    # When the step started, not when it ended (50 ms after its body began); measured against
    # the body itself, not against a clock read before the graph was even compiled (a loaded
    # machine put 280 ms between the two).
    assert record.started_at is not None and t0 <= record.started_at <= entered[0] + 0.001


@pytest.mark.anyio
async def test_a_closed_stream_without_a_deadline_stops_and_records_the_node(
    steps: list[StepRecord],
) -> None:
    stopped = asyncio.Event()

    async def hang(state: State) -> dict[str, Any]:
        get_stream_writer()("started")
        try:
            await asyncio.sleep(30)
        finally:
            stopped.set()
        return {}

    b = StateGraph(State)
    b.add_node("hang", hang)
    b.add_edge(START, "hang")
    stream = cast(
        AsyncGenerator[Any, None], with_deadlines(b).astream({"messages": []}, stream_mode="custom")
    )
    assert await anext(stream) == "started"  # the node is running now
    await stream.aclose()
    await asyncio.wait_for(stopped.wait(), 2.0)
    assert [(r.name, r.status, r.cancel_source) for r in steps] == [
        ("hang", StepStatus.CANCELLED, "caller")
    ]


def test_a_deadline_brought_in_by_a_node_bounds_the_nodes_after_it() -> None:
    def first(state: State) -> dict[str, Any]:
        return {"deadline": time.time() + 30.0}

    def second(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("ok")]}

    b = StateGraph(State).add_sequence([first, second])
    b.add_edge(START, "first")
    b.add_edge("second", END)
    out = with_deadlines(b).invoke({"messages": []})
    [record] = out["deadline_trace"]
    assert record.name == "second" and record.status is StepStatus.COMPLETED
    assert record.remaining_ms is not None and 20_000.0 < record.remaining_ms <= 30_000.0


def test_an_interrupt_in_an_unbounded_node_is_not_a_failure(
    saver: SqliteSaver, steps: list[StepRecord]
) -> None:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt("which city?")
        return {"messages": [AIMessage(f"ok: {answer}")]}

    b = StateGraph(State)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    graph = with_deadlines(b, checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"messages": []}, cfg)
    assert "__interrupt__" in first
    out = graph.invoke(Command(resume="Oslo"), cfg)
    assert out["messages"][-1].content == "ok: Oslo"
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert steps == []
