"""LangGraph's node cache (`cache_policy=`, `compile(cache=InMemoryCache())`) under deadlines:
a node the deadline ended early is never cached, only a real result is, and that result is
cached without this library's fields (its records belong to the run that made them)."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import CachePolicy
from typing_extensions import TypedDict

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    deadline_tool,
    terminal_of,
    with_deadlines,
)
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

HANG = 30.0  # the backend's one stall: far past any budget here
TIMEOUT = 1.0  # generous: a loaded 2-core machine


class Plain(TypedDict, total=False):
    q: str
    a: str


class Fields(DeadlineState, total=False):
    q: str
    a: str


class Backend:
    """A real HTTP backend (loopback) that stalls on its first request, then recovers."""

    def __init__(self, server: SlowServer) -> None:
        self.server = server
        self.stalls = 1
        self.calls = 0

    async def lookup(self, q: str) -> str:
        self.calls += 1
        delay = HANG if self.stalls else 0.0
        self.stalls = max(0, self.stalls - 1)
        async with httpx.AsyncClient() as client:
            await client.get(self.server.url(f"/slow?delay={delay}"))
        return f"answer to {q}"


def _graph(schema: type[Any], backend: Backend, policy: CachePolicy[Any]) -> Any:
    async def lookup(state: Any) -> dict[str, Any]:
        return {"a": await backend.lookup(state["q"])}

    builder = StateGraph(schema)
    builder.add_node("lookup", lookup, cache_policy=policy)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", END)
    return with_deadlines(builder.compile(cache=InMemoryCache()), timeout=TIMEOUT)


def _cached_writes(graph: Any) -> list[Any]:
    cache = graph.cache.cache  # the user's InMemoryCache, inside ours
    return [
        cache.serde.loads_typed(entry[:2])
        for entries in cache._cache.values()
        for entry in entries.values()
    ]


@pytest.mark.anyio
async def test_a_node_cut_by_the_deadline_is_not_cached_with_a_plain_state(
    slow_server: SlowServer,
) -> None:
    backend = Backend(slow_server)
    graph = _graph(Plain, backend, CachePolicy())
    with pytest.raises(DeadlineExceeded, match="lookup"):
        await graph.ainvoke({"q": "stock"})
    assert _cached_writes(graph) == []
    out = await graph.ainvoke({"q": "stock"})  # the backend recovered: the node runs
    assert out == {"q": "stock", "a": "answer to stock"}
    assert backend.calls == 2
    assert await graph.ainvoke({"q": "stock"}) == out  # the real result, from the cache
    assert backend.calls == 2


@pytest.mark.anyio
async def test_a_node_cut_by_the_deadline_is_not_cached_with_deadline_state_and_a_key(
    slow_server: SlowServer, caplog: pytest.LogCaptureFixture
) -> None:
    backend = Backend(slow_server)
    graph = _graph(Fields, backend, CachePolicy(key_func=lambda s: s["q"]))
    first = await graph.ainvoke({"q": "stock"})
    assert terminal_of(first) is Terminal.DEADLINE_EXCEEDED
    assert _cached_writes(graph) == []
    second = await graph.ainvoke({"q": "stock"})
    assert terminal_of(second) is Terminal.COMPLETED
    assert second["a"] == "answer to stock"
    assert [r.name for r in second["deadline_trace"]] == ["lookup"]
    assert backend.calls == 2
    with caplog.at_level(logging.WARNING):
        third = await graph.ainvoke({"q": "stock"})  # from the cache: the node does not run
    assert backend.calls == 2
    assert terminal_of(third) is Terminal.COMPLETED
    assert third["a"] == "answer to stock"
    assert third["deadline_trace"] == []  # no record of a run that was not this one
    # Nothing of ours in the cached write: no unregistered type for the serializer to load.
    cached = [tuple(w) for writes in _cached_writes(graph) for w in writes]
    assert cached == [("a", "answer to stock")]
    assert not [r for r in caplog.records if "unregistered type" in r.getMessage()]


CALL = AIMessage("", tool_calls=[{"name": "stock", "args": {"item": "pens"}, "id": "c1"}])


def _tool_graph(backend: Backend, **compile: Any) -> Any:
    """A cached `ToolNode` whose one tool's backend stalls once, past the tool's cap."""

    @deadline_tool(cap=0.3)
    async def stock(item: str) -> str:
        """How many items are in stock."""
        return await backend.lookup(item)

    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([stock]), cache_policy=CachePolicy())
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return with_deadlines(builder.compile(cache=InMemoryCache(), **compile), timeout=5.0)


@pytest.mark.anyio
async def test_a_tool_node_whose_call_timed_out_is_not_cached(slow_server: SlowServer) -> None:
    """A node that completed with a cut step's answer (a tool's timeout message) has no real
    result to replay: the next same call runs the tool again."""
    backend = Backend(slow_server)
    graph = _tool_graph(backend)
    given = {"messages": [HumanMessage("pens?"), CALL]}
    first = await graph.ainvoke(given)
    assert isinstance(reply := first["messages"][-1], ToolMessage)
    assert reply.status == "error"  # the model-readable timeout
    second = await graph.ainvoke(given)
    assert second["messages"][-1].content == "answer to pens"
    assert backend.calls == 2


@pytest.mark.anyio
async def test_a_node_kept_out_of_the_cache_still_streams_its_update(
    slow_server: SlowServer,
) -> None:
    """Keeping a node out of the cache changes nothing a run shows: its update is streamed
    and checkpointed as any other (an error write would hide it from "updates")."""
    graph = _tool_graph(Backend(slow_server), checkpointer=InMemorySaver())
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    given = {"messages": [HumanMessage("pens?"), CALL]}
    updates = [u async for u in graph.astream(given, config, stream_mode="updates")]
    tools = [u["tools"] for u in updates if "tools" in u]
    assert tools, updates
    assert tools[0]["messages"][-1].status == "error"  # the model-readable timeout
    assert _cached_writes(graph) == []
    state = await graph.aget_state(config)
    assert state.next == ()  # the node finished: nothing left to run, no failed task
    assert not [t for t in state.tasks if t.error]


def test_a_sync_node_abandoned_at_the_deadline_is_not_cached() -> None:
    """Sync work past its budget is abandoned (it may still run): no result to cache either."""
    calls: list[float] = []

    def lookup(state: Any) -> dict[str, Any]:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(1.0)  # the backend stalls once; the thread cannot be stopped
        return {"a": f"answer to {state['q']}"}

    builder = StateGraph(Fields)
    builder.add_node("lookup", lookup, cache_policy=CachePolicy())
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", END)
    graph = with_deadlines(builder.compile(cache=InMemoryCache()), timeout=0.3)
    first = graph.invoke({"q": "stock"})
    assert terminal_of(first) is Terminal.DEADLINE_EXCEEDED
    assert first["deadline_trace"][-1].status is StepStatus.ABANDONED
    second = graph.invoke({"q": "stock"})
    assert (terminal_of(second), second["a"]) == (Terminal.COMPLETED, "answer to stock")
    assert len(calls) == 2
