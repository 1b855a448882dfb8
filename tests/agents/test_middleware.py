"""DeadlineMiddleware in a real `create_agent`, driving the real `ChatOpenAI` (OpenAI SDK, HTTP
over loopback) against the local OpenAI-compatible server, which says what it sent and when."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRetryMiddleware, ToolRetryMiddleware
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError

from langgraph_deadline import (
    Deadline,
    StepRecord,
    StepStatus,
    Terminal,
    client_timeout,
    deadline_input,
    deadline_scope,
    deadline_tool,
    remaining,
    terminal_of,
)
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.instrument import StepEvent, get_observers, set_observers
from langgraph_deadline.testing import (
    ChatReply,
    FakeOpenAIServer,
    ScriptedToolCall,
    SlowServer,
)
from langgraph_deadline.testing._quiet import await_nothing_sent_after
from tests.chat_models import openai_chat as chat

MARGIN = 0.5  # generous: a loaded 2-core machine
SLOW = 0.05  # seconds between token chunks of a "slow" model: 200 tokens take 10 s


@pytest.fixture
def steps() -> Iterator[list[StepRecord]]:
    """Every step record emitted during the test (the ones that never reach state included)."""
    seen: list[StepRecord] = []

    class Collect:
        def on_step(self, event: StepEvent) -> None:
            seen.append(event.record)

        def on_run(self, event: Any) -> None:
            pass

    saved = get_observers()
    set_observers([Collect()])
    try:
        yield seen
    finally:
        set_observers(saved)


def deadline_of(out: dict[str, Any]) -> Deadline:
    return Deadline.at(out["deadline"])


def ask(text: str = "where is order 42?") -> Any:
    return {"messages": [HumanMessage(text)]}


@tool
async def hang(query: str) -> str:
    """A lookup that never answers."""
    await asyncio.sleep(3600)
    return "never"


@tool
async def orders(query: str) -> str:
    """Look up an order."""
    return f"order 42 shipped on Monday ({query})"


def assert_valid_history(messages: list[AnyMessage]) -> None:
    """Every tool call has exactly one ToolMessage, after it; the last message is the AI's."""
    answered: dict[str, int] = {}
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            assert not open_calls, f"tool calls left unanswered: {open_calls}"
            open_calls = {c["id"] for c in m.tool_calls if c["id"]}
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, m
            open_calls.discard(m.tool_call_id)
            answered[m.tool_call_id] = answered.get(m.tool_call_id, 0) + 1
    assert not open_calls
    assert all(n == 1 for n in answered.values())
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls


# -- the model streams past the budget ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_model_streaming_past_the_budget_ends_at_the_deadline_and_the_stream_stops(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=1.0)])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    took = time.monotonic() - t0

    assert 1.0 - 0.05 <= took < 1.0 + MARGIN
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "model"
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and "ran out of time" in final.text
    assert final.response_metadata["langgraph_deadline"]["terminal"] == "deadline_exceeded"
    (record,) = out["deadline_trace"]
    assert (record.kind, record.status, record.cancel_source) == (
        "model",
        StepStatus.TIMED_OUT,
        "run_deadline",
    )
    # measured at the server: the disconnect, and at most one chunk after the deadline
    deadline = deadline_of(out)
    await await_nothing_sent_after(server, deadline, chunks=1, within=MARGIN)
    (req,) = server.requests
    assert req.disconnected is not None and 0 < req.chunks_sent < 200
    assert req.disconnected - deadline._mono < MARGIN
    assert req.read_timeout is not None and 0.9 < req.read_timeout <= 1.0  # the SDK's timeout


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


# -- tools ----------------------------------------------------------------------------------------


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
async def test_too_little_left_ends_with_the_final_message_and_a_valid_history(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(
        ChatReply.tool_calls(
            ScriptedToolCall("orders", {"query": "42"}), ScriptedToolCall("hang", {"query": "42"})
        ),
        ChatReply.text("never asked"),
    )
    middleware = DeadlineMiddleware(timeout=1.0, model_min_viable=0.5)
    agent = create_agent(chat(server), [orders, hang], middleware=[middleware])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())

    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert len(server.requests) == 1  # the second model call was never made
    messages = out["messages"]
    assert_valid_history(messages)
    final = messages[-1].text
    assert "ran out of time" in final
    assert "orders: order 42 shipped on Monday" in final  # what is known
    assert "No result in time from: hang" in final  # and what is missing
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "model"
    assert "not started" in outcome.reason
    statuses = {(r.name, r.status) for r in out["deadline_trace"]}
    assert ("model", StepStatus.SKIPPED) in statuses
    assert ("hang", StepStatus.TIMED_OUT) in statuses


@pytest.mark.anyio
async def test_pending_tool_calls_are_closed_when_no_model_call_fits(
    server: FakeOpenAIServer,
) -> None:
    """A history that ends in unanswered tool calls (a run cut mid-tools on the same thread)."""
    pending = AIMessage(
        "",
        tool_calls=[
            {"name": "orders", "args": {"query": "1"}, "id": "call_a", "type": "tool_call"},
            {"name": "orders", "args": {"query": "2"}, "id": "call_b", "type": "tool_call"},
        ],
    )
    agent = create_agent(
        chat(server), [orders], middleware=[DeadlineMiddleware(timeout=0.3, model_min_viable=1.0)]
    )
    out = await agent.ainvoke({"messages": [HumanMessage("hi"), pending]})
    assert server.requests == []  # no request at all
    assert_valid_history(out["messages"])
    closed = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in closed] == ["call_a", "call_b"]
    assert all(m.status == "error" and "skipped" in m.text for m in closed)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


@pytest.mark.anyio
async def test_a_deadline_tool_keeps_its_own_budget_and_message(server: FakeOpenAIServer) -> None:
    @deadline_tool(timeout=0.3, message="'{tool}' gave up after {seconds:.1f} s")
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


# -- the OpenAI SDK's own retries -----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "failure",
    [ChatReply.error(500), ChatReply.rate_limited(retry_after=0.4)],
    ids=["500", "429 retry-after 0.4 s"],
)
async def test_the_sdk_makes_no_request_after_the_deadline(
    server: FakeOpenAIServer, failure: ChatReply
) -> None:
    server.default_reply = failure  # every attempt fails
    model = chat(server, max_retries=50)  # the SDK would go on for minutes
    agent = create_agent(model, [orders], middleware=[DeadlineMiddleware(timeout=1.2)])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())

    assert time.monotonic() - t0 < 1.2 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    deadline = deadline_of(out)
    await anyio.sleep(0.6)  # longer than the SDK's next backoff would have been
    await await_nothing_sent_after(server, deadline, chunks=0, within=MARGIN)
    assert len(server.requests) >= 2  # the SDK did retry, inside the budget
    assert [r.retry_count for r in server.requests] == list(range(len(server.requests)))


@pytest.mark.anyio
async def test_a_retry_after_longer_than_what_is_left_is_not_waited_for(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.rate_limited(retry_after=5))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=0.8)])
    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < 0.8 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert len(server.requests) == 1


# -- the caller cancels ---------------------------------------------------------------------------


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


# -- LangChain's retry middlewares ----------------------------------------------------------------


@pytest.mark.anyio
async def test_model_retries_inside_the_middleware_do_not_outlive_the_budget(
    server: FakeOpenAIServer,
) -> None:
    server.default_reply = ChatReply.error(500)
    retrying = ModelRetryMiddleware(
        max_retries=20, initial_delay=0.2, backoff_factor=1.0, jitter=False
    )
    agent = create_agent(
        chat(server, max_retries=0),
        [orders],
        middleware=[DeadlineMiddleware(timeout=1.0), retrying],
    )
    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < 1.0 + MARGIN
    # cut at the deadline, not "Model call failed after 21 attempts"
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert "ran out of time" in out["messages"][-1].text
    await anyio.sleep(0.4)  # two more backoffs, had they gone on
    await await_nothing_sent_after(server, deadline_of(out), chunks=0, within=MARGIN)
    assert 2 <= len(server.requests) <= 6


@pytest.mark.anyio
async def test_a_cut_model_call_is_not_retried_by_an_outer_retry_middleware(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    retrying = ModelRetryMiddleware(max_retries=5, initial_delay=0.0)
    agent = create_agent(
        chat(server), [orders], middleware=[retrying, DeadlineMiddleware(timeout=0.8)]
    )
    out = await agent.ainvoke(ask())
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert len(server.requests) == 1  # the graceful ending is an answer, not an error to retry


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


# -- how runs end ---------------------------------------------------------------------------------


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
async def test_the_budget_reaches_the_provider_as_timeout_and_max_tokens(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.text("short"), ChatReply.text("short"))
    fast = DeadlineMiddleware(timeout=2.0, model_cap=1.0, tokens_per_second=50.0)
    agent = create_agent(chat(server), [orders], middleware=[fast])
    await agent.ainvoke(ask())
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 50  # 50 tokens/s x the 1 s model cap
    assert server.requests[0].read_timeout == pytest.approx(1.0)  # the model cap

    limited = create_agent(chat(server, max_tokens=10), [orders], middleware=[fast])
    await limited.ainvoke(ask())
    assert server.requests[1].body["max_completion_tokens"] == 10  # never raised


def test_bad_settings_get_clear_errors() -> None:
    with pytest.raises(ValueError, match="timeout"):
        DeadlineMiddleware(timeout=-1)
    with pytest.raises(ValueError, match="tool_caps\\['search'\\]"):
        DeadlineMiddleware(tool_caps={"search": float("nan")})
    with pytest.raises(TypeError, match="model_min_viable"):
        DeadlineMiddleware(model_min_viable="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens_per_second"):
        DeadlineMiddleware(tokens_per_second=0)


# -- the client of a server goes away -------------------------------------------------------------


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
