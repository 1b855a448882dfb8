"""deadline_tool in real graphs: ToolNode, create_agent, stale caches, budgets."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore

from langgraph_deadline import (
    DeadlineState,
    InMemoryStaleCache,
    StepStatus,
    StoreStaleCache,
    Terminal,
    deadline_scope,
    deadline_tool,
    deadline_tools,
    with_deadlines,
)
from langgraph_deadline.testing import SlowServer
from tests.chat_models import ScriptedChatModel, tool_calls

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
        deadline_tool(make("orders", 0.05), timeout=0.8),
        deadline_tool(make("docs", 0.1), timeout=0.8),
        deadline_tool(make("tickets", 0.05), timeout=0.8),
        deadline_tool(make("warehouse", 30), timeout=0.8),
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
    @deadline_tool(timeout=10)
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
    @deadline_tool(timeout=2, min_viable=1.0)
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


def _cached_tool(cache: Any, server: SlowServer, delay: list[float]) -> Any:
    @deadline_tool(timeout=0.4, read_only=True, cache=cache)
    def stock(sku: str) -> str:
        """Stock level for a SKU."""
        r = httpx.get(server.url(f"/slow?delay={delay[0]}&sku={sku}"), timeout=10)
        return f"{sku}: 7 in stock ({r.status_code})"

    return stock


def _call(sku: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": "c1", "name": "stock", "args": {"sku": sku}}


def test_stale_fallback_serves_the_last_good_answer_marked_stale(slow_server: SlowServer) -> None:
    delay = [0.0]
    stock = _cached_tool(InMemoryStaleCache(), slow_server, delay)
    user_a = {"configurable": {"user_id": "alice"}}
    fresh = stock.invoke(_call("A1"), user_a)
    assert fresh.status == "success" and fresh.content == "A1: 7 in stock (200)"

    delay[0] = 5.0
    time.sleep(1.1)
    stale = stock.invoke(_call("A1"), user_a)
    assert stale.status == "success"
    assert re.match(
        r"\[stale result from [12] s ago: the live call to 'stock' timed out", stale.content
    )
    assert "A1: 7 in stock (200)" in stale.content
    facts = stale.artifact["langgraph_deadline"]
    assert facts["stale"] is True and facts["age_s"] >= 1.0

    other_user = stock.invoke(_call("A1"), {"configurable": {"user_id": "bob"}})
    assert other_user.status == "error"  # never another user's cached answer
    other_args = stock.invoke(_call("B2"), user_a)
    assert other_args.status == "error"
    no_namespace = stock.invoke(_call("A1"))
    assert no_namespace.status == "error"  # no user, no thread: nothing cached or served


def test_store_cache_survives_a_process_restart(tmp_path: Path, slow_server: SlowServer) -> None:
    db = tmp_path / "store.sqlite"
    script = textwrap.dedent(
        f"""
        import sqlite3, httpx
        from langgraph.store.sqlite import SqliteStore
        from langgraph_deadline import StoreStaleCache, deadline_tool

        conn = sqlite3.connect({str(db)!r}, check_same_thread=False, isolation_level=None)
        store = SqliteStore(conn)
        store.setup()

        @deadline_tool(timeout=0.4, read_only=True, cache=StoreStaleCache(store))
        def stock(sku: str) -> str:
            \"\"\"Stock level.\"\"\"
            httpx.get({slow_server.url("/slow?delay=0")!r}, timeout=10)
            return sku + ": 7 in stock"

        cfg = {{"configurable": {{"thread_id": "t1"}}}}
        msg = stock.invoke({{"type": "tool_call", "id": "c", "name": "stock",
                             "args": {{"sku": "A1"}}}}, cfg)
        print(msg.status, msg.content)
        """
    )
    first = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "success A1: 7 in stock"

    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)

    @deadline_tool(timeout=0.3, read_only=True, cache=StoreStaleCache(store))
    def stock(sku: str) -> str:
        """Stock level."""
        httpx.get(slow_server.url("/slow?delay=5"), timeout=10)
        return "never"

    msg = stock.invoke(_call("A1"), {"configurable": {"thread_id": "t1"}})
    conn.close()
    assert msg.status == "success"
    assert "stale result" in msg.content and msg.content.endswith("A1: 7 in stock")


@pytest.mark.anyio
async def test_store_cache_with_an_in_memory_store_and_explicit_namespace(
    slow_server: SlowServer,
) -> None:
    cache = StoreStaleCache(InMemoryStore(), ttl=60)
    delay = [0.0]

    @deadline_tool(timeout=0.3, read_only=True, cache=cache, cache_namespace="public-docs")
    async def docs(topic: str) -> str:
        """Docs."""
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url(f"/slow?delay={delay[0]}"))
        return f"docs on {topic}"

    call = {"type": "tool_call", "id": "c", "name": "docs", "args": {"topic": "refunds"}}
    assert (await docs.ainvoke(call)).content == "docs on refunds"
    delay[0] = 5
    stale = await docs.ainvoke(call)
    assert "stale result" in stale.content and stale.content.endswith("docs on refunds")


def test_wrapping_an_existing_tool_keeps_what_the_model_sees() -> None:
    @tool
    def search(query: str, limit: int = 5) -> str:
        """Search the knowledge base."""
        return query * limit

    wrapped = deadline_tool(search, timeout=3)
    assert wrapped.name == search.name
    assert wrapped.description == search.description
    assert (
        wrapped.tool_call_schema.model_json_schema() == search.tool_call_schema.model_json_schema()
    )
    assert wrapped.invoke({"query": "a", "limit": 2}) == "aa"

    @deadline_tool("renamed", timeout=1)
    def other(x: int) -> int:
        """Other."""
        return x + 1

    assert other.name == "renamed" and other.invoke({"x": 1}) == 1 + 1


def test_caps_table_and_bad_input_get_clear_errors() -> None:
    def search_docs(q: str) -> str:
        """Docs."""
        return q

    def get_order(order_id: str) -> str:
        """Order."""
        return order_id

    wrapped = deadline_tools([search_docs, get_order], caps={"search_docs": 5}, default=3)
    assert {t.name: t.timeout for t in wrapped} == {"search_docs": 5, "get_order": 3}
    with pytest.raises(ValueError, match="unknown tools"):
        deadline_tools([search_docs], caps={"nope": 1})
    with pytest.raises(ValueError, match="timeout"):
        deadline_tool(search_docs, timeout=-1)
    with pytest.raises(ValueError, match="read_only"):
        deadline_tool(search_docs, cache=InMemoryStaleCache())
    with pytest.raises(ValueError, match="max_entries"):
        InMemoryStaleCache(max_entries=0)

    class Opaque:
        pass

    @deadline_tool(timeout=1, read_only=True, cache=InMemoryStaleCache())
    def takes_anything(x: Any) -> str:
        """Anything."""
        return "ok"

    with pytest.raises(TypeError, match="not JSON-serializable"):
        takes_anything.invoke(
            {"type": "tool_call", "id": "c", "name": "takes_anything", "args": {"x": Opaque()}},
            {"configurable": {"thread_id": "t"}},
        )


def test_a_sync_tool_past_its_budget_is_abandoned_and_says_so() -> None:
    import threading

    release = threading.Event()

    @deadline_tool(timeout=0.2)
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
    @deadline_tool(timeout=1)
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


def _post_tool(server: SlowServer, **options: Any) -> Any:
    @deadline_tool(timeout=3, side_effect=True, retry_on=httpx.HTTPStatusError, **options)
    def refund(order_id: str, config: RunnableConfig) -> str:
        """Refund an order."""
        key = (config.get("metadata") or {}).get("idempotency_key", "")
        r = httpx.post(server.url(f"/slow?delay=0&status=503&key={key}"), timeout=5)
        r.raise_for_status()
        return "refunded"

    return refund


@pytest.mark.anyio
async def test_a_write_tool_is_not_retried_once_its_request_may_have_left(
    slow_server: SlowServer,
) -> None:
    from langgraph_deadline import StepRecord

    refund = _post_tool(slow_server)
    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([refund], handle_tool_errors=True))
    b.add_edge(START, "tools")
    out = await with_deadlines(b, timeout=5).ainvoke(
        {"messages": [tool_calls(("refund", {"order_id": "42"}))]}
    )
    assert len(slow_server.requests) == 1  # never sent twice
    assert out["messages"][-1].status == "error"
    rec: StepRecord = next(r for r in out["deadline_trace"] if r.name == "refund" and r.attempt)
    calls = [r for r in out["deadline_trace"] if r.kind == "tool" and r.name == "refund"]
    assert any(r.side_effect_started for r in calls), calls
    assert rec.kind == "tool"


def test_a_write_tool_with_an_idempotency_key_is_retried_with_the_same_key(
    slow_server: SlowServer,
) -> None:
    refund = _post_tool(
        slow_server, attempts=3, idempotency_key=lambda a: f"refund-{a['order_id']}"
    )
    with pytest.raises(httpx.HTTPStatusError):
        refund.invoke({"order_id": "42"})
    assert len(slow_server.requests) == 3
    assert {r.query["key"] for r in slow_server.requests} == {"refund-42"}


def test_a_read_tool_retries_within_its_budget(slow_server: SlowServer) -> None:
    hits = [0]

    @deadline_tool(timeout=2, retry_on=httpx.HTTPStatusError, attempts=3)
    def status(order_id: str) -> str:
        """Order status."""
        hits[0] += 1
        code = 503 if hits[0] < 2 else 200
        r = httpx.get(slow_server.url(f"/slow?delay=0&status={code}"), timeout=5)
        r.raise_for_status()
        return "shipped"

    assert status.invoke({"order_id": "42"}) == "shipped"
    assert len(slow_server.requests) == 2


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
