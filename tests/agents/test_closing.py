"""How an agent out of time ends: pending tool calls closed, a final message with what was found."""

from __future__ import annotations

import time

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_deadline import Terminal, deadline_scope
from langgraph_deadline._agents.closing import give_up
from langgraph_deadline._graph.messages import CUT_SHORT
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.testing import (
    ChatReply,
    FakeOpenAIServer,
    ScriptedToolCall,
)
from langgraph_deadline.types import StepStatus
from tests.agents.support import MARGIN, ask, assert_valid_history, hang, orders
from tests.chat_models import openai_chat as chat
from tests.records import model_record


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
    middleware = DeadlineMiddleware(timeout=1.0, model_limits=ModelLimits(min_viable=0.5))
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
        chat(server),
        [orders],
        middleware=[DeadlineMiddleware(timeout=5.0, model_limits=ModelLimits(min_viable=1.0))],
    )
    async with deadline_scope(0.3):  # the caller has less left than a model call needs
        out = await agent.ainvoke({"messages": [HumanMessage("hi"), pending]})
    assert server.requests == []  # no request at all
    assert_valid_history(out["messages"])
    closed = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in closed] == ["call_a", "call_b"]
    assert all(m.status == "error" and "skipped" in m.text for m in closed)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


def test_giving_up_ends_the_run_with_an_outcome_and_themodel_record() -> None:
    record = model_record(StepStatus.TIMED_OUT)
    update = give_up({"messages": [HumanMessage("q")]}, record)
    outcome = update["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "model"
    assert outcome.reason == record.ran_out_reason()
    assert update["deadline_trace"] == [record]
    (final,) = update["messages"]
    assert final.response_metadata["langgraph_deadline"] == outcome.to_dict()


def _streamed_before_the_cut(server: FakeOpenAIServer) -> str:
    """The text the server had sent of its counting answer when the client closed it."""
    request = server.requests[-1]
    sent = request.chunks_sent
    assert 5 <= sent < 500, sent  # cut mid-stream, after some tokens
    return " ".join(str(i) for i in range(1, sent + 1))


@pytest.mark.anyio
async def test_a_model_cut_mid_answer_keeps_what_it_had_said_marked_as_cut_short(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(500, chunk_interval=0.02))  # 10 s of tokens
    agent = create_agent(chat(server), [], middleware=[DeadlineMiddleware(timeout=1.0)])

    out = await agent.ainvoke(ask())

    # Closed, not served to its end (10 s): the server's thread may be slow to notice on a
    # loaded 2-core machine, so it gets 2 s (seen at 0.5 s: twice, with the CPUs busy).
    assert server.wait_disconnected(4 * MARGIN)
    final = out["messages"][-1]
    assert [m.type for m in out["messages"]] == ["human", "ai"]  # one reply: partial + note
    partial, note = final.text.split(f" {CUT_SHORT}\n\n")
    streamed = _streamed_before_the_cut(server)
    # What the user gets is what the client had read: every chunk but, at most, the last one
    # on the wire when the stream was closed.
    assert streamed.startswith(partial) and len(partial.split()) >= len(streamed.split()) - 1
    assert note.startswith("I ran out of time")
    meta = final.response_metadata["langgraph_deadline"]
    assert meta["terminal"] == "deadline_exceeded"
    assert meta["cut_short"] == {"partial_chars": len(partial)}


@pytest.mark.anyio
async def test_partial_answer_false_leaves_a_cut_models_text_out(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(500, chunk_interval=0.02))
    middleware = DeadlineMiddleware(timeout=1.0, partial_answer=False)
    agent = create_agent(chat(server), [], middleware=[middleware])

    out = await agent.ainvoke(ask())

    assert server.requests[-1].chunks_sent >= 5  # it had said something
    final = out["messages"][-1]
    assert final.text.startswith("I ran out of time") and CUT_SHORT not in final.text
    assert "cut_short" not in final.response_metadata["langgraph_deadline"]


def test_a_sync_model_cut_mid_answer_keeps_what_it_had_said(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.counting(500, chunk_interval=0.02))
    agent = create_agent(chat(server), [], middleware=[DeadlineMiddleware(timeout=1.0)])

    out = agent.invoke(ask())

    final = out["messages"][-1]
    partial = final.text.split(f" {CUT_SHORT}\n\n")[0]
    assert partial.startswith("1 2 3 4 5")
    assert final.response_metadata["langgraph_deadline"]["cut_short"]["partial_chars"] > 0
