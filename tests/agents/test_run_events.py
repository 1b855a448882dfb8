"""An agent under `DeadlineMiddleware` alone tells its run's end as `with_deadlines` does: one
run event to the observers (Prometheus, OTel, the JSONL trace for the report count runs from
them), and a log line when it did not complete. Real `create_agent`, real `ChatOpenAI` against
the local streaming server, a checkpointer where a user would have one."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_deadline import Terminal, with_deadlines
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.instrument import RunEvent, get_observers, set_observers
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.types import StepStatus
from tests.agents.support import SLOW, ask, orders
from tests.chat_models import openai_chat as chat

pytestmark = pytest.mark.anyio


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


async def test_a_run_that_completes_is_told_once_and_not_logged(
    server: FakeOpenAIServer, runs: list[RunEvent], caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue(ChatReply.text("order 42 shipped"))
    agent = create_agent(
        chat(server), [orders], middleware=[DeadlineMiddleware(timeout=10.0, reserve=0.1)]
    )
    with caplog.at_level(logging.INFO, logger="langgraph_deadline"):
        out = await agent.ainvoke(ask())

    [event] = runs
    assert event.outcome.terminal is Terminal.COMPLETED
    assert event.deadline_at == out["deadline"] and event.reserve_s == 0.1
    assert event.started_at <= event.deadline_at - 9.0
    assert not [r for r in caplog.records if r.name == "langgraph_deadline"]


async def test_a_run_that_runs_out_is_told_once_and_logged_with_its_thread(
    server: FakeOpenAIServer, runs: list[RunEvent], caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))  # 10 s of tokens
    agent = create_agent(
        chat(server),
        [orders],
        middleware=[DeadlineMiddleware(timeout=0.6)],
        checkpointer=InMemorySaver(),
    )
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline"):
        out = await agent.ainvoke(ask(), _thread("t-out"))

    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    [event] = runs
    assert event.outcome == out["deadline_outcome"]
    [line] = [r for r in caplog.records if r.name == "langgraph_deadline"]
    assert line.levelno == logging.WARNING
    assert "deadline_exceeded" in line.getMessage() and "thread_id=t-out" in line.getMessage()
    assert line.deadline_thread_id == "t-out"  # type: ignore[attr-defined]
    assert line.deadline_run_id == event.run_id  # type: ignore[attr-defined]

    # the next turn on the thread is a run of its own, told once too
    server.enqueue(ChatReply.text("order 42 shipped"))
    await agent.ainvoke(ask("and order 43?"), _thread("t-out"))
    assert [e.outcome.terminal for e in runs] == [Terminal.DEADLINE_EXCEEDED, Terminal.COMPLETED]
    assert runs[0].run_id != runs[1].run_id


async def test_under_with_deadlines_the_wrapper_alone_tells_the_run(
    server: FakeOpenAIServer, runs: list[RunEvent]
) -> None:
    server.enqueue(ChatReply.text("order 42 shipped"))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware()])
    await with_deadlines(agent, timeout=10.0).ainvoke(ask())
    assert [e.outcome.terminal for e in runs] == [Terminal.COMPLETED]


async def test_an_agent_inside_a_parent_graph_leaves_the_telling_to_the_parent(
    server: FakeOpenAIServer, runs: list[RunEvent]
) -> None:
    server.enqueue(ChatReply.text("order 42 shipped"))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=10.0)])
    parent: StateGraph[Any, Any, Any, Any] = StateGraph(MessagesState)
    parent.add_node("agent", agent)
    parent.add_edge(START, "agent")

    await parent.compile().ainvoke(ask())
    assert runs == []  # a bare parent tells nothing: its run is the one that ends
    await with_deadlines(parent, timeout=10.0).ainvoke(ask())
    assert [e.outcome.terminal for e in runs] == [Terminal.COMPLETED]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a sync test: one backend is enough
def test_a_sync_run_is_told_too(
    server: FakeOpenAIServer, runs: list[RunEvent], anyio_backend: str
) -> None:
    server.enqueue(ChatReply.text("order 42 shipped"))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=10.0)])
    out = agent.invoke(ask())
    [event] = runs
    assert event.outcome.terminal is Terminal.COMPLETED and event.deadline_at == out["deadline"]


async def test_the_steps_of_a_run_name_it_so_the_report_groups_them(
    server: FakeOpenAIServer, tmp_path: Any
) -> None:
    from langgraph_deadline._report.trace import read_trace
    from langgraph_deadline.instrument import JsonlTraceWriter

    path = tmp_path / "trace.jsonl"
    writer = JsonlTraceWriter(str(path))
    saved = get_observers()
    set_observers([writer])
    try:
        agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=0.6)])
        server.enqueue(ChatReply.tool_call("orders", {"query": "42"}))
        server.enqueue(ChatReply.text("order 42 shipped"))
        await agent.ainvoke(ask())
        server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
        await agent.ainvoke(ask())
    finally:
        set_observers(saved)
        writer.close()

    trace = read_trace([path])
    assert trace.loose == ()  # every step is its run's
    done, cut = trace.runs
    assert [(s.kind, s.name) for s in done.steps] == [
        ("model", "model"),
        ("tool", "orders"),
        ("model", "model"),
    ]
    assert [s.status for s in cut.steps] == [StepStatus.TIMED_OUT]
