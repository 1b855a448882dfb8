"""DeadlineMiddleware in a real `create_agent`, driving the real `ChatOpenAI` (OpenAI SDK, HTTP
over loopback) against the local OpenAI-compatible server, which says what it sent and when."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError

from langgraph_deadline import (
    StepRecord,
    Terminal,
    deadline_input,
    deadline_scope,
    terminal_of,
)
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.testing import (
    ChatReply,
    FakeOpenAIServer,
    await_nothing_sent_after,
)
from langgraph_deadline.types import StepStatus
from tests.agents.support import MARGIN, SLOW, ask, assert_valid_history, deadline_of, orders
from tests.chat_models import openai_chat as chat


@pytest.mark.anyio
async def test_a_caller_deadline_in_context_wins_over_a_later_timeout(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    # the caller's scope is a hard cut: the reserve leaves the graceful ending time before it
    middleware = DeadlineMiddleware(timeout=30.0, reserve=0.25)
    agent = create_agent(chat(server), [orders], middleware=[middleware])
    t0 = time.monotonic()
    async with deadline_scope(0.8):
        out = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < 0.8
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    (record,) = out["deadline_trace"]
    assert record.allocated_ms is not None and record.allocated_ms < 800 - 250
    await await_nothing_sent_after(server, deadline_of(out), within=MARGIN)


async def _cancel_the_task(call: Awaitable[Any], after: float) -> BaseException | None:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(after)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError as exc:
        return exc
    return None


async def _cancel_the_parent_scope(call: Awaitable[Any], after: float) -> BaseException | None:
    caught: BaseException | None = None
    with anyio.move_on_after(after) as scope:
        try:
            await call
        except BaseException as exc:
            caught = exc
            raise
    assert scope.cancelled_caught
    return caught


@pytest.mark.anyio
@pytest.mark.parametrize(
    "cancel", [_cancel_the_task, _cancel_the_parent_scope], ids=["task.cancel", "parent scope"]
)
async def test_a_user_cancel_is_cancelled_not_deadline_exceeded_and_the_stream_stops(
    server: FakeOpenAIServer,
    steps: list[StepRecord],
    cancel: Callable[[Awaitable[Any], float], Awaitable[BaseException | None]],
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=5.0)])

    error = await cancel(agent.ainvoke(ask()), 0.5)
    cancelled = time.monotonic()

    assert error is not None and terminal_of(error) is Terminal.CANCELLED
    (model,) = [r for r in steps if r.kind == "model"]
    assert (model.status, model.cancel_source) == (StepStatus.CANCELLED, "caller")
    assert await server.await_disconnected(MARGIN * 2)
    await await_nothing_sent_after(server, cancelled, chunks=1, within=MARGIN)
    assert server.requests[0].disconnected - cancelled < MARGIN  # type: ignore[operator]


@pytest.mark.anyio
async def test_a_run_that_finishes_is_completed_with_its_elapsed_time(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.text("Order 42 shipped."))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=5.0)])
    out = await agent.ainvoke(ask())
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.COMPLETED and outcome.ok
    assert outcome.elapsed_ms is not None and 0 < outcome.elapsed_ms < 5000
    assert "deadline_run" not in out  # private bookkeeping stays private


@pytest.mark.anyio
async def test_a_provider_error_is_failed_and_the_recursion_limit_is_step_limit(
    server: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    server.enqueue(ChatReply.error(400, "bad request"))
    agent = create_agent(
        chat(server, max_retries=0), [orders], middleware=[DeadlineMiddleware(timeout=5.0)]
    )
    with pytest.raises(openai.BadRequestError) as failed:
        await agent.ainvoke(ask())
    assert terminal_of(failed.value) is Terminal.FAILED
    assert [r.status for r in steps if r.kind == "model"] == [StepStatus.FAILED]

    server.default_reply = ChatReply.tool_call("orders", {"query": "again"})
    with pytest.raises(GraphRecursionError) as looped:
        await agent.ainvoke(ask(), {"recursion_limit": 8})
    assert terminal_of(looped.value) is Terminal.STEP_LIMIT


@pytest.mark.anyio
async def test_each_run_on_a_thread_gets_a_fresh_deadline(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW), ChatReply.text("quick answer"))
    agent = create_agent(
        chat(server),
        [orders],
        middleware=[DeadlineMiddleware(timeout=0.6)],
        checkpointer=InMemorySaver(),
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "t1"}}

    first = await agent.ainvoke(ask("count"), thread)
    assert first["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    await anyio.sleep(0.7)  # the first run's deadline is long past
    second = await agent.ainvoke(ask("again"), thread)

    assert second["deadline_outcome"].terminal is Terminal.COMPLETED
    assert second["deadline"] > first["deadline"] + 0.6
    assert [r.status for r in second["deadline_trace"]] == [StepStatus.COMPLETED]
    assert second["messages"][-1].text == "quick answer"
    assert_valid_history(second["messages"])  # the first turn's ending is a valid turn
    assert server.requests[1].messages == 3  # the question, the graceful ending, the new one


@pytest.mark.anyio
async def test_a_deadline_in_the_input_is_used_when_it_is_the_earliest(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=30.0)])
    t0 = time.monotonic()
    out = await agent.ainvoke({"messages": [HumanMessage("hi")], **deadline_input(0.5)})  # type: ignore[call-overload]
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


@pytest.mark.anyio
async def test_a_client_that_disconnects_cancels_the_agent_and_its_model_stream(
    server: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    """An agent served behind DeadlineASGIMiddleware: the client gives up after 0.5 s."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from examples.across_services._serve import Served
    from langgraph_deadline.asgi import DeadlineASGIMiddleware

    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=10.0)])

    async def answer(request: Request) -> JSONResponse:
        out = await agent.ainvoke(ask())
        return JSONResponse({"answer": out["messages"][-1].text})

    app = DeadlineASGIMiddleware(Starlette(routes=[Route("/ask", answer)]), max_timeout=10.0)
    with Served(app) as served:
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(served.url("/ask"), timeout=0.5)
        left = time.monotonic()
        assert await server.await_disconnected(MARGIN * 2)
        await await_nothing_sent_after(server, left, chunks=1, within=MARGIN)
    (req,) = server.requests
    assert req.disconnected is not None and req.disconnected - left < MARGIN
    assert req.chunks_sent < 30
    (model,) = [r for r in steps if r.kind == "model"]
    assert (model.status, model.cancel_source) == (StepStatus.CANCELLED, "caller")
