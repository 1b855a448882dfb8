"""Two graphs for LangGraph Server, made by the factories `langgraph.json` names.

- `search`: one slow HTTP call. Each run's deadline is the earliest of its input's `deadline`,
  the request's `X-Request-Timeout-Ms` / `X-Request-Deadline` headers (handed to the graph by
  `configurable_headers` in `langgraph.json`) and its own `timeout`; with `queue_time` it counts
  from when the server received the request, not from when a worker picked the run up.
- `stock`: a read-only tool whose last good answer is kept in the server's store, per user, and
  served marked stale when the live call times out.

`SLOW_URL` names the slow service (the tests point it at a `SlowServer`).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from langgraph.graph import START, StateGraph

from langgraph_deadline import (
    DeadlineState,
    StoreStaleCache,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.types import DeadlineGraph

__all__ = ["SearchState", "StockState", "make_search", "make_stock", "stock_level"]

SLOW_URL = os.environ.get("SLOW_URL", "http://127.0.0.1:8003/slow")


class SearchState(DeadlineState, total=False):
    query: str
    delay: float  # how long the slow service takes to answer (a knob for the demo)
    documents: list[str]


async def search(state: SearchState) -> dict[str, Any]:
    """One GET, under the run's deadline: the hooks send the time left and cut the timeouts."""
    params = {"q": state["query"], "delay": str(state.get("delay", 0.0))}
    async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
        response = await client.get(SLOW_URL, params=params)
    return {"documents": [response.text]}


def make_search() -> DeadlineGraph:
    """At most 30 s per run, 0.2 s of it kept to answer; up to 10 s of queue time counted."""
    builder = StateGraph(SearchState)
    builder.add_node("search", search)
    builder.add_edge(START, "search")
    return with_deadlines(builder, timeout=30.0, reserve=0.2, queue_time=10.0)


# `None`: the store of the run, which LangGraph Server hands the graph when it runs it. Entries
# are kept per user (`langgraph_auth_user_id` with auth on, else the config's `user_id`, else the
# thread): one user's answers are never served to another.
@deadline_tool(cap=1.0, read_only=True, cache=StoreStaleCache(None, ttl=3600))
async def stock_level(sku: str) -> str:
    """Current stock level for a SKU."""
    async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
        response = await client.get(SLOW_URL, params={"sku": sku})
    return f"{sku}: {response.text}"


class StockState(DeadlineState, total=False):
    sku: str
    answer: str


async def lookup(state: StockState) -> dict[str, Any]:
    return {"answer": await stock_level.ainvoke({"sku": state["sku"]})}


def make_stock() -> DeadlineGraph:
    builder = StateGraph(StockState)
    builder.add_node("lookup", lookup)
    builder.add_edge(START, "lookup")
    return with_deadlines(builder, timeout=30.0, reserve=0.2)
