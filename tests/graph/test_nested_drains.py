"""A `with_deadlines` graph run inside another LangGraph run (a node calling it, as a tool or a
sub-agent would) drains only itself when its deadline ends it. LangGraph hands a run started
there the outer run's `RunControl`: the drain that ends the inner run used to stop the outer run
too (its caller got `GraphDrained`, and a second call of the inner graph in the same node ended
at once, "the deadline passed"). A drain of the outer run (a server's shutdown) still reaches
the inner one."""

from __future__ import annotations

import asyncio
import operator
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.errors import GraphDrained
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import RunControl
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineState, Terminal, with_deadlines
from langgraph_deadline.testing import SlowServer


class Inner(DeadlineState):
    slow: bool
    log: Annotated[list[str], operator.add]


class Outer(TypedDict, total=False):
    seen: list[tuple[str, list[str], list[str]]]
    after: bool


def _seen(out: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """What the outer node keeps of an inner run: how it ended, its steps, its own output."""
    return (
        out["deadline_outcome"].terminal.value,
        [r.name for r in out["deadline_trace"]],
        out["log"],
    )


def _inner(work: Any) -> Any:
    b = StateGraph(Inner)
    b.add_node("work", work)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return with_deadlines(b, timeout=0.3)


def _outer(call: Any, checkpointer: Any) -> Any:
    b = StateGraph(Outer)
    b.add_node("call", call)
    b.add_node("after", lambda state: {"after": True})
    b.add_edge(START, "call")
    b.add_edge("call", "after")
    b.add_edge("after", END)
    return b.compile(checkpointer=checkpointer)


EXPECTED = [
    (Terminal.DEADLINE_EXCEEDED.value, ["work"], []),  # the first call ran out of its 0.3 s
    (Terminal.COMPLETED.value, ["work"], ["worked"]),  # the second one is a run of its own
]


@pytest.mark.anyio
async def test_an_inner_run_that_ran_out_leaves_its_callers_run_going(tmp_path: Path) -> None:
    async def work(state: Inner) -> dict[str, Any]:
        if state["slow"]:
            await asyncio.sleep(5)
        return {"log": ["worked"]}

    inner = _inner(work)

    async def call(state: Outer) -> dict[str, Any]:
        first = await inner.ainvoke({"slow": True, "log": []})
        second = await inner.ainvoke({"slow": False, "log": []})
        return {"seen": [_seen(first), _seen(second)]}

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "t.db")) as saver:
        outer = _outer(call, saver)
        out = await outer.ainvoke({}, {"configurable": {"thread_id": "t"}})
    assert out["seen"] == EXPECTED
    assert out["after"] is True  # the outer run went on to its next node


def test_the_same_with_sync_calls(tmp_path: Path) -> None:
    def work(state: Inner) -> dict[str, Any]:
        if state["slow"]:
            time.sleep(1.0)  # a sync body: abandoned on its thread at the deadline
        return {"log": ["worked"]}

    inner = _inner(work)

    def call(state: Outer) -> dict[str, Any]:
        first = inner.invoke({"slow": True, "log": []})
        second = inner.invoke({"slow": False, "log": []})
        return {"seen": [_seen(first), _seen(second)]}

    with SqliteSaver.from_conn_string(str(tmp_path / "t.db")) as saver:
        out = _outer(call, saver).invoke({}, {"configurable": {"thread_id": "t"}})
    assert out["seen"] == EXPECTED
    assert out["after"] is True


@pytest.mark.anyio
async def test_the_inner_runs_request_is_closed_at_its_deadline_and_the_outer_run_goes_on(
    slow_server: SlowServer,
) -> None:
    async def work(state: Inner) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/slow?delay=5"))
        return {"log": ["worked"]}

    inner = _inner(work)

    async def call(state: Outer) -> dict[str, Any]:
        out = await inner.ainvoke({"slow": True, "log": []})
        return {"seen": [_seen(out)]}

    t0 = time.monotonic()
    out = await _outer(call, None).ainvoke({})
    assert time.monotonic() - t0 < 0.3 + 1.0  # the inner deadline, not the server's 5 s
    assert out["seen"] == EXPECTED[:1]
    assert out["after"] is True
    # the server saw the inner run's request closed, not served to its end
    assert await asyncio.to_thread(slow_server.wait_disconnected, 2.0)
    assert all(r.disconnected is not None for r in slow_server.requests)


@pytest.mark.anyio
@pytest.mark.parametrize("entry", ["invoke", "ainvoke", "stream", "astream"])
async def test_every_entry_point_drains_only_its_own_run(entry: str) -> None:
    def work(state: Inner) -> dict[str, Any]:
        if state["slow"]:
            time.sleep(1.0)  # abandoned on its thread at the deadline
        return {"log": ["worked"]}

    inner = _inner(work)

    def last_values(chunks: list[Any]) -> dict[str, Any]:
        return dict(chunks[-1])

    def call_sync(state: Outer) -> dict[str, Any]:
        run = inner.invoke if entry == "invoke" else None
        seen = []
        for slow in (True, False):
            args = {"slow": slow, "log": []}
            out = run(args) if run else last_values(list(inner.stream(args, stream_mode="values")))
            seen.append(_seen(out))
        return {"seen": seen}

    async def call_async(state: Outer) -> dict[str, Any]:
        seen = []
        for slow in (True, False):
            args = {"slow": slow, "log": []}
            if entry == "ainvoke":
                out = await inner.ainvoke(args)
            else:
                out = last_values([c async for c in inner.astream(args, stream_mode="values")])
            seen.append(_seen(out))
        return {"seen": seen}

    outer = _outer(call_sync if entry in ("invoke", "stream") else call_async, None)
    out = await outer.ainvoke({})
    assert out["seen"] == EXPECTED
    assert out["after"] is True


@pytest.mark.anyio
async def test_a_drain_of_the_outer_run_still_reaches_the_inner_run() -> None:
    control = RunControl()
    ran: list[str] = []

    def step(name: str) -> Any:
        def node(state: Inner) -> dict[str, Any]:
            ran.append(name)
            if name == "first":
                control.request_drain("shutdown")  # the server stops the outer run
            return {"log": [name]}

        return node

    b = StateGraph(Inner)
    b.add_node("first", step("first"))
    b.add_node("second", step("second"))
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    b.add_edge("second", END)
    inner = with_deadlines(b, timeout=30)

    async def call(state: Outer) -> dict[str, Any]:
        await inner.ainvoke({"slow": False, "log": []})
        return {"after": False}

    with pytest.raises(GraphDrained) as raised:
        await _outer(call, None).ainvoke({}, control=control)
    assert raised.value.reason == "shutdown"
    assert ran == ["first"]  # the inner run stopped after the superstep it was in
