"""The cancel signal (Go's ctx.Done()): when the caller gives up, steps running in LangGraph's
own tasks stop too, at once, not at their deadline. Measured at the model server."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from examples.across_services._serve import Served
from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.asgi import DeadlineASGIMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer

LONG = ChatReply.counting(400, chunk_interval=0.02)  # an 8 s answer


class State(MessagesState, DeadlineState):
    pass


def _model(server: FakeOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.base_url, api_key=SecretStr("test"), model="m", streaming=True
    )


@pytest.mark.anyio
@pytest.mark.parametrize("timeout", [30.0, None], ids=["deadline", "no-deadline"])
async def test_a_caller_scope_around_astream_stops_the_model_stream_at_once(
    timeout: float | None,
) -> None:
    """LangGraph's own teardown does not reach a node task streaming tokens (stream_mode
    "messages") when an anyio scope cancels the consumer: without the signal the model would
    stream for 8 s more. Also for a node that nothing bounds (a run with no deadline)."""
    with FakeOpenAIServer([LONG]) as server:
        model = _model(server)

        async def call(state: State) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        b = StateGraph(State)
        b.add_node("call", call)
        b.add_edge(START, "call")
        graph = with_deadlines(b, timeout=timeout)
        t0 = time.monotonic()
        with anyio.move_on_after(0.5):
            async for _ in graph.astream(
                {"messages": [HumanMessage("hi")]}, stream_mode="messages"
            ):
                pass
        assert await server.await_disconnected(1.5)
        cut = server.requests[0].disconnected
        assert cut is not None and cut - t0 < 0.5 + 0.5
        assert server.chunks_sent_after(cut) <= 1


@pytest.mark.anyio
async def test_a_client_leaving_a_streamed_agent_behind_the_middleware_stops_the_model() -> None:
    """Starlette abandons a StreamingResponse's iterator when the client leaves; the request's
    signal still reaches the agent's model call, which LangGraph runs in a task of its own."""
    with FakeOpenAIServer([LONG]) as model_server:
        agent = create_agent(_model(model_server), [], middleware=[DeadlineMiddleware(timeout=30)])

        async def endpoint(request: Request) -> StreamingResponse:
            async def tokens() -> AsyncIterator[str]:
                async for chunk, _meta in agent.astream(
                    {"messages": [HumanMessage("hi")]}, stream_mode="messages"
                ):
                    yield json.dumps(str(chunk.content)) + "\n"

            return StreamingResponse(tokens(), media_type="application/x-ndjson")

        app = DeadlineASGIMiddleware(
            Starlette(routes=[Route("/chat", endpoint)]), max_timeout=30, default_timeout=30
        )
        with Served(app) as served:
            t0 = time.monotonic()
            async with (
                httpx.AsyncClient() as client,
                client.stream("GET", served.url("/chat")) as response,
            ):
                seen = 0
                async for _ in response.aiter_lines():
                    seen += 1
                    if time.monotonic() - t0 > 0.5:
                        break  # the user leaves
            assert seen > 0
            left = time.monotonic()
            assert await model_server.await_disconnected(2.0)
            cut = model_server.requests[0].disconnected
            assert cut is not None and cut - left < 1.0
            await asyncio.sleep(0.2)
            assert model_server.chunks_sent_after(cut) <= 1
