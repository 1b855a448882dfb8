"""DeadlineMiddleware's tool calls: cut at their budget with a timeout message, `deadline_tool`s
keeping their own, retry middlewares stopped at the budget."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool

from langgraph_deadline import (
    StepRecord,
    Terminal,
    client_timeout,
    deadline_tool,
    remaining,
)
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import (
    ChatReply,
    FakeOpenAIServer,
    ScriptedToolCall,
    SlowServer,
)
from langgraph_deadline.types import StepStatus
from tests.agents.support import MARGIN, ask, orders
from tests.chat_models import openai_chat as chat
from tests.conftest import hang_then_close_slowly


@pytest.mark.anyio
async def test_a_hanging_tool_times_out_and_the_model_answers_within_what_is_left(
    server: FakeOpenAIServer, slow_server: SlowServer
) -> None:
    @tool
    async def warehouse(sku: str) -> str:
        """Stock level for a SKU (a slow service)."""
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/slow?delay=30"))
        return "never"

    server.enqueue(
        ChatReply.tool_calls(
            ScriptedToolCall("orders", {"query": "42"}),
            ScriptedToolCall("warehouse", {"sku": "A1"}),
        ),
        ChatReply.text("Order 42 shipped on Monday; stock levels are unavailable right now."),
    )
    middleware = DeadlineMiddleware(timeout=5.0, tool_caps={"warehouse": 0.5})
    agent = create_agent(chat(server), [orders, warehouse], middleware=[middleware])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    took = time.monotonic() - t0

    assert 0.5 <= took < 0.5 + MARGIN * 2
    results = {m.name: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert results["orders"].status == "success"
    cut = results["warehouse"]
    assert cut.status == "error"
    assert "did not answer within 0.5 s" in cut.text and "not an empty result" in cut.text
    assert cut.artifact["langgraph_deadline"]["status"] == "timed_out"
    assert out["messages"][-1].text.startswith("Order 42 shipped")
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    # the model read the timeout message, with the time that was left as its budget
    second = server.requests[1]
    assert any(
        m["role"] == "tool" and "did not answer" in m["content"] for m in second.body["messages"]
    )
    assert second.read_timeout is not None and second.read_timeout < 5.0 - 0.5
    # the tool's own HTTP request was closed at its budget
    assert slow_server.wait_disconnected(MARGIN * 2)
    trace = [(r.kind, r.name, r.status) for r in out["deadline_trace"]]
    assert ("tool", "warehouse", StepStatus.TIMED_OUT) in trace
    assert ("tool", "orders", StepStatus.COMPLETED) in trace
    assert [k for k, _, _ in trace].count("model") == 2


@pytest.mark.anyio
async def test_a_deadline_tool_keeps_its_own_budget_and_message(server: FakeOpenAIServer) -> None:
    @deadline_tool(cap=0.3, message="'{tool}' gave up after {seconds:.1f} s")
    async def stock(sku: str) -> str:
        """Stock level."""
        await asyncio.sleep(3600)
        return "never"

    server.enqueue(ChatReply.tool_call("stock", {"sku": "A1"}), ChatReply.text("no stock info"))
    middleware = DeadlineMiddleware(timeout=5.0, default_tool_cap=2.0)
    agent = create_agent(chat(server), [stock], middleware=[middleware])
    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < 0.3 + MARGIN * 2
    (result,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert result.text == "'stock' gave up after 0.3 s"
    tool_records = [r for r in out["deadline_trace"] if r.kind == "tool"]
    assert [(r.name, r.status, r.requested_ms) for r in tool_records] == [
        ("stock", StepStatus.TIMED_OUT, 300.0)  # its own record, once
    ]


@pytest.mark.anyio
async def test_a_deadline_tool_cut_mid_close_in_an_agent_is_recorded_once(
    server: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    """In an agent under `DeadlineMiddleware`, a `deadline_tool` whose close outlasts its cut
    (the run's deadline then reaches it mid-close) keeps its record, once: the middleware
    never records a `deadline_tool`'s call itself."""

    @deadline_tool(cap=3.0)
    async def stock(sku: str) -> str:
        """Stock level."""
        await hang_then_close_slowly()
        return "never"

    server.enqueue(ChatReply.tool_call("stock", {"sku": "A1"}), ChatReply.text("no stock info"))
    agent = create_agent(chat(server), [stock], middleware=[DeadlineMiddleware(timeout=0.5)])
    await agent.ainvoke(ask())
    tool_records = [r for r in steps if r.kind == "tool"]
    assert [(r.name, r.status) for r in tool_records] == [("stock", StepStatus.TIMED_OUT)]


@pytest.mark.anyio
async def test_tool_retries_inside_the_middleware_stop_at_the_tool_budget(
    server: FakeOpenAIServer,
) -> None:
    attempts: list[float] = []

    @tool
    async def flaky(query: str) -> str:
        """A lookup whose service is down."""
        attempts.append(time.monotonic())
        raise ConnectionError("service unavailable")

    server.enqueue(ChatReply.tool_call("flaky", {"query": "x"}), ChatReply.text("answered anyway"))
    retrying = ToolRetryMiddleware(
        max_retries=50, initial_delay=0.15, backoff_factor=1.0, jitter=False
    )
    middleware = DeadlineMiddleware(timeout=5.0, tool_caps={"flaky": 0.6})
    agent = create_agent(chat(server), [flaky], middleware=[middleware, retrying])

    out = await agent.ainvoke(ask())

    (result,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert result.status == "error" and "did not answer within 0.6 s" in result.text
    assert out["messages"][-1].text == "answered anyway"
    assert 2 <= len(attempts) <= 5
    tool_record = next(r for r in out["deadline_trace"] if r.kind == "tool")
    assert tool_record.started_at is not None
    started = tool_record.started_at - time.time() + time.monotonic()
    assert all(a - started <= 0.6 + 0.02 for a in attempts)  # none after the tool's budget


@pytest.mark.anyio
async def test_a_tool_out_of_time_is_not_retried_by_tool_retry_middleware(
    server: FakeOpenAIServer,
) -> None:
    """The tool's own client says DeadlineExceeded (no time left): no retry starts."""
    attempts: list[float] = []

    @tool
    async def crunch(query: str) -> str:
        """CPU-bound work that overruns, then asks its client for a timeout."""
        attempts.append(remaining())
        if remaining() > 0:
            time.sleep(remaining() + 0.01)  # noqa: ASYNC251 - CPU-bound: no cancellation point
        client_timeout()  # raises DeadlineExceeded: nothing is left
        return "never"

    server.enqueue(ChatReply.tool_call("crunch", {"query": "x"}), ChatReply.text("went on"))
    retrying = ToolRetryMiddleware(max_retries=5, initial_delay=0.0)  # no pause to be cut
    middleware = DeadlineMiddleware(timeout=5.0, tool_caps={"crunch": 0.3})
    agent = create_agent(chat(server), [crunch], middleware=[middleware, retrying])

    out = await agent.ainvoke(ask())

    assert len(attempts) == 1
    (result,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "did not answer within 0.3 s" in result.text  # not "failed after 6 attempts"
    assert out["messages"][-1].text == "went on"


@pytest.mark.anyio
async def test_a_tool_call_cut_to_keep_back_the_models_learned_time_is_cut_at_its_own_limit(
    server: FakeOpenAIServer,
) -> None:
    """`then=`: the model's learned time is kept back from the call's budget; the call is cut
    there (its own limit, like a cap: `step_cap`), and the model answers in the time kept."""

    @tool
    async def stock(sku: str) -> str:
        """Stock level for a SKU (takes 5 s)."""
        await asyncio.sleep(5.0)
        return "never"

    book = LatencyBook(listen=False)
    for _ in range(60):
        book.record("model", "model", 2.0)
    rule = learned(book, cap=10.0, then=["model:model"])
    server.enqueue(ChatReply.tool_call("stock", {"sku": "A1"}), ChatReply.text("no stock info"))
    middleware = DeadlineMiddleware(timeout=3.0, tool_caps={"stock": rule})
    agent = create_agent(chat(server), [stock], middleware=[middleware])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    took = time.monotonic() - t0

    assert took < 3.0 - 2.0 + MARGIN * 2  # cut at the deadline less the model's 2 s
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["messages"][-1].text == "no stock info"
    (cut,) = [r for r in out["deadline_trace"] if r.kind == "tool"]
    assert (cut.status, cut.cancel_source, cut.clamped) == (
        StepStatus.TIMED_OUT,
        "kept_back",
        False,
    )
    assert cut.allocated_ms is not None and cut.allocated_ms == pytest.approx(1000.0, abs=250.0)
    assert cut.note is not None and cut.note.startswith("kept back ")  # the model's p99
    assert float(cut.note.split()[2]) == pytest.approx(2.0, abs=0.05)
    assert cut.note.endswith(" s for model:model")
