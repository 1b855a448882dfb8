"""A node that swallows a cancellation (as Python 3.11's `asyncio.wait_for` can) is still cut
at its budget: the cut delivers the cancellation again, as an anyio scope would."""

from __future__ import annotations

import asyncio
import operator
import time
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, with_deadlines

pytestmark = pytest.mark.anyio


class _State(DeadlineState):
    log: Annotated[list[str], operator.add]


def _one_node(node: Any, *, timeout: float) -> Any:
    """A `with_deadlines` graph of `node` alone (named after its function), with a checkpointer
    as a user would have one."""
    b = StateGraph(_State)
    b.add_node(node.__name__, node)
    b.add_edge(START, node.__name__)
    b.add_edge(node.__name__, END)
    return with_deadlines(b, timeout=timeout, checkpointer=InMemorySaver())


async def test_a_node_that_swallows_one_cancellation_is_still_cut_at_its_budget() -> None:
    # A real graph, a checkpointer: the node ignores the first cancellation and waits again.
    finished = []

    async def stubborn(state: _State) -> dict[str, Any]:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            finished.append(False)  # swallowed: goes on, as a buggy library would
        await asyncio.sleep(5)
        finished.append(True)
        return {"log": ["stubborn"]}

    graph = _one_node(stubborn, timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await graph.ainvoke({"log": []}, {"configurable": {"thread_id": "t"}})
    assert loop.time() - started < 2.0  # not 5 s, not 10 s
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "stubborn"
    assert finished == [False]  # the first cancellation was swallowed, the second one ended it


async def _sleep_timed_out(kind: str, seconds: float) -> None:
    """A long wait under the node's own timeout: anyio's `fail_after` or `asyncio.timeout`."""
    if kind == "anyio":
        import anyio

        with anyio.fail_after(seconds):
            await asyncio.sleep(5)
    else:
        async with asyncio.timeout(seconds):
            await asyncio.sleep(5)


@pytest.mark.parametrize("kind", ["anyio", "asyncio"])
async def test_a_nodes_own_timeout_that_lands_with_the_cut_is_the_cut(kind: str) -> None:
    """A node times its call out itself, at what is left (as httpcore does a read cut to the
    time left by the hooks). A pause of the process over both instants (a collector pass, a
    loaded machine: seen in CI as a service answering 500 instead of 504) makes them land in
    one turn of the loop, its own first: the node was past its budget all the same, and the
    run ends `deadline_exceeded` at it, not with the node's `TimeoutError`."""
    from langgraph_deadline import current_deadline

    async def search(state: _State) -> dict[str, Any]:
        d = current_deadline()
        assert d is not None
        left = d.remaining()
        asyncio.get_running_loop().call_later(left - 0.05, time.sleep, 0.3)  # the pause
        await _sleep_timed_out(kind, left - 0.01)  # due just before the cut
        return {"log": ["search"]}

    graph = _one_node(search, timeout=0.6)
    out = await graph.ainvoke({"log": []}, {"configurable": {"thread_id": "t"}})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "search"
    (record,) = out["deadline_trace"]
    assert record.status == "timed_out"
