"""A run that does not complete says so in the process's log (a WARNING of the
`langgraph_deadline` logger, with its ids, step and reason): a server's own log calls every run
that returned a state a success."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph

from langgraph_deadline import DeadlineExceeded, DeadlineState, Terminal, with_deadlines

LOGGER = "langgraph_deadline"


class State(DeadlineState):
    query: str
    answer: str


def _graph(delay: float) -> Any:
    async def search(state: State) -> dict[str, Any]:
        await asyncio.sleep(delay)
        return {"answer": "found"}

    builder = StateGraph(State)
    builder.add_node("search", search)
    builder.add_edge(START, "search")
    return with_deadlines(builder, timeout=5.0, caps={"search": 0.2}, checkpointer=InMemorySaver())


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


@pytest.mark.anyio
async def test_a_run_cut_by_its_deadline_is_logged_with_its_ids_step_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_id = str(uuid.uuid4())  # what LangGraph Server (and LangSmith) calls the run
    config: Any = {"run_id": run_id, "configurable": {"thread_id": "order-42"}}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = await _graph(delay=5.0).ainvoke({"query": "q"}, config)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    (record,) = _ours(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert message.startswith(f"run {run_id} ended deadline_exceeded at search after ")
    assert "search cancelled at its budget of 200" in message
    assert "thread_id=order-42" in message
    assert record.deadline_terminal == "deadline_exceeded"  # type: ignore[attr-defined]
    assert record.deadline_step == "search"  # type: ignore[attr-defined]
    assert record.deadline_run_id in message  # type: ignore[attr-defined]


def test_a_failed_run_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """The caller already has the error: the line is for structured logs, not stderr."""

    def broken(state: State) -> dict[str, Any]:
        raise RuntimeError("the backend is down")

    builder = StateGraph(State)
    builder.add_node("broken", broken)
    builder.add_edge(START, "broken")
    graph = with_deadlines(builder, timeout=5.0)
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(RuntimeError):
        graph.invoke({"query": "q"})
    assert not _ours(caplog)
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(RuntimeError):
        graph.invoke({"query": "q"})
    (record,) = _ours(caplog)
    assert record.levelno == logging.INFO
    assert " ended failed" in record.getMessage()
    assert "RuntimeError" in record.getMessage()


@pytest.mark.anyio
async def test_an_entrypoint_that_runs_out_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    @task
    async def lookup(q: str) -> str:
        await asyncio.sleep(5.0)
        return q

    @entrypoint()
    async def main(q: str) -> str:
        return await lookup(q)

    graph = with_deadlines(main, timeout=5.0, caps={"lookup": 0.2})
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(DeadlineExceeded):
        await graph.ainvoke("q")
    (record,) = _ours(caplog)
    assert " ended deadline_exceeded at lookup" in record.getMessage()


@pytest.mark.anyio
async def test_a_completed_run_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        out = await _graph(delay=0.0).ainvoke({"query": "q"}, {"configurable": {"thread_id": "t"}})
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert _ours(caplog) == []
