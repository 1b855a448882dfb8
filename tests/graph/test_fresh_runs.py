"""A run with no thread starts from nothing, yet a previous run's result given as its input
(the usual loop: `state = graph.invoke(state)`) does not carry that run's outcome, trace or
deadline into it."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, with_deadlines

pytestmark = pytest.mark.anyio


class State(DeadlineState):
    slow: bool
    log: Annotated[list[str], operator.add]


async def _work(state: State) -> dict[str, Any]:
    if state["slow"]:
        await asyncio.sleep(5)
    return {"log": ["worked"]}


def _graph() -> Any:
    b = StateGraph(State)
    b.add_node("work", _work)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return with_deadlines(b, timeout=0.2)


async def test_a_previous_results_outcome_and_trace_do_not_carry_over() -> None:
    graph = _graph()
    first = await graph.ainvoke({"slow": True, "log": []})
    assert first["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    second = await graph.ainvoke({**first, "slow": False})
    assert second["deadline_outcome"].terminal is Terminal.COMPLETED
    assert [r.name for r in second["deadline_trace"]] == ["work"]
    assert second["deadline"] > first["deadline"]  # its own deadline, not the spent one
    assert second["log"] == ["worked"]


async def test_a_run_from_nothing_has_its_deadline_in_state() -> None:
    out = await _graph().ainvoke({"slow": False, "log": []})
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert isinstance(out["deadline"], float)
    assert [r.name for r in out["deadline_trace"]] == ["work"]
