"""The latency book hears step records by kind and name; censored for cut steps."""

from __future__ import annotations

import gc

import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline._core.step import commit_record
from langgraph_deadline.instrument import set_observers
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.types import StepStatus


def _record(status: StepStatus, elapsed_ms: float, name: str = "search") -> StepRecord:
    return StepRecord(
        name=name,
        kind="tool",
        attempt=1,
        remaining_ms=None,
        requested_ms=None,
        allocated_ms=None,
        clamped=False,
        elapsed_ms=elapsed_ms,
        status=status,
    )


def test_finished_steps_are_samples_and_cut_ones_are_censored() -> None:
    book = LatencyBook(listen=False)
    book.add(_record(StepStatus.COMPLETED, 100.0))
    book.add(_record(StepStatus.TIMED_OUT, 800.0))
    book.add(_record(StepStatus.ABANDONED, 800.0))
    book.add(_record(StepStatus.STALE, 800.0))
    for ignored in (StepStatus.SKIPPED, StepStatus.FAILED, StepStatus.CANCELLED):
        book.add(_record(ignored, 5.0))
    sketch = book.sketch("search", "tool")
    assert (sketch.finished, sketch.censored) == (1, 3)
    assert book.count("search", "tool") == 4
    assert book.count("search", "node") == 0


def test_a_book_hears_every_step_even_with_instrumentation_off() -> None:
    book = LatencyBook()
    set_observers([])
    try:
        commit_record(_record(StepStatus.COMPLETED, 50.0, name="heard"), None)
    finally:
        set_observers(None)
        book.detach()
    assert book.count("heard", "tool") == 1


def test_a_book_nobody_keeps_stops_listening() -> None:
    from langgraph_deadline._core import observe

    book = LatencyBook()
    assert any(ref() is book for ref in observe._listeners)
    listening = len(observe._listeners)
    del book
    gc.collect()
    assert len(observe._listeners) == listening - 1
    assert all(ref() is not None for ref in observe._listeners)


def test_a_key_holds_at_most_64_kib_and_keys_are_bounded() -> None:
    book = LatencyBook(listen=False, max_keys=2)
    assert book.bytes_per_key() <= 64 * 1024
    for name in ("a", "b", "c"):
        book.record("tool", name, 0.1)
    assert [name for _, name in book.names()] == ["a", "b"]


def test_books_merge() -> None:
    one, two = LatencyBook(listen=False), LatencyBook(listen=False)
    one.record("tool", "t", 0.1)
    two.record("tool", "t", 0.2, censored=True)
    one.merge(two)
    assert one.sketch("t", "tool").count == 2
    assert one.sketch("t").censored == 1


@pytest.mark.anyio
async def test_a_node_whose_tool_call_was_cut_is_a_censored_sample_of_the_node() -> None:
    """A `tools` node completes when its tool call times out (the model gets the timeout in
    words): the node's time is then the tool's cap, a bound below what the node takes. A
    node with a skipped tool inside it too; a node whose tools all answered is a sample."""
    import asyncio

    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from langgraph_deadline import DeadlineState, deadline_tool, with_deadlines

    class State(MessagesState, DeadlineState):
        pass

    @deadline_tool(cap=0.1)
    async def search(query: str) -> str:
        """Search."""
        await asyncio.sleep(float(query))
        return "found"

    builder = StateGraph(State)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "tools")
    graph = with_deadlines(builder, timeout=5.0, checkpointer=InMemorySaver())
    book = LatencyBook()
    try:
        for i, delay in enumerate(["0.01", "1.0", "0.01"]):
            call = {"type": "tool_call", "id": f"c{i}", "name": "search", "args": {"query": delay}}
            config = {"configurable": {"thread_id": f"t{i}"}}
            await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call])]}, config)
        tools = book.sketch("tools", "node")
        assert (tools.count, tools.censored) == (3, 1)  # the run whose call was cut
        assert book.sketch("search", "tool").censored == 1
    finally:
        book.detach()
