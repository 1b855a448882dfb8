"""A, the planner: a LangGraph graph behind Starlette that asks B, the retriever, over HTTP.

A does not pass a timeout to B: the deadline it runs under (its caller's, from the request
headers) is in context, and the httpx hooks send what is left of it with the request to B. When
B runs out of that time it answers 504, the hooks raise `DeadlineExceeded` naming B's step, and
A answers its own caller 504 in turn.

Run it: `uvicorn --factory examples.across_services.planner:from_env --port 8001`
(`RETRIEVER_URL` names B).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
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

__all__ = ["PlannerState", "build_graph", "create_app", "from_env"]

DEFAULT_RETRIEVER_URL = "http://127.0.0.1:8002"


class PlannerState(DeadlineState, total=False):
    question: str
    query: str
    documents: list[str]
    answer: str


def build_graph(retriever_url: str, *, timeout: float = 10.0) -> DeadlineGraph:
    """plan -> retrieve (B, over HTTP) -> answer. A's own limit: `timeout`."""

    async def plan(state: PlannerState) -> dict[str, Any]:
        return {"query": state["question"].strip().rstrip("?").lower()}

    async def retrieve(state: PlannerState) -> dict[str, Any]:
        payload = {"query": state["query"]}
        async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
            response = await client.post(f"{retriever_url}/retrieve", json=payload)
        response.raise_for_status()
        return {"documents": response.json()["documents"]}

    async def answer(state: PlannerState) -> dict[str, Any]:
        docs = state.get("documents", [])
        return {"answer": f"{len(docs)} document(s) about {state['query']!r}"}

    builder = StateGraph(PlannerState)
    builder.add_node("plan", plan)
    builder.add_node("retrieve", retrieve)
    builder.add_node("answer", answer)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "retrieve")
    builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    return with_deadlines(builder, timeout=timeout)


def create_app(
    *,
    retriever_url: str,
    max_timeout: float = 60.0,
    default_timeout: float = 10.0,
    reserve: float = 0.1,
) -> Starlette:
    """A as a service: `POST /ask {"question": ...}` -> `{"answer": ...}`.

    `app.state.runs` lists a `RunReport` per run.
    """
    graph = build_graph(retriever_url, timeout=default_timeout)
    runs: list[RunReport] = []

    async def ask(request: Request) -> JSONResponse:
        body = await request.json()
        out = await run_graph(graph, {"question": body["question"]}, runs)
        return JSONResponse({"answer": out["answer"], "documents": out["documents"]})

    app = Starlette(routes=[Route("/ask", ask, methods=["POST"])])
    app.add_middleware(
        DeadlineASGIMiddleware,
        max_timeout=max_timeout,
        default_timeout=default_timeout,
        reserve=reserve,
    )
    app.state.runs = runs
    return app


def from_env() -> Starlette:
    """`create_app` configured from `RETRIEVER_URL` (for `uvicorn --factory`)."""
    return create_app(retriever_url=os.environ.get("RETRIEVER_URL", DEFAULT_RETRIEVER_URL))
