"""The nodes of a run share one timer for the instant they end at; a node with its own cap
keeps its own; the timer goes when the run ends (it does not keep the run alive)."""

from __future__ import annotations

import asyncio
import gc
import operator
import weakref
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langgraph_deadline import DeadlineState, Terminal, with_deadlines
from langgraph_deadline._core.plan import RUN_KEY, RunTracker

pytestmark = pytest.mark.anyio


class State(DeadlineState):
    items: list[str]
    done: Annotated[list[str], operator.add]


def _run(config: RunnableConfig) -> RunTracker:
    run = config["configurable"][RUN_KEY]
    assert isinstance(run, RunTracker)
    return run


async def test_send_branches_share_the_runs_timer_and_are_all_cut_at_its_instant() -> None:
    seen: list[RunTracker] = []

    def fan_out(state: State) -> list[Send]:
        return [Send("work", {"items": [item]}) for item in state["items"]]

    async def work(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(_run(config))
        await asyncio.sleep(10)
        return {"done": state["items"]}

    b = StateGraph(State)
    b.add_node("work", work)
    b.add_conditional_edges(START, fan_out, ["work"])
    b.add_edge("work", END)
    graph = with_deadlines(b, timeout=0.3, checkpointer=InMemorySaver())
    loop = asyncio.get_running_loop()
    before = len(loop._scheduled)  # type: ignore[attr-defined]
    started = loop.time()
    out = await graph.ainvoke({"items": ["a", "b", "c"]}, {"configurable": {"thread_id": "t"}})
    assert loop.time() - started < 2.0
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    run = seen[0]
    assert len(seen) == 3 and all(r is run for r in seen)
    assert run.alarm is None  # closed with the run
    statuses = {r.status.value for r in out["deadline_trace"] if r.name == "work"}
    assert statuses == {"timed_out"}
    live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    assert len(live) <= before  # nothing of this run is left on the loop


async def test_a_node_with_its_own_cap_keeps_its_own_timer() -> None:
    joined: list[bool] = []

    async def capped(state: State, config: RunnableConfig) -> dict[str, Any]:
        alarm = _run(config).alarm
        joined.append(alarm is not None and len(alarm.joined()) > 0)
        await asyncio.sleep(10)
        return {"done": ["capped"]}

    b = StateGraph(State)
    b.add_node("capped", capped)
    b.add_edge(START, "capped")
    b.add_edge("capped", END)
    graph = with_deadlines(b, timeout=5.0, caps={"capped": 0.1})
    out = await graph.ainvoke({"items": [], "done": []})
    assert joined == [False]
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    (record,) = [r for r in out["deadline_trace"] if r.name == "capped"]
    assert record.cancel_source == "step_cap"


async def test_a_streamed_run_drops_its_timer_when_the_stream_ends() -> None:
    runs: list[RunTracker] = []

    async def quick(state: State, config: RunnableConfig) -> dict[str, Any]:
        run = _run(config)
        runs.append(run)
        assert run.alarm is not None and len(run.alarm.joined()) == 1  # this node, on the timer
        return {"done": ["quick"]}

    b = StateGraph(State)
    b.add_node("quick", quick)
    b.add_edge(START, "quick")
    b.add_edge("quick", END)
    graph = with_deadlines(b, timeout=30.0)
    chunks = [c async for c in graph.astream({"items": [], "done": []})]
    assert chunks and runs[0].alarm is None


@pytest.mark.parametrize("caps", [None, {"first": 30.0}], ids=["run-timer", "own-timer"])
async def test_a_timer_does_not_keep_a_finished_nodes_context_alive(
    caps: dict[str, float] | None,
) -> None:
    """The run's timer is armed inside its first node, and a node's own (cancelled) timer stays
    in the loop's heap for a while: neither may hold that node's context, which holds its
    config (callbacks, LangGraph's task) for as long as the run goes on."""
    gone: list[weakref.ref[Any]] = []
    checked: list[bool] = []

    def first(state: State, config: RunnableConfig) -> dict[str, Any]:
        gone.append(weakref.ref(config["callbacks"]))
        return {"done": ["first"]}

    async def second(state: State) -> dict[str, Any]:
        await asyncio.sleep(0)
        gc.collect()
        checked.append(gone[0]() is None)
        return {"done": ["second"]}

    b = StateGraph(State)
    b.add_node("first", first)
    b.add_node("second", second)
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    b.add_edge("second", END)
    graph = with_deadlines(b, timeout=30, caps=caps, checkpointer=InMemorySaver())
    out = await graph.ainvoke({"items": []}, {"configurable": {"thread_id": "t"}})
    assert out["done"] == ["first", "second"]
    assert checked == [True]


@pytest.mark.parametrize("branches", [1, 2])  # a lone node runs in LangGraph's own task
async def test_the_backstop_waits_for_the_clean_up_of_the_steps_it_cut(branches: int) -> None:
    # A step cut at the run's deadline (less the 10 ms hand-off) cleans up unshielded, for
    # longer than the hand-off, as psycopg does when it cancels a query in the server. The
    # run's backstop would be that clean-up's second cancellation (through LangGraph, which
    # cancels its tasks): it waits for it, up to the cut's grace.
    cleaned: list[str] = []

    def fan_out(state: State) -> list[Send]:
        return [Send("work", {"items": [str(i)]}) for i in range(branches)]

    async def work(state: State) -> dict[str, Any]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            for _ in range(3):
                await asyncio.sleep(0.02)
            cleaned.append(state["items"][0])
            raise
        return {}

    b = StateGraph(State)
    b.add_node("work", work)
    b.add_conditional_edges(START, fan_out, ["work"])
    b.add_edge("work", END)
    out = await with_deadlines(b, timeout=0.3).ainvoke({"items": [], "done": []})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert sorted(cleaned) == [str(i) for i in range(branches)]
