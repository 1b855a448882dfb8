"""A thread read after a run tells how it ended (state with the deadline fields): `completed`,
`cancelled` (with the records of the steps it cut) and `deadline_exceeded`. LangGraph Server's
clients read runs this way: `threads.get_state` after `runs.wait` or `runs.cancel`."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineState, Terminal, with_deadlines
from langgraph_deadline._core.records import Outcome
from langgraph_deadline._graph.state import merge_outcome
from langgraph_deadline.types import StepStatus


class Log(DeadlineState):
    log: Annotated[list[str], operator.add]


class Plain(TypedDict):
    log: Annotated[list[str], operator.add]


def _builder(state: Any, delay: float) -> StateGraph[Any, Any, Any, Any]:
    async def first(s: Any) -> dict[str, Any]:
        return {"log": ["first"]}

    async def slow(s: Any) -> dict[str, Any]:
        await asyncio.sleep(delay)
        return {"log": ["slow"]}

    b = StateGraph(state)
    b.add_node("first", first)
    b.add_node("slow", slow)
    b.add_edge(START, "first")
    b.add_edge("first", "slow")
    return b


CFG = {"configurable": {"thread_id": "t"}}


@pytest.mark.anyio
async def test_a_completed_run_leaves_completed_in_its_thread_and_last_values() -> None:
    graph = with_deadlines(_builder(Log, 0.0), timeout=5.0, checkpointer=InMemorySaver())
    chunks = [c async for c in graph.astream({"log": []}, CFG, stream_mode="values")]
    assert chunks[-1]["deadline_outcome"].terminal is Terminal.COMPLETED
    assert chunks[0]["deadline_outcome"] is None  # not before the end
    snapshot = await graph.aget_state(CFG)
    assert snapshot.values["deadline_outcome"].terminal is Terminal.COMPLETED
    assert [r.name for r in snapshot.values["deadline_trace"]] == ["first", "slow"]
    out = await graph.ainvoke({"log": []}, CFG)
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["deadline_outcome"] == (await graph.aget_state(CFG)).values["deadline_outcome"]
    updates = [c async for c in graph.astream({"log": []}, CFG, stream_mode="updates")]
    assert list(updates[-1]) == ["deadline"]  # the outcome's update, as a step's would be
    assert updates[-1]["deadline"]["deadline_outcome"].terminal is Terminal.COMPLETED


@pytest.mark.anyio
async def test_a_cancelled_stream_leaves_cancelled_and_the_cut_steps_record_in_its_thread() -> None:
    graph = with_deadlines(_builder(Log, 10.0), timeout=30.0, checkpointer=InMemorySaver())

    async def consume() -> None:
        async for _ in graph.astream({"log": []}, CFG, stream_mode="values"):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    values = (await graph.aget_state(CFG)).values
    assert values["deadline_outcome"].terminal is Terminal.CANCELLED
    assert values["log"] == ["first"]
    slow = [r for r in values["deadline_trace"] if r.name == "slow"]
    assert [r.status for r in slow] == [StepStatus.CANCELLED]


def test_a_completed_sync_run_leaves_completed_in_its_thread() -> None:
    def step(s: Log) -> dict[str, Any]:
        return {"log": ["step"]}

    builder = StateGraph(Log).add_node("step", step).add_edge(START, "step")
    graph = with_deadlines(builder, timeout=5.0, checkpointer=InMemorySaver())
    graph.invoke({"log": []}, CFG)
    assert graph.get_state(CFG).values["deadline_outcome"].terminal is Terminal.COMPLETED
    chunks = list(graph.stream({"log": []}, CFG, stream_mode="values"))
    assert chunks[-1]["deadline_outcome"] == graph.get_state(CFG).values["deadline_outcome"]


def test_a_sync_stream_closed_before_its_end_leaves_cancelled_in_its_thread() -> None:
    def first(s: Log) -> dict[str, Any]:
        return {"log": ["first"]}

    def second(s: Log) -> dict[str, Any]:
        return {"log": ["second"]}

    builder = StateGraph(Log).add_sequence([first, second]).add_edge(START, "first")
    graph = with_deadlines(builder, timeout=5.0, checkpointer=InMemorySaver())
    stream = graph.stream({"log": []}, CFG, stream_mode="updates")
    assert "first" in next(stream)
    stream.close()  # type: ignore[attr-defined]
    values = graph.get_state(CFG).values
    assert values["deadline_outcome"].terminal is Terminal.CANCELLED
    assert values["log"] == ["first"]


@pytest.mark.anyio
async def test_a_cancelled_ainvoke_leaves_cancelled_in_its_thread() -> None:
    graph = with_deadlines(_builder(Log, 10.0), timeout=30.0, checkpointer=InMemorySaver())
    task = asyncio.create_task(graph.ainvoke({"log": []}, CFG))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    values = (await graph.aget_state(CFG)).values
    assert values["deadline_outcome"].terminal is Terminal.CANCELLED


@pytest.mark.anyio
async def test_leaving_a_stream_after_its_last_chunk_does_not_turn_completed_into_cancelled() -> (
    None
):
    graph = with_deadlines(_builder(Log, 0.0), timeout=5.0, checkpointer=InMemorySaver())
    stream = graph.astream({"log": []}, CFG, stream_mode="values")
    async for chunk in stream:
        if chunk["log"] == ["first", "slow"]:
            break
    await stream.aclose()  # type: ignore[attr-defined]
    values = (await graph.aget_state(CFG)).values
    assert values["deadline_outcome"].terminal is Terminal.COMPLETED


@pytest.mark.anyio
async def test_a_run_out_of_time_leaves_deadline_exceeded_in_its_thread() -> None:
    graph = with_deadlines(_builder(Log, 10.0), timeout=0.3, checkpointer=InMemorySaver())
    await graph.ainvoke({"log": []}, CFG)
    values = (await graph.aget_state(CFG)).values
    assert values["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert values["deadline_outcome"].step == "slow"


@pytest.mark.anyio
async def test_a_state_without_the_fields_gets_nothing_written_when_cancelled() -> None:
    saver = InMemorySaver()
    graph = with_deadlines(_builder(Plain, 10.0), timeout=30.0, checkpointer=saver)
    task = asyncio.create_task(graph.ainvoke({"log": []}, CFG))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await graph.aget_state(CFG)).values == {"log": ["first"]}


def test_a_completed_is_replaced_by_what_comes_next_and_an_early_end_is_kept() -> None:
    completed = Outcome(terminal=Terminal.COMPLETED, elapsed_ms=1.0)
    later = Outcome(terminal=Terminal.COMPLETED, elapsed_ms=2.0)
    out_of_time = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step="slow")
    assert merge_outcome(completed, out_of_time) == out_of_time
    assert merge_outcome(completed, later) == later
    assert merge_outcome(out_of_time, completed) == out_of_time
    assert merge_outcome(out_of_time, None) is None


@pytest.mark.anyio
async def test_a_run_whose_node_passed_on_a_subgraphs_completed_ends_with_its_own() -> None:
    child = Outcome(terminal=Terminal.COMPLETED, elapsed_ms=123456.0)

    async def ask_child(s: Log) -> dict[str, Any]:  # what a RemoteGraph node's update holds
        return {"log": ["child"], "deadline_outcome": child}

    builder = StateGraph(Log).add_node("ask", ask_child).add_edge(START, "ask")
    graph = with_deadlines(builder, timeout=5.0, checkpointer=InMemorySaver())
    out = await graph.ainvoke({"log": []}, CFG)
    assert out["deadline_outcome"].ok and out["deadline_outcome"] != child
    assert (await graph.aget_state(CFG)).values["deadline_outcome"] == out["deadline_outcome"]
