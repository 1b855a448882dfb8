"""How an agent joins a user turn in progress and hands its deadline on (`_agents/turn.py`)."""

from __future__ import annotations

from langchain_core.messages import ToolMessage
from langgraph.types import Command, Overwrite

from langgraph_deadline import Deadline
from langgraph_deadline._agents.turn import handed_on, in_parent_graph, turn_in_progress


def test_a_handoff_to_the_parent_carries_the_deadline_and_the_records_so_far() -> None:
    at = Deadline.after(5).timestamp
    handoff = Command(graph=Command.PARENT, goto="bob", update={"deadline_trace": ["tool"]})
    out = handed_on(handoff, {"deadline": at, "deadline_trace": ["model"]})
    assert isinstance(out, Command) and out.goto == "bob" and out.graph == Command.PARENT
    assert isinstance(out.update, dict)
    assert out.update["deadline"] == Overwrite(at)  # a previous turn's may be earlier
    assert out.update["deadline_outcome"] is None
    assert out.update["deadline_trace"] == ["model", "tool"]


def test_other_tool_answers_and_runs_without_a_deadline_are_left_alone() -> None:
    message = ToolMessage("ok", tool_call_id="1")
    local = Command(update={"messages": [message]})
    assert handed_on(message, {"deadline": 1.0}) is message
    assert handed_on(local, {"deadline": 1.0}) is local
    handoff = Command(graph=Command.PARENT, goto="bob")
    assert handed_on(handoff, {"deadline": None}) is handoff


def test_outside_a_parent_graph_no_turn_is_in_progress() -> None:
    assert not in_parent_graph()
    state = {
        "deadline": Deadline.after(5).timestamp,
        "messages": [ToolMessage("x", tool_call_id="1")],
    }
    assert turn_in_progress(state, None) is None
