"""`deadline_scope` around a plain LangGraph run (no `with_deadlines`) reaches the work
LangGraph runs in tasks of its own: nodes, `Send` workers, subgraphs and the Functional API's
`@task`s are cancelled at the deadline, their HTTP requests closed at the server, as
`asyncio.timeout` around the same call does.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import httpx
import pytest
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineExceeded, deadline_scope
from langgraph_deadline.testing import SlowServer

pytestmark = pytest.mark.anyio

SCOPE = 1.0  # time for each task to reach the server (each makes a client) on a loaded machine
MARGIN = 0.5  # a loaded 2-core machine


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    n: int


def _fetcher(server: SlowServer) -> Callable[[Any], Awaitable[dict[str, Any]]]:
    async def fetch(state: Any) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            await client.get(server.url("/slow?delay=5"))
        return {"log": ["fetched"]}

    return fetch


def _node_graph(server: SlowServer) -> Any:
    b = StateGraph(State)
    b.add_node("fetch", _fetcher(server))
    b.add_edge(START, "fetch")
    b.add_edge("fetch", END)
    return b.compile()


def _send_graph(server: SlowServer) -> Any:
    b = StateGraph(State)
    b.add_node("plan", lambda state: {"log": ["planned"]})
    b.add_node("worker", _fetcher(server))
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", lambda state: [Send("worker", {"n": i}) for i in range(3)])
    b.add_edge("worker", END)
    return b.compile()


def _subgraph_graph(server: SlowServer) -> Any:
    b = StateGraph(State)
    b.add_node("inner", _node_graph(server))
    b.add_edge(START, "inner")
    b.add_edge("inner", END)
    return b.compile()


def _functional(server: SlowServer) -> Any:
    fetch = _fetcher(server)

    @task
    async def lookup(n: int) -> dict[str, Any]:
        return await fetch({"n": n})

    @entrypoint()
    async def workflow(n: int) -> list[dict[str, Any]]:
        return list(await asyncio.gather(lookup(1), lookup(2)))

    return workflow


@pytest.mark.parametrize(
    ("shape", "requests"),
    [("node", 1), ("send", 3), ("subgraph", 1), ("functional", 2)],
)
async def test_a_deadline_scope_cancels_the_tasks_langgraph_started_in_it(
    slow_server: SlowServer, shape: str, requests: int
) -> None:
    build = {
        "node": _node_graph,
        "send": _send_graph,
        "subgraph": _subgraph_graph,
        "functional": _functional,
    }[shape]
    graph = build(slow_server)
    inputs: Any = 1 if shape == "functional" else {"log": []}
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        async with deadline_scope(SCOPE):
            await graph.ainvoke(inputs)
    assert time.monotonic() - t0 < SCOPE + MARGIN
    assert len(slow_server.requests) == requests
    # Every request LangGraph's tasks made is closed at the server, not served to its end.
    closed = await asyncio.to_thread(slow_server.wait_disconnected, 2.0, count=requests)
    assert closed, slow_server.requests


async def test_a_task_that_will_not_stop_does_not_hold_the_scope_past_its_deadline() -> None:
    @task
    async def stubborn(n: int) -> int:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            with contextlib.suppress(asyncio.CancelledError):  # swallowed, every time
                await asyncio.sleep(0.05)
        return n

    @entrypoint()
    async def workflow(n: int) -> int:
        return await stubborn(n)

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        async with deadline_scope(SCOPE):
            await workflow.ainvoke(1)
    assert time.monotonic() - t0 < SCOPE + MARGIN
