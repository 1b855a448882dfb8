"""B, the retriever: a LangGraph graph behind Starlette, whose search tool is slow.

On its own B would give a request 30 s. Behind `DeadlineASGIMiddleware` it gives a request only
what its caller has left: the graph inherits the request's deadline from context, its search
request carries that deadline on to the search service, and the whole run stops when the caller's
time is up.

Run it: `uvicorn --factory examples.across_services.retriever:from_env --port 8002`
(`SEARCH_URL` names the search service). `make_graph` is the same graph for `langgraph dev`.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from examples.across_services._serve import RunReport, run_graph
from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline.asgi import DeadlineASGIMiddleware
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.types import DeadlineGraph

__all__ = [
    "RetrieverState",
    "build_graph",
    "create_app",
    "from_env",
    "make_graph",
    "search_node",
]

DEFAULT_SEARCH_URL = "http://127.0.0.1:8003/slow?delay=10"


class RetrieverState(DeadlineState, total=False):
    query: str
    documents: list[str]


def search_node(search_url: str) -> Any:
    """The slow tool: one GET to the search service, under whatever deadline is in context."""

    async def search(state: RetrieverState, config: RunnableConfig) -> dict[str, Any]:
        params = {"q": state["query"]}
        # Behind LangGraph Server the caller's deadline headers also arrive in the config (see
        # langgraph.json); passed on for the search service's logs. The deadline that rules
        # comes in the input's `deadline` field.
        caller_ms = config.get("configurable", {}).get("x-request-timeout-ms")
        if caller_ms is not None:
            params["caller_timeout_ms"] = str(caller_ms)
        # The hooks send the time left along and cut the client's timeouts to it.
        async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
            response = await client.get(httpx.URL(search_url).copy_merge_params(params))
        response.raise_for_status()
        return {"documents": [f"{state['query']}: {response.text}"]}

    return search


def build_graph(search_url: str, *, timeout: float = 30.0, reserve: float = 0.0) -> DeadlineGraph:
    """search (one HTTP call to a slow search service) -> rank. B's own limit: `timeout`."""

    async def rank(state: RetrieverState) -> dict[str, Any]:
        return {"documents": sorted(state.get("documents", []))}

    builder = StateGraph(RetrieverState)
    builder.add_node("search", search_node(search_url))
    builder.add_node("rank", rank)
    builder.add_edge(START, "search")
    builder.add_edge("search", "rank")
    builder.add_edge("rank", END)
    return with_deadlines(builder, timeout=timeout, reserve=reserve)


def create_app(
    *,
    search_url: str,
    max_timeout: float = 60.0,
    default_timeout: float = 30.0,
    reserve: float = 0.1,
) -> Starlette:
    """B as a service: `POST /retrieve {"query": ...}` -> `{"documents": [...]}`.

    `app.state.runs` lists a `RunReport` per run (how it ended, when), for tests and logs.
    """
    graph = build_graph(search_url, timeout=default_timeout)
    runs: list[RunReport] = []

    async def retrieve(request: Request) -> JSONResponse:
        body = await request.json()
        out = await run_graph(graph, {"query": body["query"]}, runs)
        return JSONResponse({"documents": out["documents"]})

    app = Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"])])
    app.add_middleware(
        DeadlineASGIMiddleware,
        max_timeout=max_timeout,
        default_timeout=default_timeout,
        reserve=reserve,
    )
    app.state.runs = runs
    return app


def from_env() -> Starlette:
    """`create_app` configured from `SEARCH_URL` (for `uvicorn --factory`)."""
    return create_app(search_url=os.environ.get("SEARCH_URL", DEFAULT_SEARCH_URL))


def make_graph() -> DeadlineGraph:
    """The graph alone, for the LangGraph server (see `langgraph.json`).

    Its deadline arrives in the input's `deadline` field; a `reserve` ends it early enough for
    the caller to get its outcome back before its own deadline fires.
    """
    return build_graph(os.environ.get("SEARCH_URL", DEFAULT_SEARCH_URL), reserve=0.2)
