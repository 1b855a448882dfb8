"""Resumes of graphs whose state has no deadline fields: the run's deadline is kept in the
checkpoint's metadata, so a resumed run always has one."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineExceeded, Terminal, with_deadlines


class Plain(TypedDict):
    text: str


def _ask_then_hang(calls: list[str]) -> StateGraph[Any, Any, Any, Any]:
    async def ask(state: Plain) -> dict[str, Any]:
        answer = interrupt("go on?")
        calls.append(answer)
        await anyio.sleep(10)  # hangs after the resume
        return {"text": answer}

    b = StateGraph(Plain)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b


@pytest.mark.anyio
async def test_a_resumed_plain_state_run_keeps_its_original_deadline() -> None:
    calls: list[str] = []
    graph = with_deadlines(_ask_then_hang(calls), timeout=0.5, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    t0 = time.monotonic()
    await graph.ainvoke({"text": "q"}, cfg)
    snapshot = await graph.aget_state(cfg)
    assert snapshot.metadata == {"source": "loop", "step": 0, "parents": {}}  # nothing of ours
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke(Command(resume="yes"), cfg)
    assert calls == ["yes"]
    assert time.monotonic() - t0 < 1.5  # the first run's 0.5 s, not a fresh budget per resume
    assert caught.value.outcome is not None
    assert caught.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED


@pytest.mark.anyio
async def test_a_resume_after_the_original_deadline_does_not_start() -> None:
    calls: list[str] = []
    graph = with_deadlines(_ask_then_hang(calls), timeout=0.2, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"text": "q"}, cfg)
    await anyio.sleep(0.3)
    with pytest.raises(DeadlineExceeded, match="resumed after"):
        await graph.ainvoke(Command(resume="yes"), cfg)
    assert calls == []


@pytest.mark.anyio
async def test_a_thread_that_kept_no_deadline_resumes_with_a_fresh_timeout() -> None:
    calls: list[str] = []
    saver = InMemorySaver()
    builder = _ask_then_hang(calls)
    cfg = {"configurable": {"thread_id": "t"}}
    await builder.compile(saver).ainvoke({"text": "q"}, cfg)  # no deadline recorded
    graph = with_deadlines(builder, timeout=0.3, checkpointer=saver)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await graph.ainvoke(Command(resume="yes"), cfg)
    assert 0.2 < time.monotonic() - t0 < 1.5
