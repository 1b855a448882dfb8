"""`with_deadlines`: a clash with the user's own `deadline` field is refused, and a compiled
graph keeps everything it was compiled and configured with."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineState, with_deadlines
from tests.chat_models import ScriptedChatModel, tool_calls


class DueString(TypedDict):
    deadline: str


class DueDate(TypedDict):
    deadline: dt.datetime


class PlainFloat(TypedDict):
    deadline: float


@pytest.mark.parametrize("schema", [DueString, DueDate, PlainFloat])
def test_a_users_own_deadline_field_is_refused_naming_the_field_and_the_fix(
    schema: type[Any],
) -> None:
    b = StateGraph(schema)
    b.add_node("node", lambda state: {})
    b.add_edge(START, "node")
    b.add_edge("node", END)
    with pytest.raises(ValueError, match=r"'deadline'.*Rename your field.*DeadlineState"):
        with_deadlines(b, timeout=5)


def test_the_deadline_fields_are_not_a_clash() -> None:
    class State(DeadlineState):
        due_date: str

    b = StateGraph(State)
    b.add_node("node", lambda state: {})
    b.add_edge(START, "node")
    b.add_edge("node", END)
    assert with_deadlines(b, timeout=5).deadline_settings.has_fields


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def _agent() -> Any:
    model = ScriptedChatModel(script=[tool_calls(("lookup", {"query": "q"})), AIMessage("done")])
    return create_agent(model, [lookup], name="helper")


def _updates(graph: Any) -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for chunk in graph.stream({"messages": [HumanMessage("hi")]}, stream_mode="updates"):
        for node, update in chunk.items():
            messages = (update or {}).get("messages", [])
            out.append((node, [(m.type, str(m.content)) for m in messages]))
    return out


def test_a_compiled_agent_keeps_its_config_metadata_transformers_and_stream() -> None:
    original = _agent()
    wrapped = with_deadlines(original, timeout=30)
    assert wrapped.config == original.config
    assert wrapped.config["recursion_limit"] == 9999
    assert wrapped.config["metadata"] == original.config["metadata"]
    assert wrapped.stream_transformers == original.stream_transformers
    assert wrapped.name == original.name == "helper"
    assert _updates(wrapped) == _updates(_agent())
