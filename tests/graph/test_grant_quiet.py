"""A grant of more time (`Command(update=deadline_input(s))`) on a graph whose state has no
deadline fields works without LangGraph warning that it wrote to unknown channels: an operator
reads "ignoring it" as a failed grant. A plain `TypedDict` graph and `create_agent`."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_deadline import deadline_input, with_deadlines
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.chat_models import openai_chat


class Plain(TypedDict):
    text: str


def _unknown_channels(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unknown channel" in r.getMessage()]


def _asking() -> StateGraph[Any, Any, Any, Any]:
    def ask(state: Plain) -> dict[str, Any]:
        return {"text": state["text"] + ":" + interrupt("go on?")}

    b = StateGraph(Plain)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b


def test_a_grant_on_a_plain_state_logs_no_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        graph = with_deadlines(_asking(), timeout=5.0, checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"text": "q"}, cfg)
        with caplog.at_level(logging.WARNING):
            out = graph.invoke(Command(resume="yes", update=deadline_input(2.0)), cfg)
            more = list(graph.stream(Command(update=deadline_input(2.0)), cfg))
    assert out == {"text": "q:yes"}
    assert more == []  # the run had ended: nothing left to run
    assert _unknown_channels(caplog) == []


@pytest.mark.anyio
async def test_an_async_grant_on_a_plain_state_logs_no_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    graph = with_deadlines(_asking(), timeout=5.0, checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"text": "q"}, cfg)
    with caplog.at_level(logging.WARNING):
        out = await graph.ainvoke(Command(resume="yes", update=deadline_input(2.0)), cfg)
        async for _ in graph.astream({**deadline_input(2.0), "text": "again"}, cfg):
            pass
    assert out == {"text": "q:yes"}
    assert _unknown_channels(caplog) == []


@tool
def refund(order: str) -> str:
    """Refund an order (a human approves it first)."""
    return f"refunded {order}"


def test_a_grant_on_create_agent_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with FakeOpenAIServer() as server:
        server.enqueue(ChatReply.tool_call("refund", {"order": "42"}), ChatReply.text("Done."))
        hitl = HumanInTheLoopMiddleware(interrupt_on={"refund": True})
        agent = create_agent(openai_chat(server, max_retries=0), [refund], middleware=[hitl])
        graph = with_deadlines(agent, timeout=5.0, checkpointer=InMemorySaver())
        cfg: Any = {"configurable": {"thread_id": "t"}}
        assert "__interrupt__" in graph.invoke({"messages": [("user", "refund 42")]}, cfg)
        approve = {"decisions": [{"type": "approve"}]}
        with caplog.at_level(logging.WARNING):
            out = graph.invoke(Command(resume=approve, update=deadline_input(2.0)), cfg)
    assert [m.text for m in out["messages"][-2:]] == ["refunded 42", "Done."]
    assert _unknown_channels(caplog) == []
