"""A cap on a node that answers tool calls (`ToolNode`, `create_agent`'s "tools") is a cap on
each call: the calls that finish answer, a call that reaches the cap is cancelled (the server
sees its connection close) and answers the model with the timeout message, and the model goes on
with the time left. Against a real `ChatOpenAI` streaming from the local server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    StepStatus,
    Terminal,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.instrument import StepEvent, get_observers, set_observers
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall, SlowServer
from tests.agents.support import ask, assert_valid_history, orders
from tests.chat_models import openai_chat as chat

MARGIN = 1.0  # a loaded 2-core machine
CAP = 0.5
TIMEOUT = 8.0  # the run has plenty: only the cap stops the slow call


class Chat(MessagesState, DeadlineState):
    pass


@pytest.fixture
def events() -> Iterator[list[StepEvent]]:
    """Every step event the observers see during the test."""
    seen: list[StepEvent] = []

    class Collect:
        def on_step(self, event: StepEvent) -> None:
            seen.append(event)

        def on_run(self, event: Any) -> None:
            pass

    saved = get_observers()
    set_observers([Collect()])
    try:
        yield seen
    finally:
        set_observers(saved)


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
    stock = deadline_tool(_stock_tool(slow_server), timeout=30.0, message="{tool}: too slow")
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
