"""Many workers, one deadline: the retriever with a human approval step, checkpointed in Postgres.

A run starts on one worker process, stops at `interrupt()` for approval, and is resumed by
whichever worker gets the next request. The deadline is in the checkpoint (absolute, epoch
seconds), so the resumed run keeps it: the resuming worker's own default does not refresh it,
and its nodes get only what is left.

Run two of them against one database:

```bash
export DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres SEARCH_URL=...
uvicorn --factory examples.across_services.worker:from_env --port 8011 &
uvicorn --factory examples.across_services.worker:from_env --port 8012 &
```
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from examples.across_services._serve import RunReport, run_graph
from examples.across_services.retriever import DEFAULT_SEARCH_URL, RetrieverState, search_node
from langgraph_deadline import with_deadlines
from langgraph_deadline.asgi import DeadlineASGIMiddleware
from langgraph_deadline.types import DeadlineGraph

__all__ = ["build_graph", "create_app", "from_env"]


class ApprovalState(RetrieverState, total=False):
    approved: bool


def build_graph(search_url: str, checkpointer: Any, *, timeout: float = 30.0) -> DeadlineGraph:
    """approve (waits for a human: `interrupt`) -> search (the slow tool)."""

    async def approve(state: ApprovalState) -> dict[str, Any]:
        return {"approved": bool(interrupt({"query": state["query"]}))}

    builder = StateGraph(ApprovalState)
    builder.add_node("approve", approve)
    builder.add_node("search", search_node(search_url))
    builder.add_edge(START, "approve")
    builder.add_conditional_edges("approve", lambda s: "search" if s["approved"] else END)
    builder.add_edge("search", END)
    return with_deadlines(builder, timeout=timeout, checkpointer=checkpointer)


def create_app(
    *,
    database_url: str,
    search_url: str,
    max_timeout: float = 60.0,
    default_timeout: float = 30.0,
) -> Starlette:
    """`POST /runs/{thread}` starts a run, `POST /runs/{thread}/resume` resumes it (with
    `{"approved": bool}`), `GET /runs/{thread}` shows its deadline, outcome and step records."""
    runs: list[RunReport] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncPostgresSaver.from_conn_string(database_url) as saver:
            await saver.setup()
            app.state.graph = build_graph(search_url, saver, timeout=default_timeout)
            yield

    def thread(request: Request) -> RunnableConfig:
        return {"configurable": {"thread_id": request.path_params["thread"]}}

    async def start(request: Request) -> JSONResponse:
        body = await request.json()
        graph = request.app.state.graph
        out = await run_graph(graph, {"query": body["query"]}, runs, config=thread(request))
        return JSONResponse(_view(out))

    async def resume(request: Request) -> JSONResponse:
        body = await request.json()
        graph = request.app.state.graph
        command: Command[Any] = Command(resume=bool(body["approved"]))
        out = await run_graph(graph, command, runs, config=thread(request))
        return JSONResponse(_view(out))

    async def show(request: Request) -> JSONResponse:
        snapshot = await request.app.state.graph.aget_state(thread(request))
        return JSONResponse(_view(snapshot.values))

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"worker": os.getpid()})

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/runs/{thread}", start, methods=["POST"]),
            Route("/runs/{thread}", show, methods=["GET"]),
            Route("/runs/{thread}/resume", resume, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(
        DeadlineASGIMiddleware, max_timeout=max_timeout, default_timeout=default_timeout
    )
    app.state.runs = runs
    return app


def _view(state: Any) -> dict[str, Any]:
    outcome = state.get("deadline_outcome")
    return {
        "worker": os.getpid(),
        "interrupted": bool(state.get("__interrupt__")),
        "deadline": state.get("deadline"),
        "outcome": outcome.to_dict() if outcome is not None else None,
        "trace": [r.to_dict() for r in state.get("deadline_trace", [])],
        "documents": state.get("documents", []),
    }


def from_env() -> Starlette:
    """`create_app` configured from `DATABASE_URL` and `SEARCH_URL` (for `uvicorn --factory`)."""
    return create_app(
        database_url=os.environ["DATABASE_URL"],
        search_url=os.environ.get("SEARCH_URL", DEFAULT_SEARCH_URL),
    )
