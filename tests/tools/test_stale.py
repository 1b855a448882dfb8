"""A read-only tool's stale cache: the last good answer served, marked stale, per namespace."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

from langgraph_deadline import InMemoryStaleCache, StoreStaleCache, deadline_tool
from langgraph_deadline._tools.cache import cache_key
from langgraph_deadline._tools.stale import (
    default_namespace,
    namespace_of,
    slot,
    stale_content,
    stored_content,
    tool_call_id,
    visible_args,
)
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import CachedResult


def _cached_tool(cache: Any, server: SlowServer, delay: list[float]) -> Any:
    @deadline_tool(cap=0.4, read_only=True, cache=cache)
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
    with pytest.warns(UserWarning, match="cache_namespace="):
        no_namespace = stock.invoke(_call("A1"))
    assert no_namespace.status == "error"  # no user, no thread: nothing cached or served


def _quick_cached_tool(**options: Any) -> Any:
    @deadline_tool(cap=2.0, read_only=True, cache=InMemoryStaleCache(), **options)
    def stock(sku: str) -> str:
        """Stock level for a SKU."""
        return f"{sku}: 7 in stock"

    return stock


def _uncached_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "stale cache of tool" in str(w.message)]


@pytest.mark.anyio
async def test_a_cached_tool_called_without_a_namespace_says_so_once_naming_cache_namespace() -> (
    None
):
    stock = _quick_cached_tool()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stock.invoke(_call("A1"))
        await stock.ainvoke(_call("B2"))
        stock.invoke({"sku": "C3"})
    said = _uncached_warnings(caught)
    assert len(said) == 1
    assert "'stock'" in said[0] and "cache_namespace=" in said[0] and "thread_id" in said[0]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _quick_cached_tool().invoke(_call("A1"))  # another tool: said again, once
    assert len(_uncached_warnings(caught)) == 1


def test_a_cached_tool_with_a_thread_or_an_explicit_namespace_says_nothing() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _quick_cached_tool().invoke(_call("A1"), {"configurable": {"thread_id": "t1"}})
        _quick_cached_tool(cache_namespace="public").invoke(_call("A1"))
    assert _uncached_warnings(caught) == []


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

        @deadline_tool(cap=5.0, read_only=True, cache=StoreStaleCache(store))  # only to succeed
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

    @deadline_tool(cap=0.3, read_only=True, cache=StoreStaleCache(store))
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

    @deadline_tool(cap=0.3, read_only=True, cache=cache, cache_namespace="public-docs")
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


def test_the_default_namespace_is_the_authenticated_user_else_the_user_else_the_thread() -> None:
    assert default_namespace({"configurable": {"user_id": "u", "thread_id": "t"}}) == "user:u"
    assert default_namespace({"configurable": {"langgraph_auth_user_id": "a"}}) == "auth:a"
    assert default_namespace({"configurable": {"thread_id": "t"}}) == "thread:t"
    assert default_namespace({}) is None
    assert namespace_of("public", {}) == "public"
    assert namespace_of(lambda cfg: "fn", {}) == "fn"


def test_the_key_uses_only_the_arguments_the_model_gave() -> None:
    @tool
    def stock(sku: str, config: RunnableConfig) -> str:
        """Stock."""
        return sku

    call = {"type": "tool_call", "id": "c", "name": "stock", "args": {"sku": "A1", "config": {}}}
    assert tool_call_id(call) == "c" and tool_call_id({"sku": "A1"}) is None
    assert visible_args(stock, call) == {"sku": "A1"}
    assert slot(stock, None, call, {"configurable": {"thread_id": "t"}}) == (
        "thread:t",
        cache_key("stock", {"sku": "A1"}),
    )
    assert slot(stock, None, call, {}) is None


def test_a_stale_answer_is_headed_by_its_age_and_why_the_live_call_gave_none() -> None:
    text = stale_content("stock", "7 left", age_s=61.4, failed=True)
    assert text.startswith("[stale result from 61 s ago: the live call to 'stock' failed;")
    assert text.endswith("]\n7 left")
    blocks = stale_content("stock", [{"type": "text", "text": "7"}], age_s=1, failed=False)
    assert (
        blocks[0]["text"].startswith("[stale result from 1 s ago")
        and "timed out" in blocks[0]["text"]
    )
    assert blocks[1] == {"type": "text", "text": "7"}
    assert stored_content(ToolMessage("7 left", tool_call_id="c")) == "7 left"


class _DictCache:
    """A user's own backend, written with the public names only (`types.CachedResult`); its
    entries are dated 30 s back, so that a stale answer says its age."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], CachedResult] = {}
        self.async_reads = 0

    def get(self, namespace: str, key: str) -> CachedResult | None:
        return self.entries.get((namespace, key))

    def put(self, namespace: str, key: str, content: Any) -> None:
        self.entries[(namespace, key)] = CachedResult(content, time.time() - 30.0)

    async def aget(self, namespace: str, key: str) -> CachedResult | None:
        self.async_reads += 1
        return self.get(namespace, key)

    async def aput(self, namespace: str, key: str, content: Any) -> None:
        self.put(namespace, key, content)


@pytest.mark.anyio
async def test_a_users_own_cache_serves_a_stale_answer_in_a_checkpointed_tool_node(
    slow_server: SlowServer, tmp_path: Path
) -> None:
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from langgraph_deadline import DeadlineState, StaleCache, with_deadlines

    cache = _DictCache()
    assert isinstance(cache, StaleCache)
    delay = [0.0]

    @deadline_tool(cap=0.4, read_only=True, cache=cache)
    async def stock(sku: str) -> str:
        """Stock level for a SKU."""
        async with httpx.AsyncClient() as client:
            r = await client.get(slow_server.url(f"/slow?delay={delay[0]}&sku={sku}"))
        return f"{sku}: 7 in stock ({r.status_code})"

    class State(MessagesState, DeadlineState):
        pass

    def ask(state: State) -> dict[str, Any]:
        call = {"name": "stock", "args": {"sku": "A1"}, "id": f"c{len(state['messages'])}"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_node("tools", ToolNode([stock]))
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "tools")
    builder.add_edge("tools", END)
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        graph = with_deadlines(builder, timeout=5.0, checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "order-42"}}
        fresh = await graph.ainvoke({"messages": [("user", "stock?")]}, cfg)
        assert fresh["messages"][-1].content == "A1: 7 in stock (200)"
        assert len(cache.entries) == 1  # stored in the user's backend, under the thread

        delay[0] = 5.0
        stale = await graph.ainvoke({"messages": [("user", "again?")]}, cfg)
    answer = stale["messages"][-1]
    assert isinstance(answer, ToolMessage) and answer.status == "success"
    stale_note = r"\[stale result from 3\d s ago: the live call to 'stock' timed out"
    assert re.match(stale_note, answer.content), answer.content
    assert "A1: 7 in stock (200)" in answer.content
    assert stale["deadline_outcome"].terminal.value == "completed"
    assert [r.status.value for r in stale["deadline_trace"] if r.name == "stock"][-1] == "stale"
    assert cache.async_reads >= 1  # the async face of the user's cache served it
    assert slow_server.wait_disconnected(2.0)  # the live call was cut, not left running
