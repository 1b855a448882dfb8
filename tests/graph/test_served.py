"""What LangGraph Server puts in a run's config bounds the run: the request's deadline headers
(with `configurable_headers` in `langgraph.json`), and, with `queue_time`, the time the request
waited in the server's queue. Checked here without a server; tests/wire/test_served.py runs
the same on `langgraph dev`."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineState, Terminal, remaining, with_deadlines


class Plain(TypedDict, total=False):
    left: float


class Fields(DeadlineState, total=False):
    left: float


def _builder(state: Any) -> StateGraph[Any, Any, Any, Any]:
    async def look(s: Any) -> dict[str, Any]:
        return {"left": remaining()}

    b = StateGraph(state)
    b.add_node("look", look)
    b.add_edge(START, "look")
    return b


def _served(**configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": "t", **configurable}}


@pytest.mark.anyio
async def test_the_timeout_header_in_the_config_bounds_a_plain_graph() -> None:
    graph = with_deadlines(_builder(Plain))
    out = await graph.ainvoke({}, _served(**{"x-request-timeout-ms": "1500"}))
    assert 1.3 < out["left"] <= 1.5


@pytest.mark.anyio
async def test_a_header_never_extends_the_graphs_own_timeout() -> None:
    graph = with_deadlines(_builder(Plain), timeout=1.0)
    out = await graph.ainvoke({}, _served(**{"x-request-timeout-ms": "60000"}))
    assert 0.8 < out["left"] <= 1.0


@pytest.mark.anyio
async def test_the_absolute_header_alone_sets_the_deadline() -> None:
    graph = with_deadlines(_builder(Fields), timeout=30.0)
    at_ms = int((time.time() + 2.0) * 1000)
    out = await graph.ainvoke({}, _served(**{"x-request-deadline": str(at_ms)}))
    assert 1.8 < out["left"] <= 2.0
    assert abs(out["deadline"] - at_ms / 1000) < 0.002


@pytest.mark.anyio
async def test_a_header_that_has_run_out_ends_the_run_before_it_starts() -> None:
    graph = with_deadlines(_builder(Fields), timeout=30.0)
    out = await graph.ainvoke({}, _served(**{"x-request-timeout-ms": "0"}))
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert "left" not in out


@pytest.mark.anyio
async def test_a_malformed_header_is_ignored_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    graph = with_deadlines(_builder(Plain), timeout=1.0)
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline"):
        out = await graph.ainvoke({}, _served(**{"x-request-timeout-ms": "soon"}))
    assert 0.8 < out["left"] <= 1.0
    assert "x-request-timeout-ms" in caplog.text and "soon" in caplog.text


@pytest.mark.anyio
async def test_without_queue_time_the_budget_counts_from_when_the_run_starts() -> None:
    graph = with_deadlines(_builder(Plain), timeout=2.0)
    arrived = int((time.time() - 1.0) * 1000)
    out = await graph.ainvoke({}, _served(__request_start_time_ms__=arrived))
    assert 1.8 < out["left"] <= 2.0


@pytest.mark.anyio
async def test_queue_time_takes_the_wait_since_arrival_from_timeout_and_header() -> None:
    graph = with_deadlines(_builder(Plain), timeout=2.0, queue_time=5.0)
    arrived = int((time.time() - 1.0) * 1000)
    out = await graph.ainvoke({}, _served(__request_start_time_ms__=arrived))
    assert 0.8 < out["left"] <= 1.0
    header = {"x-request-timeout-ms": "1500", "__request_start_time_ms__": arrived}
    out = await graph.ainvoke({}, _served(**header))
    assert 0.3 < out["left"] <= 0.5


@pytest.mark.anyio
async def test_queue_time_counts_at_most_its_value(caplog: pytest.LogCaptureFixture) -> None:
    graph = with_deadlines(_builder(Plain), timeout=2.0, queue_time=0.5)
    arrived = int((time.time() - 60.0) * 1000)  # a clock off by a minute, or a long queue
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline"):
        out = await graph.ainvoke({}, _served(__request_start_time_ms__=arrived))
    assert 1.3 < out["left"] <= 1.5
    assert "queue_time" in caplog.text


@pytest.mark.anyio
async def test_a_delay_the_caller_asked_for_is_not_queue_time() -> None:
    graph = with_deadlines(_builder(Plain), timeout=2.0, queue_time=30.0)
    arrived = int((time.time() - 10.0) * 1000)
    conf = {"__request_start_time_ms__": arrived, "__after_seconds__": 10}
    out = await graph.ainvoke({}, _served(**conf))
    assert 1.8 < out["left"] <= 2.0


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "5"])
def test_a_bad_queue_time_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="queue_time"):
        with_deadlines(_builder(Plain), queue_time=bad)


@pytest.mark.anyio
async def test_a_resume_takes_a_shorter_header_and_never_a_longer_one() -> None:
    async def ask(s: Fields) -> dict[str, Any]:
        interrupt("approve?")
        return {"left": remaining()}

    builder = StateGraph(Fields).add_node("ask", ask).add_edge(START, "ask")
    graph = with_deadlines(builder, timeout=10.0, checkpointer=InMemorySaver())
    await graph.ainvoke({}, _served())
    out = await graph.ainvoke(Command(resume="ok"), _served(**{"x-request-timeout-ms": "1000"}))
    assert 0.8 < out["left"] <= 1.0
    await graph.ainvoke({}, _served())
    out = await graph.ainvoke(Command(resume="ok"), _served(**{"x-request-timeout-ms": "60000"}))
    assert 9.0 < out["left"] <= 10.0  # the thread's own deadline
