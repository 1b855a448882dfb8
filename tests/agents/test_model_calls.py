"""DeadlineMiddleware's model calls in a real `create_agent` with the real `ChatOpenAI` against
the local OpenAI-compatible server: cut at the budget, SDK retries inside it, the budget told."""

from __future__ import annotations

import time

import anyio
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRetryMiddleware
from langchain_core.messages import AIMessage

from langgraph_deadline import Terminal
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.testing import (
    ChatReply,
    FakeOpenAIServer,
    await_nothing_sent_after,
)
from langgraph_deadline.types import StepStatus
from tests.agents.support import MARGIN, SLOW, ask, deadline_of, orders
from tests.chat_models import openai_chat as chat


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
async def test_the_budget_reaches_the_provider_as_timeout_and_max_tokens(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.text("short"), ChatReply.text("short"))
    fast = DeadlineMiddleware(
        timeout=2.0, model_limits=ModelLimits(cap=1.0, tokens_per_second=50.0)
    )
    agent = create_agent(chat(server), [orders], middleware=[fast])
    await agent.ainvoke(ask())
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 50  # 50 tokens/s x the 1 s model cap
    assert server.requests[0].read_timeout == pytest.approx(1.0)  # the model cap

    limited = create_agent(chat(server, max_tokens=10), [orders], middleware=[fast])
    await limited.ainvoke(ask())
    assert server.requests[1].body["max_completion_tokens"] == 10  # never raised
