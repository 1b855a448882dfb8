"""A human approval that comes after the deadline, on a real `create_agent` with
`HumanInTheLoopMiddleware` and a checkpointer, under both entry points: the approved tool does
not run, its call is answered as skipped, and the thread's next turn is a history a real
provider accepts (the local OpenAI-compatible server refuses an open tool call with a 400, as
OpenAI does). Under `with_deadlines` the refused resume also leaves the run paused, so a grant
still acts on the approval."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from langgraph_deadline import DeadlineExceeded, deadline_input, with_deadlines
from langgraph_deadline.agents import DeadlineAgentState, DeadlineMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.testing._openai_server import invalid_messages
from tests.agents.support import assert_valid_history
from tests.chat_models import openai_chat

TIMEOUT = 0.5
APPROVE = {"decisions": [{"type": "approve"}]}
HITL = "HumanInTheLoopMiddleware.after_model"

ran: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order (a human approves it first)."""
    ran.append(order)
    return f"refunded {order}"


def _with_deadlines(model: Any, saver: Any) -> Any:
    hitl = HumanInTheLoopMiddleware(interrupt_on={"refund": True})
    agent = create_agent(model, [refund], middleware=[hitl])
    return with_deadlines(agent, timeout=TIMEOUT, checkpointer=saver)


def _with_deadlines_fields(model: Any, saver: Any) -> Any:
    hitl = HumanInTheLoopMiddleware(interrupt_on={"refund": True})
    agent = create_agent(model, [refund], middleware=[hitl], state_schema=DeadlineAgentState)
    return with_deadlines(agent, timeout=TIMEOUT, checkpointer=saver)


def _middleware(model: Any, saver: Any) -> Any:
    hitl = HumanInTheLoopMiddleware(interrupt_on={"refund": True})
    deadline = DeadlineMiddleware(timeout=TIMEOUT)
    return create_agent(model, [refund], middleware=[deadline, hitl], checkpointer=saver)


def _paused_past_its_deadline(agent: Any, config: Any) -> None:
    paused = agent.invoke({"messages": [("user", "refund order 42")]}, config)
    assert "__interrupt__" in paused
    time.sleep(TIMEOUT + 0.2)  # the human approves after the deadline


def _late_approval(agent: Any, config: Any) -> Any:
    try:
        return agent.invoke(Command(resume=APPROVE), config)
    except DeadlineExceeded as exc:  # with_deadlines on a state without deadline fields
        return exc.state


@pytest.mark.parametrize(
    "make",
    [_with_deadlines, _with_deadlines_fields, _middleware],
    ids=["with_deadlines", "with_deadlines-fields", "middleware"],
)
def test_after_a_late_approval_the_next_turn_is_a_valid_history(
    server: FakeOpenAIServer, saver: Any, make: Callable[[Any, Any], Any]
) -> None:
    ran.clear()
    server.enqueue(ChatReply.tool_call("refund", {"order": "42"}))
    server.default_reply = ChatReply.text("Anything else?")
    agent = make(openai_chat(server, max_retries=0), saver)
    config: Any = {"configurable": {"thread_id": "late"}}
    _paused_past_its_deadline(agent, config)

    late = _late_approval(agent, config)
    assert ran == []  # approved too late: the refund is not made
    skipped = [m for m in late["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in skipped] == [late["messages"][1].tool_calls[0]["id"]]
    assert skipped[0].status == "error" and "skipped" in skipped[0].text

    out = agent.invoke({"messages": [("user", "and my other order?")]}, config)
    assert out["messages"][-1].text == "Anything else?"
    assert_valid_history(out["messages"])
    assert [r.status for r in server.requests] == [200, 200]
    assert invalid_messages(server.requests[-1].body) is None
    roles = [m["role"] for m in server.requests[-1].body["messages"]]
    assert roles[:3] == ["user", "assistant", "tool"] and roles[-1] == "user"


def test_a_refused_resume_stays_paused_for_a_grant(server: FakeOpenAIServer, saver: Any) -> None:
    """The answer that kept the history valid is removed by a grant, and the paused run goes
    on with the approval: the refund is made and the model sees its result."""
    ran.clear()
    server.enqueue(ChatReply.tool_call("refund", {"order": "42"}), ChatReply.text("Refunded."))
    agent = _with_deadlines(openai_chat(server, max_retries=0), saver)
    config: Any = {"configurable": {"thread_id": "grant"}}
    _paused_past_its_deadline(agent, config)
    with pytest.raises(DeadlineExceeded, match="resumed after the run's deadline"):
        agent.invoke(Command(resume=APPROVE), config)
    assert agent.get_state(config).next == (HITL,)  # still paused at the approval

    out = agent.invoke(Command(resume=APPROVE, update=deadline_input(5.0)), config)
    assert ran == ["42"]
    assert [type(m) for m in out["messages"]] == [
        type(out["messages"][0]),
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    assert out["messages"][2].text == "refunded 42"
    assert out["messages"][-1].text == "Refunded."
    assert_valid_history(out["messages"])
    assert all(r.status == 200 for r in server.requests)
