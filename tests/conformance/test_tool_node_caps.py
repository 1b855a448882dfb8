"""A cap on a node that answers tool calls (`ToolNode`, `create_agent`'s "tools") is a cap on
each call: the calls that finish answer, a call that reaches the cap is cancelled (the server
sees its connection close) and answers the model with the timeout message, and the model goes on
with the time left. Against a real `ChatOpenAI` streaming from the local server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.instrument import StepEvent
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall, SlowServer
from langgraph_deadline.types import StepStatus
from tests.agents.support import ask, assert_valid_history, orders
from tests.chat_models import openai_chat as chat
from tests.conftest import collecting

MARGIN = 1.0  # a loaded 2-core machine
CAP = 0.5
TIMEOUT = 8.0  # the run has plenty: only the cap stops the slow call


class Chat(MessagesState, DeadlineState):
    pass


@pytest.fixture
def events() -> Iterator[list[StepEvent]]:
    """Every step event the observers see during the test."""
    with collecting() as collect:
        yield collect.events


def _stock_tool(slow_server: SlowServer) -> Any:
    @tool
    async def stock(sku: str) -> str:
        """Current stock level for a SKU."""
        async with httpx.AsyncClient() as client:
            r = await client.get(slow_server.url("/slow"), params={"delay": "30"})
        return r.text

    return stock


def _script(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ChatReply.tool_calls(
            ScriptedToolCall("orders", {"query": "42"}), ScriptedToolCall("stock", {"sku": "A1"})
        ),
        ChatReply.text("Order 42 shipped on Monday; I could not get the stock level."),
    )


def _hand_built(
    model: Any, tools: list[Any], *, sync: bool = False
) -> StateGraph[Any, Any, Any, Any]:
    bound = model.bind_tools(tools)

    async def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    def sync_agent(state: Chat) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    b = StateGraph(Chat)
    b.add_node("agent", sync_agent if sync else agent)
    b.add_node("tools", ToolNode(tools))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition)
    b.add_edge("tools", "agent")
    return b


def _second_request_tool_answers(server: FakeOpenAIServer) -> dict[str, str]:
    """What the model read back from each tool in its second request: name -> content."""
    assert len(server.requests) == 2, [r.body for r in server.requests]
    sent = server.requests[1].body["messages"]
    calls = {
        c["id"]: c["function"]["name"]
        for m in sent
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    }
    return {calls[m["tool_call_id"]]: m["content"] for m in sent if m["role"] == "tool"}


@pytest.mark.anyio
@pytest.mark.parametrize("shape", ["create_agent", "ToolNode"])
async def test_a_tool_call_at_the_tools_nodes_cap_answers_the_model_and_the_run_goes_on(
    shape: str, server: FakeOpenAIServer, slow_server: SlowServer, events: list[StepEvent]
) -> None:
    _script(server)
    tools = [orders, _stock_tool(slow_server)]
    graph: Any
    if shape == "create_agent":
        graph = create_agent(chat(server), tools)
    else:
        graph = _hand_built(chat(server), tools)
    wrapped = with_deadlines(graph, timeout=TIMEOUT, caps={"tools": CAP})

    t0 = time.monotonic()
    out = await wrapped.ainvoke(ask())
    took = time.monotonic() - t0

    assert CAP <= took < CAP + MARGIN  # the slow call was cut at its cap, not at the deadline
    assert slow_server.wait_disconnected(MARGIN)  # and its request was closed
    answers = _second_request_tool_answers(server)
    assert "shipped on Monday" in answers["orders"]
    assert "did not answer within 0.5 s" in answers["stock"]
    assert "timeout, not an empty result" in answers["stock"]
    assert out["messages"][-1].content.startswith("Order 42 shipped")
    assert_valid_history(out["messages"])
    # Each call's record belongs to the run (the report draws it in the run's waterfall).
    calls = [e for e in events if e.record.kind == "tool"]
    assert sorted(e.record.name for e in calls) == ["orders", "stock"]
    assert {e.run_id for e in calls} == {e.run_id for e in events if e.record.name == "tools"}
    assert None not in {e.run_id for e in calls}
    if shape == "ToolNode":  # a DeadlineState graph: the run completed, the cut call recorded
        assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        cut = [r for r in out["deadline_trace"] if r.name == "stock"]
        assert [(r.kind, r.status, r.cancel_source) for r in cut] == [
            ("tool", StepStatus.TIMED_OUT, "step_cap")
        ]


@pytest.mark.anyio
async def test_a_tools_node_cut_by_the_runs_deadline_before_its_cap_still_ends_the_run(
    server: FakeOpenAIServer, slow_server: SlowServer
) -> None:
    _script(server)
    agent = create_agent(chat(server), [orders, _stock_tool(slow_server)])
    wrapped = with_deadlines(agent, timeout=1.0, caps={"tools": 5.0})

    with pytest.raises(DeadlineExceeded) as caught:  # AgentState has no deadline fields
        await wrapped.ainvoke(ask())
    assert caught.value.outcome.step == "tools"
    assert slow_server.wait_disconnected(MARGIN)
    assert len(server.requests) == 1  # the model was not called again


@pytest.mark.anyio
async def test_a_deadline_tool_in_a_capped_tools_node_answers_within_the_cap_with_its_own_words(
    server: FakeOpenAIServer, slow_server: SlowServer
) -> None:
    _script(server)
    stock = deadline_tool(_stock_tool(slow_server), cap=30.0, message="{tool}: too slow")
    graph = _hand_built(chat(server), [orders, stock])
    wrapped = with_deadlines(graph, timeout=TIMEOUT, caps={"tools": CAP})

    t0 = time.monotonic()
    out = await wrapped.ainvoke(ask())
    assert time.monotonic() - t0 < CAP + MARGIN
    assert _second_request_tool_answers(server)["stock"] == "stock: too slow"
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert [r.status for r in out["deadline_trace"] if r.name == "stock"] == [
        StepStatus.TIMED_OUT  # one record: the deadline_tool's own
    ]


def test_a_sync_tool_past_the_cap_is_abandoned_and_answers_the_model(
    server: FakeOpenAIServer,
) -> None:
    @tool
    def stock(sku: str) -> str:
        """Current stock level for a SKU."""
        time.sleep(3)
        return "12 in stock"

    @tool("orders")
    def sync_orders(query: str) -> str:
        """Look up an order."""
        return f"order 42 shipped on Monday ({query})"

    _script(server)
    loop = _hand_built(chat(server), [sync_orders, stock], sync=True)
    graph = with_deadlines(loop, timeout=TIMEOUT, caps={"tools": CAP})
    t0 = time.monotonic()
    out = graph.invoke(ask())
    assert time.monotonic() - t0 < CAP + MARGIN
    answers = _second_request_tool_answers(server)
    assert "shipped on Monday" in answers["orders"]
    assert "did not answer within 0.5 s" in answers["stock"]
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert [r.status for r in out["deadline_trace"] if r.name == "stock"] == [StepStatus.ABANDONED]


# -- `then=`: the time kept back for the steps that follow is the call's own limit -------------

THEN_TIMEOUT = 3.0
WRITER_P90 = 2.0  # the writer's learned time, kept back from the tool call's budget
WRITER_TAKES = 0.8  # what it takes in the test: it fits in what was kept back


def _writer_book() -> LatencyBook:
    book = LatencyBook(listen=False)  # only what we feed it
    for _ in range(60):
        book.record("node", "writer", WRITER_P90)
    return book


def _kept_back_graph(stock: Any, writer: Any) -> StateGraph[Any, Any, Any, Any]:
    """call a tool -> ToolNode -> writer: the writer must still run after the tool call."""

    def agent(state: Chat) -> dict[str, Any]:
        call = {"name": "stock", "args": {"sku": "A1"}, "id": "call-1", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    b = StateGraph(Chat)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode([stock]))
    b.add_node("writer", writer)
    b.add_edge(START, "agent")
    b.add_edge("agent", "tools")
    b.add_edge("tools", "writer")
    b.add_edge("writer", END)
    return b


def _assert_cut_to_leave_the_writer_its_time(out: dict[str, Any], took: float, status: Any) -> None:
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED, out["deadline_outcome"]
    assert out["messages"][-1].content == "the report"  # the writer ran
    trace = out["deadline_trace"]
    (cut,) = [r for r in trace if r.name == "stock"]
    assert (cut.kind, cut.status, cut.cancel_source, cut.clamped) == (
        "tool",
        status,
        "kept_back",
        False,
    )
    # cut at about the deadline less the writer's learned time, not at the deadline
    assert cut.allocated_ms is not None
    assert cut.allocated_ms / 1000.0 == pytest.approx(THEN_TIMEOUT - WRITER_P90, abs=0.25)
    assert cut.elapsed_ms / 1000.0 < THEN_TIMEOUT - WRITER_P90 + MARGIN / 2
    assert "kept back" in (cut.note or "") and "node:writer" in (cut.note or "")
    (writer,) = [r for r in trace if r.name == "writer"]
    assert writer.status is StepStatus.COMPLETED
    assert took < THEN_TIMEOUT


@pytest.mark.anyio
async def test_a_tool_call_cut_to_keep_back_the_writers_learned_time_lets_the_writer_run() -> None:
    @tool
    async def stock(sku: str) -> str:
        """Current stock level for a SKU (takes 5 s)."""
        await asyncio.sleep(5.0)
        return "12 in stock"

    async def writer(state: Chat) -> dict[str, Any]:
        await asyncio.sleep(WRITER_TAKES)
        return {"messages": [AIMessage("the report")]}

    rule = learned(_writer_book(), cap=10.0, then=["node:writer"])
    graph = with_deadlines(
        _kept_back_graph(stock, writer), timeout=THEN_TIMEOUT, caps={"tools": rule}
    )
    t0 = time.monotonic()
    out = await graph.ainvoke({"messages": [HumanMessage("stock of A1?")]})
    took = time.monotonic() - t0
    _assert_cut_to_leave_the_writer_its_time(out, took, StepStatus.TIMED_OUT)
    told = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in told] == ["error"] and "did not answer within" in told[0].text


def test_a_sync_tool_call_cut_to_keep_back_the_writers_learned_time_lets_the_writer_run() -> None:
    release = threading.Event()

    @tool
    def stock(sku: str) -> str:
        """Current stock level for a SKU (takes 5 s)."""
        release.wait(5.0)
        return "12 in stock"

    def writer(state: Chat) -> dict[str, Any]:
        time.sleep(WRITER_TAKES)
        return {"messages": [AIMessage("the report")]}

    rule = learned(_writer_book(), cap=10.0, then=["node:writer"])
    graph = with_deadlines(
        _kept_back_graph(stock, writer), timeout=THEN_TIMEOUT, caps={"tools": rule}
    )
    try:
        t0 = time.monotonic()
        out = graph.invoke({"messages": [HumanMessage("stock of A1?")]})
        took = time.monotonic() - t0
    finally:
        release.set()  # the abandoned thread ends now
    _assert_cut_to_leave_the_writer_its_time(out, took, StepStatus.ABANDONED)
