"""Granting time after a cut runs the cut step again, on the state it would have seen
(docs/concepts.md, rule 3): the answers the cut step owed and the closing reply end the run, in
its returned state and its checkpoint, and a grant removes them before the step runs again.
On `create_agent` (a real `ChatOpenAI` against the local server) with InMemorySaver and SQLite,
a hand-built `ToolNode` loop, and a plain node that reads the last message."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    deadline_input,
    with_deadlines,
)
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall
from tests.agents.support import assert_valid_history
from tests.chat_models import ScriptedChatModel
from tests.chat_models import openai_chat as chat

TIMEOUT = 1.0
RESERVE = 0.2


def _grant() -> Command[Any]:
    """More time for the thread: 5 s from now."""
    return Command(update=deadline_input(5.0))


class Chat(MessagesState, DeadlineState):
    pass


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


class Stock:
    """A stock service that hangs on its first call and answers the next ones."""

    def __init__(self) -> None:
        self.calls = 0
        self.orders = 0

    def tools(self, *, sync: bool) -> list[Any]:
        @tool("orders")
        async def orders(query: str) -> str:
            """Look up an order."""
            self.orders += 1
            return f"order 42 shipped on Monday ({query})"

        @tool("stock")
        async def stock(sku: str) -> str:
            """Current stock level for a SKU."""
            self.calls += 1
            if self.calls == 1:
                await asyncio.sleep(30)
            return "12 in stock"

        @tool("orders")
        def sync_orders(query: str) -> str:
            """Look up an order."""
            self.orders += 1
            return f"order 42 shipped on Monday ({query})"

        @tool("stock")
        def sync_stock(sku: str) -> str:
            """Current stock level for a SKU."""
            self.calls += 1
            if self.calls == 1:
                time.sleep(3)  # a thread cannot be stopped: abandoned at the cut
            return "12 in stock"

        return [sync_orders, sync_stock] if sync else [orders, stock]


def _tool_answers(messages: list[Any]) -> dict[str, str]:
    return {m.name: m.text for m in messages if isinstance(m, ToolMessage)}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_granting_time_after_a_cut_in_create_agents_tools_reruns_the_cut_tool_call(
    kind: str, server: FakeOpenAIServer
) -> None:
    server.enqueue(
        ChatReply.tool_calls(
            ScriptedToolCall("orders", {"query": "42"}), ScriptedToolCall("stock", {"sku": "A1"})
        ),
        ChatReply.text("Order 42 shipped on Monday; 12 in stock."),
    )
    service = Stock()
    sync = kind == "sqlite"  # the sync API, as a SqliteSaver user would call it
    saver: Any = (
        SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
        if sync
        else InMemorySaver()
    )
    agent = create_agent(chat(server), service.tools(sync=sync), checkpointer=saver)
    graph = with_deadlines(agent, timeout=TIMEOUT, reserve=RESERVE)
    cfg = _thread("grant")

    async def run(input: Any) -> Any:
        if sync:
            return await asyncio.to_thread(graph.invoke, input, cfg)
        return await graph.ainvoke(input, cfg)

    with pytest.raises(DeadlineExceeded) as caught:  # AgentState has no deadline fields
        await run({"messages": [HumanMessage("where?")]})
    assert caught.value.outcome.step == "tools"
    ended = caught.value.state["messages"]
    assert_valid_history(ended)  # every call answered, the user has a reply
    assert "did not answer within" in _tool_answers(ended)["stock"]
    snapshot = (
        await asyncio.to_thread(graph.get_state, cfg) if sync else await graph.aget_state(cfg)
    )
    assert snapshot.next == ("tools",)  # the cut tool call is still pending
    assert [m.type for m in snapshot.values["messages"]] == [m.type for m in ended]

    out = await run(_grant())

    assert (service.calls, service.orders) == (2, 1)  # the cut call again, the finished one kept
    messages = out["messages"]
    assert_valid_history(messages)
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "ai"]
    assert _tool_answers(messages) == {
        "orders": "order 42 shipped on Monday (42)",
        "stock": "12 in stock",
    }
    assert messages[-1].text == "Order 42 shipped on Monday; 12 in stock."
    # What the model was sent after the grant: the tools' results, none of the run's ending.
    sent = str(server.requests[-1].body["messages"])
    assert "12 in stock" in sent and "shipped on Monday" in sent
    assert "did not answer" not in sent and "ran out of time" not in sent


@pytest.mark.anyio
async def test_granting_time_after_a_cut_in_a_tool_node_loop_answers_each_call_once() -> None:
    service = Stock()
    calls = [
        {"name": "orders", "args": {"query": "42"}, "id": "c1", "type": "tool_call"},
        {"name": "stock", "args": {"sku": "A1"}, "id": "c2", "type": "tool_call"},
    ]
    model = ScriptedChatModel(script=[AIMessage("", tool_calls=calls), AIMessage("all found")])

    def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    b = StateGraph(Chat)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode(service.tools(sync=False)))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition)
    b.add_edge("tools", "agent")
    graph = with_deadlines(b, timeout=TIMEOUT, reserve=RESERVE, checkpointer=InMemorySaver())
    cfg = _thread("tool-node")

    out = await graph.ainvoke({"messages": [HumanMessage("where?")]}, cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert_valid_history(out["messages"])
    assert (await graph.aget_state(cfg)).next == ("tools",)

    out = await graph.ainvoke(_grant(), cfg)

    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert_valid_history(out["messages"])  # one answer per call: the node ran them all again
    assert _tool_answers(out["messages"])["stock"] == "12 in stock"
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "tool", "ai"]
    assert len(model.calls) == 2 and not any(m.type == "ai" for m in model.calls[1][2:])


@pytest.mark.anyio
async def test_granting_time_reruns_a_cut_node_on_the_messages_it_would_have_seen() -> None:
    seen: list[str] = []

    async def reply(state: Chat) -> dict[str, Any]:
        seen.append(state["messages"][-1].text)
        if len(seen) == 1:
            await asyncio.sleep(30)
        return {"messages": [AIMessage(f"you said: {state['messages'][-1].text}")]}

    b = StateGraph(Chat)
    b.add_node("reply", reply)
    b.add_edge(START, "reply")
    graph = with_deadlines(b, timeout=TIMEOUT, reserve=RESERVE, checkpointer=InMemorySaver())
    cfg = _thread("plain")

    out = await graph.ainvoke({"messages": [HumanMessage("hello")]}, cfg)
    assert out["messages"][-1].text.startswith("I ran out of time")  # the closing reply
    assert (await graph.aget_state(cfg)).next == ("reply",)

    out = await graph.ainvoke(_grant(), cfg)

    assert seen == ["hello", "hello"]  # not the closing reply
    assert [m.text for m in out["messages"]] == ["hello", "you said: hello"]
