"""Pydantic and dataclass states with the deadline fields work as `TypedDict` states do."""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import (
    Deadline,
    DeadlineDataclass,
    DeadlineModel,
    Terminal,
    budgeted,
    deadline_input,
    with_deadlines,
)
from langgraph_deadline.types import StepStatus


class ModelState(DeadlineModel):
    text: str


@dataclasses.dataclass
class DataclassState(DeadlineDataclass):
    text: str


def _graph(schema: type[Any], node: Any) -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(schema)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b


def _echo(state: Any) -> dict[str, Any]:
    return {"text": state.text + "!"}


def _slow(state: Any) -> dict[str, Any]:
    time.sleep(0.3)
    return {"text": "late"}


FORMS = pytest.mark.parametrize(
    "schema", [ModelState, DataclassState], ids=["pydantic", "dataclass"]
)


@FORMS
def test_with_deadlines_runs_twice_on_one_thread(schema: type[Any]) -> None:
    graph = with_deadlines(_graph(schema, _echo), timeout=60, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
    first = graph.invoke({"text": "a"}, cfg)
    later = Deadline.after(30)
    second = graph.invoke({"text": "b", "deadline": later}, cfg)
    assert first["deadline_outcome"].terminal is Terminal.COMPLETED
    assert second["text"] == "b!" and second["deadline"] == later.timestamp
    assert [r.name for r in second["deadline_trace"]] == ["node"]


@FORMS
def test_a_compiled_graph_reads_the_deadline_from_the_fields(schema: type[Any]) -> None:
    graph = _graph(schema, budgeted(_slow)).compile(InMemorySaver())
    cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
    out = graph.invoke({"text": "a", **deadline_input(0.1)}, cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_trace"][0].status in (StepStatus.TIMED_OUT, StepStatus.ABANDONED)
