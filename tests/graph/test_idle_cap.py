"""`budgeted(node, idle_cap=...)`: a LangGraph node that stops heart-beating
(`runtime.heartbeat()`, a stream write) is cut as stalled near its idle cap, long before its
deadline; one that keeps beating runs to its end."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from langgraph_deadline import DeadlineState, Terminal, budgeted, with_deadlines
from langgraph_deadline.types import StepStatus

IDLE = 0.3
MARGIN = 0.5


class State(DeadlineState, total=False):
    beats: int


def _graph(beats: int, every: float, then_sleep: float) -> Any:
    @budgeted(idle_cap=IDLE)
    async def work(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
        for _ in range(beats):
            await anyio.sleep(every)
            if hasattr(runtime, "heartbeat"):
                runtime.heartbeat()
            else:  # an older LangGraph: a stream write is progress too
                runtime.stream_writer({"beat": True})
        await anyio.sleep(then_sleep)
        return {"beats": beats}

    b = StateGraph(State)
    b.add_node("work", work)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return with_deadlines(b, timeout=5.0)


@pytest.mark.anyio
async def test_a_node_that_stops_heart_beating_is_cut_as_stalled() -> None:
    graph = _graph(beats=4, every=IDLE / 3, then_sleep=30.0)
    start = time.monotonic()
    out = await graph.ainvoke({})
    took = time.monotonic() - start

    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "work"
    assert "work stalled: no progress for 0.3 s" in outcome.reason
    (record,) = [r for r in out["deadline_trace"] if r.name == "work"]
    assert (record.status, record.cancel_source) == (StepStatus.TIMED_OUT, "stalled")
    # 4 beats (0.4 s), then cut at the idle cap: not at the 5 s deadline
    assert took < 4 * IDLE / 3 + IDLE + MARGIN + 0.5


@pytest.mark.anyio
async def test_a_node_that_keeps_beating_runs_past_its_idle_cap() -> None:
    graph = _graph(beats=8, every=IDLE / 2, then_sleep=0.0)  # 1.2 s, 4x its idle cap
    out = await graph.ainvoke({})
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["beats"] == 8
    (record,) = [r for r in out["deadline_trace"] if r.name == "work"]
    assert record.gap_ms is not None and record.gap_ms < IDLE * 1000


def test_a_bad_idle_cap_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="idle_cap"):
        budgeted(lambda state: state, idle_cap=-1.0)
