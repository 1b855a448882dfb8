"""with_deadlines on the shapes real graphs have: injection, sub-graphs, parallel branches, sync."""

from __future__ import annotations

import asyncio
import contextlib
import operator
import time
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import StreamWriter

from langgraph_deadline import (
    DeadlineState,
    Terminal,
    budgeted,
    current_deadline,
    remaining,
    with_deadlines,
)
from langgraph_deadline.types import StepStatus


class State(DeadlineState):
    log: Annotated[list[str], operator.add]


def test_injection_of_config_runtime_store_and_writer_is_kept() -> None:
    seen: dict[str, Any] = {}

    @budgeted(cap=5.0)
    def node(
        state: State,
        config: RunnableConfig,
        runtime: Runtime[Any],
        store: BaseStore,
        writer: StreamWriter,
    ) -> dict[str, Any]:
        seen["thread"] = config["configurable"].get("thread_id")
        seen["runtime"] = runtime
        seen["store"] = store
        writer({"progress": "half"})
        seen["deadline"] = current_deadline()
        return {"log": ["node"]}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    store = InMemoryStore()
    graph = with_deadlines(b, timeout=10, store=store)
    chunks = list(
        graph.stream({"log": []}, {"configurable": {"thread_id": "x"}}, stream_mode="custom")
    )
    assert chunks == [{"progress": "half"}]
    assert seen["thread"] == "x"
    assert isinstance(seen["runtime"], Runtime)
    assert seen["store"] is store
    assert seen["deadline"] is not None and seen["deadline"].remaining() <= 5.0


@pytest.mark.anyio
async def test_decorated_async_node_with_writer_from_context() -> None:
    @budgeted(cap=0.2, name="probe")
    async def probe(state: State) -> dict[str, Any]:
        get_stream_writer()({"left": remaining()})
        await asyncio.sleep(1)
        return {"log": ["never"]}

    b = StateGraph(State)
    b.add_node("probe", probe)
    b.add_edge(START, "probe")
    graph = with_deadlines(b, timeout=5)
    out: dict[str, Any] = {}
    custom = []
    async for mode, chunk in graph.astream({"log": []}, stream_mode=["custom", "values"]):
        if mode == "custom":
            custom.append(chunk)
        else:
            out = chunk
    assert custom and 0 < custom[0]["left"] <= 0.2
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "probe"
    rec = out["deadline_trace"][-1]
    assert rec.status is StepStatus.TIMED_OUT and rec.requested_ms == 200 and not rec.clamped


@pytest.mark.anyio
async def test_parallel_branches_share_the_deadline_and_siblings_finish() -> None:
    async def quick(state: State) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"log": ["quick"]}

    async def hang(state: State) -> dict[str, Any]:
        await asyncio.sleep(30)
        return {"log": ["hang"]}

    async def join(state: State) -> dict[str, Any]:
        return {"log": ["join"]}

    b = StateGraph(State)
    b.add_node("quick", quick)
    b.add_node("hang", hang)
    b.add_node("join", join)
    b.add_edge(START, "quick")
    b.add_edge(START, "hang")
    b.add_edge(["quick", "hang"], "join")
    t0 = time.monotonic()
    # A reserve lets the cut node return before the run's own deadline: the superstep commits,
    # so the sibling's write is kept.
    out = await with_deadlines(b, timeout=0.5, reserve=0.1).ainvoke({"log": []})
    assert time.monotonic() - t0 < 1.0
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "hang"
    assert out["log"] == ["quick"]
    statuses = {r.name: r.status for r in out["deadline_trace"]}
    assert statuses["quick"] is StepStatus.COMPLETED
    assert statuses["hang"] is StepStatus.TIMED_OUT

    # With no reserve the whole-run cancellation may win the race: writes of the last superstep
    # can be lost, but every step record still reaches the trace.
    out = await with_deadlines(b, timeout=0.5).ainvoke({"log": []})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert {r.name for r in out["deadline_trace"]} == {"quick", "hang"}


@pytest.mark.anyio
async def test_a_subgraph_sees_the_parents_deadline_and_cannot_extend_it() -> None:
    seen: list[float] = []

    async def inner_node(state: State) -> dict[str, Any]:
        seen.append(remaining())
        await asyncio.sleep(5)
        return {"log": ["inner"]}

    sub = StateGraph(State)
    sub.add_node("inner_node", inner_node)
    sub.add_edge(START, "inner_node")
    subgraph = with_deadlines(sub, timeout=60)  # its own, longer timeout: must not win

    b = StateGraph(State)
    b.add_node("sub", subgraph)
    b.add_edge(START, "sub")
    b.add_edge("sub", END)
    t0 = time.monotonic()
    out = await with_deadlines(b, timeout=0.5).ainvoke({"log": []})
    assert time.monotonic() - t0 < 1.0
    assert seen and seen[0] <= 0.5
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


def test_sync_stream_yields_until_the_cut_and_ends_cleanly() -> None:
    def first(state: State) -> dict[str, Any]:
        return {"log": ["first"]}

    def slow(state: State) -> dict[str, Any]:
        time.sleep(1.0)
        return {"log": ["slow"]}

    b = StateGraph(State)
    b.add_node("first", first)
    b.add_node("slow", slow)
    b.add_edge(START, "first")
    b.add_edge("first", "slow")
    graph = with_deadlines(b, timeout=0.3)
    t0 = time.monotonic()
    updates = list(graph.stream({"log": []}, stream_mode="updates"))
    assert time.monotonic() - t0 < 0.8
    assert updates[0]["first"]["log"] == ["first"]
    last = updates[-1]["slow"]
    assert last["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


def test_the_original_builder_and_graph_stay_untouched() -> None:
    def node(state: State) -> dict[str, Any]:
        time.sleep(0.3)
        return {"log": ["node"]}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    compiled = b.compile()
    wrapped = with_deadlines(compiled, timeout=0.1)
    assert wrapped.invoke({"log": []})["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    out = compiled.invoke({"log": []})
    assert out["log"] == ["node"]
    assert out.get("deadline_outcome") is None


class _Runs:
    def __init__(self) -> None:
        self.outcomes: list[Any] = []

    def on_step(self, event: Any) -> None:
        pass

    def on_run(self, event: Any) -> None:
        self.outcomes.append(event.outcome)


@pytest.fixture
def runs() -> Any:
    from langgraph_deadline.instrument import get_observers, set_observers

    saved = get_observers()
    seen = _Runs()
    set_observers([seen])
    yield seen
    set_observers(saved)


@pytest.mark.anyio
async def test_observers_hear_how_a_streamed_run_ended(runs: _Runs) -> None:
    async def hang(state: State) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    async def broken(state: State) -> dict[str, Any]:
        raise ValueError("boom")

    for node, expected in ((hang, Terminal.DEADLINE_EXCEEDED), (broken, Terminal.FAILED)):
        b = StateGraph(State)
        b.add_node("n", node)
        b.add_edge(START, "n")
        with contextlib.suppress(ValueError):
            async for _ in with_deadlines(b, timeout=0.2).astream({"log": []}):  # "updates"
                pass
        assert runs.outcomes[-1].terminal is expected


def test_caps_for_a_budgeted_runnable_node_are_refused() -> None:
    from langgraph.prebuilt import ToolNode

    b = StateGraph(State)
    b.add_node("tools", budgeted(ToolNode([]), cap=1.0))
    b.add_edge(START, "tools")
    with pytest.raises(ValueError, match="already wrapped with budgeted"):
        with_deadlines(b, caps={"tools": 2.0})
