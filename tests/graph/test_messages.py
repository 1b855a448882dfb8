"""The messages a run out of time leaves: every open tool call answered, a short reply."""

from __future__ import annotations

from uuid import uuid4

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_deadline import Outcome, StepRecord, Terminal
from langgraph_deadline._graph.answers import close_pending
from langgraph_deadline._graph.messages import (
    ToolResults,
    closing_reply,
    closing_text,
    messages_of,
    unanswered_tool_calls,
)
from langgraph_deadline.types import StepStatus
from tests.records import model_record


def test_only_the_last_turns_unanswered_tool_calls_are_closed() -> None:
    history = [
        HumanMessage("q"),
        AIMessage("", tool_calls=[{"name": "orders", "args": {}, "id": "a"}]),
        ToolMessage("done", tool_call_id="a", name="orders"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "orders", "args": {}, "id": "b"},
                {"name": "stock", "args": {}, "id": "c"},
            ],
        ),
        ToolMessage("7 left", tool_call_id="c", name="stock"),
    ]
    calls = unanswered_tool_calls(history)
    assert [c["id"] for c in calls] == ["b"]
    (closed,) = close_pending(calls, model_record())
    assert (closed.tool_call_id, closed.name, closed.status) == ("b", "orders", "error")
    assert "was skipped" in closed.text and "0.3 s left" in closed.text
    assert closed.artifact == {
        "langgraph_deadline": {"status": "skipped", "stale": False, "side_effect_started": False}
    }
    assert unanswered_tool_calls([AIMessage("hi"), HumanMessage("new question")]) == []
    assert unanswered_tool_calls(None) == []


def test_calls_cut_in_flight_say_timeout_and_finished_ones_keep_their_answer() -> None:
    calls = [
        {"name": "orders", "args": {}, "id": "a", "type": "tool_call"},
        {"name": "stock", "args": {}, "id": "b", "type": "tool_call"},
    ]
    record = StepRecord(
        name="tools",
        kind="node",
        attempt=1,
        remaining_ms=900.0,
        requested_ms=None,
        allocated_ms=500.0,
        clamped=True,
        elapsed_ms=500.0,
        status=StepStatus.TIMED_OUT,
    )
    done = ToolMessage("order 42 shipped", tool_call_id="a", name="orders")
    answers = close_pending(calls, record, {"a": done})  # type: ignore[arg-type]
    assert answers[0] is done
    cut = answers[1]
    assert cut.status == "error" and "timeout, not an empty result" in cut.text
    assert cut.artifact["langgraph_deadline"]["status"] == "timed_out"


def test_tool_results_collects_the_answers_of_finished_calls() -> None:
    results = ToolResults()
    results.on_tool_end(ToolMessage("ok", tool_call_id="x", name="t"), run_id=uuid4())
    results.on_tool_end("plain text, no call id", run_id=uuid4())
    assert list(results.by_call) == ["x"]


def test_messages_of_reads_a_messages_state_only() -> None:
    assert messages_of({"messages": [HumanMessage("q")]}) == [HumanMessage("q")]
    assert messages_of({"messages": "not a list"}) is None
    assert messages_of({"log": []}) is None
    assert messages_of(None) is None


def test_the_closing_text_lists_what_was_found_and_what_is_missing() -> None:
    long = "x " * 200
    text = closing_text(
        [
            HumanMessage("q"),
            ToolMessage(long, tool_call_id="a", name="orders"),
            ToolMessage("timeout", tool_call_id="b", name="stock", status="error"),
        ]
    )
    assert text.startswith("I ran out of time for this request")
    assert "What I found so far:\n- orders: x x" in text and "…" in text
    assert "No result in time from: stock." in text
    assert "I had not gathered any results yet." in closing_text([HumanMessage("q")])
    outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step="agent")
    reply = closing_reply([HumanMessage("q")], outcome)
    assert reply.response_metadata["langgraph_deadline"] == outcome.to_dict()
