"""What a run leaves behind is freed by reference counting: nothing of ours waits for the cyclic
garbage collector after a run cut at its deadline, a run that completes, or a tool call cut in
a `ToolNode` while its HTTP request is in flight. With a thousand runs cut in the same
milliseconds, every cycle a run leaves makes the collector run more often, and each full
collection walks every live run (issue #35).

`gc.DEBUG_SAVEALL` keeps what a collection would have freed in `gc.garbage`: the objects of
ours there (a type from this package; an exception, traceback or frame of our code, or the
cancellation our cut sent) are what a run left in a cycle. Not timed.
"""

from __future__ import annotations

import asyncio
import gc
import types
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

import langgraph_deadline
from langgraph_deadline import DeadlineState, Terminal, deadline_tool, with_deadlines
from langgraph_deadline.testing import SlowServer

pytestmark = pytest.mark.anyio

DEADLINE = 0.15
RUNS = 3
PACKAGE = langgraph_deadline.__name__
OUR_FILES = langgraph_deadline.__path__[0]


class State(DeadlineState, total=False):
    n: int


class ToolState(MessagesState, DeadlineState):
    pass


async def _hang(state: State) -> dict[str, int]:
    await asyncio.sleep(3600)
    return {"n": 1}


async def _step(state: State) -> dict[str, int]:
    return {"n": state.get("n", 0) + 1}


def _chain(node: Any) -> Any:
    """START -> a -> b -> c -> END, each node running `node`."""
    builder = StateGraph(State)
    names = ("a", "b", "c")
    for name in names:
        builder.add_node(name, node)
    for before, after in zip((START, *names), (*names, END), strict=True):
        builder.add_edge(before, after)
    return builder


def _ours(obj: object) -> bool:
    """An object of this package, or an exception, traceback or frame our code made or ran."""
    if isinstance(obj, types.TracebackType):
        obj = obj.tb_frame
    if isinstance(obj, types.FrameType):
        return obj.f_code.co_filename.startswith(OUR_FILES)
    if isinstance(obj, asyncio.CancelledError):
        return "langgraph-deadline" in str(obj)  # the cut's own message
    return (type(obj).__module__ or "").startswith(PACKAGE)


@pytest.fixture
def garbage() -> Iterator[Callable[[], list[str]]]:
    """Collects first, then keeps what later collections find; call it to collect and see
    what of ours the test's own work left: objects alive before it began (another test's,
    let go of meanwhile) are not counted."""
    gc.collect()
    before = {id(obj) for obj in gc.get_objects()}
    gc.set_debug(gc.DEBUG_SAVEALL)

    def ours() -> list[str]:
        gc.collect()
        found = {_name(obj) for obj in gc.garbage if id(obj) not in before and _ours(obj)}
        gc.garbage.clear()
        return sorted(found)

    try:
        yield ours
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _name(obj: object) -> str:
    if isinstance(obj, types.TracebackType):
        obj = obj.tb_frame
    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_qualname}"
    return type(obj).__qualname__


async def test_a_run_cut_at_its_deadline_leaves_no_cycle(
    garbage: Callable[[], list[str]],
) -> None:
    graph = with_deadlines(_chain(_hang), timeout=DEADLINE)
    for _ in range(RUNS):
        result = await graph.ainvoke({"n": 0})
        assert result["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert [r.status for r in result["deadline_trace"]] == ["timed_out"]
    del result
    assert garbage() == []


async def test_a_completed_run_leaves_no_cycle(garbage: Callable[[], list[str]]) -> None:
    graph = with_deadlines(_chain(_step), timeout=60.0)
    for _ in range(RUNS):
        result = await graph.ainvoke({"n": 0})
        assert result["n"] == 3
        assert result["deadline_outcome"].terminal is Terminal.COMPLETED
    del result
    assert garbage() == []


async def test_a_tool_call_cut_in_a_tool_node_leaves_no_cycle(
    slow_server: SlowServer, garbage: Callable[[], list[str]]
) -> None:
    async with httpx.AsyncClient() as client:

        @deadline_tool
        async def fetch(query: str) -> str:
            """Fetch something slowly."""
            response = await client.get(slow_server.url("/slow?delay=5"))
            return response.text

        builder = StateGraph(ToolState)
        builder.add_node("tools", ToolNode([fetch]))
        builder.add_edge(START, "tools")
        builder.add_edge("tools", END)
        graph = with_deadlines(builder, timeout=DEADLINE)
        call = {"name": "fetch", "args": {"query": "q"}, "id": "call-1"}
        for _ in range(RUNS):
            result = await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call])]})
            answer = result["messages"][-1]
            assert isinstance(answer, ToolMessage)
            assert "timed_out" in [r.status for r in result["deadline_trace"]]  # the call's
        del result, answer
    assert garbage() == []
