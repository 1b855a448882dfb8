"""A run whose deadline passed before it started (a served run that waited in the queue too long)
ends the same way on every entry point: its outcome in what the caller gets, in the stream mode
asked for, and in the checkpoint; no node runs. LangGraph Server drives `astream` and answers
`runs.wait` from its values, so a silent stream there was an empty `success`."""

from __future__ import annotations

import operator
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    deadline_input,
    with_deadlines,
)

ENTRIES = ("invoke", "ainvoke", "stream", "astream")


class Log(DeadlineState):
    log: Annotated[list[str], operator.add]


class Plain(TypedDict):
    log: Annotated[list[str], operator.add]


def _builder(state: Any, ran: list[str]) -> StateGraph[Any, Any, Any, Any]:
    def step(s: Any) -> dict[str, Any]:
        ran.append("step")
        return {"log": ["step"]}

    b = StateGraph(state)
    b.add_node("step", step)
    b.add_edge(START, "step")
    return b


Savers = dict[str, BaseCheckpointSaver[Any]]


@pytest.fixture(params=["memory", "sqlite"])
async def savers(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Savers]:
    """The checkpointer for sync calls and the one for async calls (one for both in memory;
    SQLite's sync and async savers over one file)."""
    if request.param == "memory":
        memory = InMemorySaver()
        yield {"sync": memory, "async": memory}
        return
    path = tmp_path / "checkpoints.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(path)) as aio:
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            yield {"sync": SqliteSaver(conn), "async": aio}
        finally:
            conn.close()


async def _run(graph: Any, entry: str, input: Any, cfg: Any, mode: str | None) -> list[Any]:
    """What the caller gets: the returned state, or the stream's chunks."""
    kwargs = {} if mode is None else {"stream_mode": mode}
    if entry == "invoke":
        return [graph.invoke(input, cfg)]
    if entry == "ainvoke":
        return [await graph.ainvoke(input, cfg)]
    if entry == "stream":
        return list(graph.stream(input, cfg, **kwargs))
    return [c async for c in graph.astream(input, cfg, **kwargs)]


def _late(log: str) -> dict[str, Any]:
    return {"log": [log], "deadline": time.time() - 1}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["values", "updates"])
@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_late_run_reports_its_outcome_on_every_entry_point_and_in_the_checkpoint(
    entry: str, mode: str, savers: Savers
) -> None:
    ran: list[str] = []
    sync = not entry.startswith("a")
    saver = savers["sync" if sync else "async"]
    graph = with_deadlines(_builder(Log, ran), timeout=2.0, checkpointer=saver)
    cfg = {"configurable": {"thread_id": f"{entry}-{mode}"}}
    await _run(graph, "invoke" if sync else "ainvoke", {"log": ["earlier"]}, cfg, None)
    ran.clear()

    got = await _run(graph, entry, _late("asked"), cfg, mode)

    assert ran == []
    if entry.endswith("invoke") or mode == "values":
        state = got[-1]
        assert state["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert "before it started" in state["deadline_outcome"].reason
        assert state["log"] == ["earlier", "step", "asked"]
        assert state["deadline_trace"] == []
    else:  # one update, the outcome's: no node ran to give another
        (update,) = got
        assert list(update) == ["deadline"]
        assert update["deadline"]["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert update["deadline"]["deadline_trace"] == []
    snapshot = graph.get_state(cfg) if sync else await graph.aget_state(cfg)
    assert snapshot.values["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert snapshot.values["log"] == ["earlier", "step", "asked"]
    assert snapshot.next == ("step",)  # pending, not done: a grant of time runs it
    assert not snapshot.interrupts

    again = {"log": ["again"], **deadline_input(2.0)}
    done = graph.invoke(again, cfg) if sync else await graph.ainvoke(again, cfg)
    assert done["deadline_outcome"].terminal is Terminal.COMPLETED
    assert ran == ["step"]


@pytest.mark.anyio
@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_late_run_without_a_checkpointer_streams_its_outcome(entry: str) -> None:
    ran: list[str] = []
    graph = with_deadlines(_builder(Log, ran), timeout=2.0)
    got = await _run(graph, entry, _late("asked"), {}, "values")
    assert ran == []
    assert got[-1]["log"] == ["asked"]
    assert got[-1]["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


@pytest.mark.anyio
@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_late_run_of_a_state_without_deadline_fields_raises_and_writes_nothing(
    entry: str,
) -> None:
    ran: list[str] = []
    saver = InMemorySaver()
    graph = with_deadlines(_builder(Plain, ran), timeout=0.0, checkpointer=saver)
    cfg = {"configurable": {"thread_id": entry}}
    with pytest.raises(DeadlineExceeded) as caught:
        await _run(graph, entry, {"log": ["asked"]}, cfg, "values")
    assert caught.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert ran == []
    assert (await graph.aget_state(cfg)).values == {}
