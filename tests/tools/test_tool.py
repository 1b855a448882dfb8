"""deadline_tool in real graphs: ToolNode, create_agent, stale caches, budgets."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_deadline import (
    DeadlineState,
    Terminal,
    deadline_scope,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus
from tests.chat_models import ScriptedChatModel, tool_calls
from tests.conftest import hang_then_close_slowly

MARGIN = 0.6


class Msgs(MessagesState, DeadlineState):
    pass


def _fetch_tools(server: SlowServer) -> list[Any]:
    def make(name: str, delay: float) -> Any:
        async def fetch(query: str) -> str:
            async with httpx.AsyncClient() as client:
                r = await client.get(server.url(f"/slow?delay={delay}&tool={name}"))
            return f"{name}: {r.json()['path']} for {query}"

        fetch.__name__ = name
        fetch.__doc__ = f"Look up {name}."
        return fetch

    return [
        deadline_tool(make("orders", 0.05), cap=0.8),
        deadline_tool(make("docs", 0.1), cap=0.8),
        deadline_tool(make("tickets", 0.05), cap=0.8),
        deadline_tool(make("warehouse", 30), cap=0.8),
    ]


def _agent_graph(tools: list[Any]) -> StateGraph[Any, Any, Any, Any]:
    def agent(state: Msgs) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("summary")]}
        return {"messages": [tool_calls(*((t.name, {"query": "order 42"}) for t in tools))]}

    b = StateGraph(Msgs)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode(tools))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    b.add_edge("tools", "agent")
    return b


def _check_four_results(messages: list[Any]) -> None:
    results = {m.name: m for m in messages if isinstance(m, ToolMessage)}
    assert set(results) == {"orders", "docs", "tickets", "warehouse"}
    for name in ("orders", "docs", "tickets"):
        assert results[name].status == "success"
        assert name in results[name].content
    slow = results["warehouse"]
    assert slow.status == "error"
    text = slow.content
    assert "did not answer within 0.8 s" in text
    assert "timeout, not an empty result" in text
    assert "data may exist" in text
    assert "Do not call 'warehouse' again with the same arguments" in text
    assert "tell the user which part" in text
    assert slow.artifact["langgraph_deadline"]["status"] == "timed_out"


@pytest.mark.anyio
async def test_tool_node_runs_four_tools_three_answer_one_times_out(
    slow_server: SlowServer,
) -> None:
    graph = with_deadlines(_agent_graph(_fetch_tools(slow_server)), timeout=10)
    t0 = time.monotonic()
    out = await graph.ainvoke({"messages": [("user", "where is order 42?")]})
    took = time.monotonic() - t0
    assert 0.8 <= took < 0.8 + MARGIN
    _check_four_results(out["messages"])
    assert out["messages"][-1].content == "summary"  # the model went on with what it had
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    # the hanging request's socket was closed at the server
    assert slow_server.wait_disconnected(2.0)
    hung = [r for r in slow_server.requests if r.query.get("tool") == "warehouse"]
    assert len(hung) == 1 and hung[0].disconnected is not None
    tool_records = {r.name: r for r in out["deadline_trace"] if r.kind == "tool"}
    assert tool_records["warehouse"].status is StepStatus.TIMED_OUT
    assert tool_records["orders"].status is StepStatus.COMPLETED


@pytest.mark.anyio
async def test_create_agent_gets_four_results_and_the_slow_one_is_cut(
    slow_server: SlowServer,
) -> None:
    from langchain.agents import create_agent

    tools = _fetch_tools(slow_server)
    model = ScriptedChatModel(
        script=[tool_calls(*((t.name, {"query": "order 42"}) for t in tools)), AIMessage("ok")]
    )
    agent = create_agent(model, tools)
    t0 = time.monotonic()
    async with deadline_scope(10):
        out = await agent.ainvoke({"messages": [("user", "where is order 42?")]})
    assert time.monotonic() - t0 < 0.8 + MARGIN
    _check_four_results(out["messages"])
    assert len(model.calls) == 2
    assert sum(isinstance(m, ToolMessage) for m in model.calls[1]) == 4
    assert slow_server.wait_disconnected(2.0)


@pytest.mark.anyio
async def test_a_tool_with_a_long_cap_is_cut_at_what_is_left(slow_server: SlowServer) -> None:
    @deadline_tool(cap=10)
    async def lookup(query: str) -> str:
        """Slow lookup."""
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/slow?delay=5"))
        return "never"

    t0 = time.monotonic()
    async with deadline_scope(0.5):
        msg = await lookup.ainvoke(
            {"type": "tool_call", "id": "c", "name": "lookup", "args": {"query": "q"}}
        )
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert msg.status == "error" and "did not answer within 0.5 s" in msg.content
    assert slow_server.wait_disconnected(2.0)


@pytest.mark.anyio
async def test_no_budget_left_means_the_tool_is_skipped_and_makes_no_request(
    slow_server: SlowServer,
) -> None:
    @deadline_tool(cap=2, min_viable=1.0)
    async def lookup(query: str) -> str:
        """Lookup."""
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/fast"))
        return "answer"

    async with deadline_scope(0.5):
        msg = await lookup.ainvoke(
            {"type": "tool_call", "id": "c", "name": "lookup", "args": {"query": "q"}}
        )
    assert msg.status == "error"
    assert "skipped" in msg.content and "budget is exhausted" in msg.content
    assert msg.artifact["langgraph_deadline"]["status"] == "skipped"
    assert slow_server.requests == []


@pytest.mark.anyio
async def test_a_tool_whose_close_outlives_its_cut_still_leaves_its_record(
    steps: list[Any],
) -> None:
    """The tool's cut fires a hand-off before its node's; when closing its I/O takes longer
    than that (a loaded machine, a slow TLS close), the node's cut reaches it mid-close. The
    tool's record must still be written: it never gets back to record its own result."""

    @deadline_tool(cap=3.0)
    async def search(query: str) -> str:
        """Search."""
        await hang_then_close_slowly()
        return "never"

    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([search]))
    b.add_edge(START, "tools")
    graph = with_deadlines(b, timeout=1.5, reserve=0.05)  # time to start on a loaded machine
    await graph.ainvoke({"messages": [tool_calls(("search", {"query": "q"}))]})

    [tool_record] = [r for r in steps if r.kind == "tool"]
    assert tool_record.name == "search" and tool_record.status is StepStatus.TIMED_OUT
    [node_record] = [r for r in steps if r.kind == "node"]
    assert node_record.status is StepStatus.TIMED_OUT


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["write", "hedged"])
async def test_a_tool_cut_by_its_node_mid_close_keeps_what_its_record_says(
    steps: list[Any], kind: str
) -> None:
    """The same race: the record the node's cut makes for the tool still says what the tool
    would have added (a write that may have been sent; the copies a hedged read started)."""

    from langgraph_deadline import Hedge

    async def search(query: str) -> str:
        """Search."""
        await hang_then_close_slowly()
        return "never"

    options: dict[str, Any] = (
        {"side_effect": True}
        if kind == "write"
        else {"read_only": True, "hedge": Hedge(after=0.05)}
    )
    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([deadline_tool(search, cap=3.0, **options)]))
    b.add_edge(START, "tools")
    graph = with_deadlines(b, timeout=1.5, reserve=0.05)  # time to start on a loaded machine
    await graph.ainvoke({"messages": [tool_calls(("search", {"query": "q"}))]})

    [record] = [r for r in steps if r.kind == "tool"]
    assert record.status is StepStatus.TIMED_OUT
    if kind == "write":
        assert record.side_effect_started
    else:
        assert (record.hedges, record.winner) == (1, None)


def test_a_sync_tool_past_its_budget_is_abandoned_and_says_so() -> None:
    import threading

    release = threading.Event()

    @deadline_tool(cap=0.2)
    def blocking(x: str) -> str:
        """Blocks."""
        release.wait(5)
        return "late"

    t0 = time.monotonic()
    try:
        msg = blocking.invoke(
            {"type": "tool_call", "id": "c", "name": "blocking", "args": {"x": "1"}}
        )
    finally:
        release.set()
    assert time.monotonic() - t0 < 0.2 + MARGIN
    assert msg.status == "error"
    assert msg.artifact["langgraph_deadline"]["status"] == "abandoned"


@pytest.mark.anyio
async def test_tool_errors_that_are_not_timeouts_keep_langchains_behaviour() -> None:
    @deadline_tool(cap=1)
    async def broken(x: str) -> str:
        """Broken."""
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await broken.ainvoke({"x": "1"})
    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([broken], handle_tool_errors=True))
    b.add_edge(START, "tools")
    out = await with_deadlines(b, timeout=5).ainvoke(
        {"messages": [tool_calls(("broken", {"x": "1"}))]}
    )
    reply = out["messages"][-1]
    assert reply.status == "error" and "bad input" in reply.content
    await asyncio.sleep(0)


@pytest.mark.anyio
async def test_tool_node_handle_tool_errors_does_not_swallow_the_runs_deadline() -> None:
    from langgraph_deadline import client_timeout

    @tool
    async def plain(query: str) -> str:
        """A plain LangChain tool that honours the deadline through client_timeout()."""
        await asyncio.sleep(0.5)
        client_timeout()  # raises DeadlineExceeded once nothing is left
        return "late"

    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([plain], handle_tool_errors=True))
    b.add_node("after", lambda s: {"messages": [AIMessage("after")]})
    b.add_edge(START, "tools")
    b.add_edge("tools", "after")
    t0 = time.monotonic()
    out = await with_deadlines(b, timeout=0.3).ainvoke(
        {"messages": [tool_calls(("plain", {"query": "q"}))]}
    )
    assert time.monotonic() - t0 < 0.3 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "tools"
    assert not any(getattr(m, "content", "") == "after" for m in out["messages"])


@pytest.mark.anyio
async def test_the_runs_reserve_is_held_back_once_not_again_for_a_tool_inside_a_node() -> None:
    seen: list[float] = []

    @deadline_tool
    async def probe(query: str) -> str:
        """Report the time left."""
        from langgraph_deadline import remaining

        seen.append(remaining())
        return "ok"

    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([probe]))
    b.add_edge(START, "tools")
    await with_deadlines(b, timeout=3.0, reserve=1.0).ainvoke(
        {"messages": [tool_calls(("probe", {"query": "q"}))]}
    )
    # The node got about 3 - 1 = 2 s; the tool gets what the node has, not 2 - 1 = 1 s.
    assert seen and 1.5 < seen[0] <= 2.0
