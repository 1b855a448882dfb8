"""DeadlineMiddleware in sync agents (`agent.invoke`): model and tool calls run on worker threads
that cannot be killed. The run still returns on time, records say `abandoned`, a token stream's
connection is closed at the deadline, and no SDK retry leaves late."""

from __future__ import annotations

import time

import httpx2
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from prometheus_client import CollectorRegistry

from langgraph_deadline import Deadline, Terminal
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.instrument import PrometheusObserver, get_observers, set_observers
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.testing._quiet import assert_nothing_sent_after
from langgraph_deadline.types import StepStatus
from tests.chat_models import openai_chat as chat

MARGIN = 0.5
SLOW = 0.05


@tool
def orders(query: str) -> str:
    """Look up an order."""
    return f"order 42 shipped ({query})"


@tool
def slow_lookup(query: str) -> str:
    """A sync lookup that takes 3 s."""
    time.sleep(3)
    return "late"


def test_a_sync_agent_returns_at_the_deadline_and_the_stream_is_closed_there(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=1.0)])
    registry = CollectorRegistry()
    saved = get_observers()
    set_observers([PrometheusObserver(registry=registry)])

    t0 = time.monotonic()
    try:
        out = agent.invoke({"messages": [HumanMessage("count")]})
        took = time.monotonic() - t0
        server.wait_disconnected(MARGIN * 2)  # the late token is counted by then
    finally:
        set_observers(saved)

    assert took < 1.0 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    (record,) = out["deadline_trace"]
    assert record.status is StepStatus.ABANDONED  # the thread could not be killed...
    assert server.wait_disconnected(MARGIN * 2)  # ...but its stream's connection was closed
    deadline = Deadline.at(out["deadline"])
    assert_nothing_sent_after(server, deadline, chunks=1, within=MARGIN)
    assert server.requests[0].disconnected - deadline._mono < MARGIN  # type: ignore[operator]
    late = registry.get_sample_value(
        "langgraph_deadline_tokens_after_deadline_total", {"step": "model"}
    )
    # Closed at the deadline, so no token after it reaches the model; on a loaded machine, one
    # may come between the deadline and the close, and stop the stream itself (counted).
    assert late in (None, 1.0)


def test_with_deadline_hooks_the_sdk_sends_no_retry_after_the_deadline(
    server: FakeOpenAIServer,
) -> None:
    server.default_reply = ChatReply.error(500)
    model = chat(server, max_retries=50, http_client=httpx2.Client(event_hooks=deadline_hooks()))
    agent = create_agent(model, [orders], middleware=[DeadlineMiddleware(timeout=1.0)])

    out = agent.invoke({"messages": [HumanMessage("hi")]})

    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    time.sleep(2.5)  # the abandoned thread's next SDK backoffs, had it sent them
    assert_nothing_sent_after(server, Deadline.at(out["deadline"]), chunks=0, within=MARGIN)
    assert len(server.requests) >= 2  # retried inside the budget only


def test_a_slow_sync_tool_is_abandoned_and_the_model_goes_on(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.tool_call("slow_lookup", {"query": "x"}), ChatReply.text("done"))
    middleware = DeadlineMiddleware(timeout=5.0, tool_caps={"slow_lookup": 0.4})
    agent = create_agent(chat(server), [slow_lookup], middleware=[middleware])

    t0 = time.monotonic()
    out = agent.invoke({"messages": [HumanMessage("look it up")]})

    assert time.monotonic() - t0 < 0.4 + MARGIN * 2
    (result,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert result.status == "error" and "did not answer within 0.4 s" in result.text
    assert result.artifact["langgraph_deadline"]["status"] == "abandoned"
    assert out["messages"][-1].text == "done"
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
