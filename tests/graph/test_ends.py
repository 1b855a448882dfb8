"""Runs that end without LangGraph finishing them: too late to start, late resume, early end."""

from __future__ import annotations

import operator
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_deadline import Deadline, DeadlineExceeded, DeadlineState, Terminal, with_deadlines


class Log(DeadlineState):
    log: Annotated[list[str], operator.add]


class Plain(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(state: Any, ran: list[str]) -> StateGraph[Any, Any, Any, Any]:
    async def step(s: Any) -> dict[str, Any]:
        ran.append("step")
        return {"log": ["step"]}

    b = StateGraph(state)
    b.add_node("step", step)
    b.add_edge(START, "step")
    return b


@pytest.mark.anyio
async def test_a_run_whose_deadline_passed_before_it_started_runs_nothing_ends_in_thread() -> None:
    ran: list[str] = []
    saver = InMemorySaver()
    graph = with_deadlines(_graph(Log, ran), checkpointer=saver)
    cfg = {"configurable": {"thread_id": "late"}}
    past = Deadline.after(0.0).timestamp
    out = await graph.ainvoke({"log": ["asked"], "deadline": past}, cfg)
    assert ran == []
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert "before it started" in out["deadline_outcome"].reason
    assert out["log"] == ["asked"] and out["deadline_trace"] == []
    # The thread says how the run ended, its input applied and its first node pending (a grant
    # of time runs it); tests/graph/test_late_start.py checks every entry point.
    snapshot = await graph.aget_state(cfg)
    assert snapshot.values == out and snapshot.next == ("step",)
    assert graph.invoke({"log": [], "deadline": past}, cfg)["deadline_outcome"].step is None
    chunks = [c async for c in graph.astream({"log": [], "deadline": past}, cfg)]
    assert [set(c) for c in chunks] == [{"deadline"}]  # the default mode, updates: the outcome
    assert ran == []
    with pytest.raises(ValueError, match="thread_id"):  # LangGraph's own error, as unwrapped
        graph.invoke({"log": [], "deadline": past})


def test_without_deadline_fields_a_late_run_raises_with_the_outcome() -> None:
    ran: list[str] = []
    graph = with_deadlines(_graph(Plain, ran), timeout=0.0)
    with pytest.raises(DeadlineExceeded) as caught:
        graph.invoke({"log": ["asked"]})
    assert ran == []
    assert caught.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert caught.value.state == {"log": ["asked"]}
