"""LangGraph's retries under one deadline: a retry whose backoff cannot fit is not waited for,
whatever ended the attempt before it (LangGraph's own `NodeTimeoutError` included, which is
raised outside the node), under every entry point, and with the builder's default policies.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from langgraph_deadline import DeadlineState, Terminal, with_deadlines
from langgraph_deadline._graph.retries import RetryGuard

pytestmark = pytest.mark.anyio

MARGIN = 0.25  # holds on a loaded 2-core machine
TIMEOUT = 1.0
POLICY_TIMEOUT = 0.4

ASYNC_CALLS = ["ainvoke", "astream", "astream_events"]
ALL_CALLS = [*ASYNC_CALLS, "invoke", "stream"]


class State(DeadlineState):
    log: list[str]


async def _run(graph: Any, call: str, config: Any = None) -> dict[str, Any]:
    """The final state the caller sees, by `call`."""
    inputs = {"log": []}
    if call == "ainvoke":
        out: dict[str, Any] = await graph.ainvoke(inputs, config)
        return out
    if call == "invoke":
        out = await asyncio.to_thread(graph.invoke, inputs, config)
        return out
    if call == "stream":

        def read() -> dict[str, Any]:
            last: dict[str, Any] = {}
            for chunk in graph.stream(inputs, config, stream_mode="values"):
                last = chunk
            return last

        return await asyncio.to_thread(read)
    last = {}
    if call == "astream":
        async for chunk in graph.astream(inputs, config, stream_mode="values"):
            last = chunk
        return last
    async for event in graph.astream_events(inputs, config, version="v2"):
        if event["name"] != "LangGraph":
            continue
        if event["event"] == "on_chain_end":
            last = dict(event["data"]["output"])
        elif event["event"] == "on_chain_stream":  # updates, by node
            for update in event["data"]["chunk"].values():
                last.update(update if isinstance(update, dict) else {})
    return last


def _graph(
    node: Any, *, policy: RetryPolicy, where: str, **add: Any
) -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(State)
    if where == "default":
        b.set_node_defaults(retry_policy=policy)
        b.add_node("work", node, **add)
    else:
        b.add_node("work", node, retry_policy=policy, **add)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b


# -- LangGraph's TimeoutPolicy: NodeTimeoutError, raised outside the node ----------------------


async def _hangs(state: State) -> dict[str, Any]:
    await asyncio.sleep(10)
    return {"log": ["done"]}


@pytest.mark.parametrize("where", ["node", "default"])
@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("call", ASYNC_CALLS)
async def test_a_node_timeout_whose_retry_cannot_fit_ends_the_run_at_once(
    call: str, where: str, checkpointed: bool
) -> None:
    # LangGraph's default RetryPolicy retries NodeTimeoutError after 0.5 s + up to 1 s of
    # jitter: with 0.6 s left after the first attempt's 0.4 s, that retry cannot fit.
    b = _graph(_hangs, policy=RetryPolicy(), where=where, timeout=POLICY_TIMEOUT)
    graph = with_deadlines(
        b, timeout=TIMEOUT, checkpointer=InMemorySaver() if checkpointed else None
    )
    config = {"configurable": {"thread_id": "t"}} if checkpointed else None
    t0 = time.monotonic()
    out = await _run(graph, call, config)
    took = time.monotonic() - t0
    assert took < POLICY_TIMEOUT + MARGIN  # refused at once, not slept on to the deadline
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert "NodeTimeoutError" in outcome.reason and "would not fit" in outcome.reason
    assert outcome.step == "work"


@pytest.mark.parametrize("call", ASYNC_CALLS)
async def test_node_timeouts_retried_while_they_fit_end_by_the_deadline(call: str) -> None:
    # A short fixed backoff: the retries fit, until the last attempt is cut at the deadline.
    starts: list[float] = []

    async def hangs(state: State) -> dict[str, Any]:
        starts.append(time.monotonic())
        await asyncio.sleep(10)
        return {"log": ["done"]}

    policy = RetryPolicy(initial_interval=0.05, backoff_factor=1.0, jitter=False, max_attempts=10)
    b = _graph(hangs, policy=policy, where="node", timeout=0.3)
    graph = with_deadlines(b, timeout=TIMEOUT)
    t0 = time.monotonic()
    out = await _run(graph, call)
    assert time.monotonic() - t0 < TIMEOUT + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert 2 <= len(starts) <= 4  # retried, and never an attempt begun past the deadline
    assert all(t - t0 < TIMEOUT for t in starts)


# -- errors the node raises: the builder's default policy too, every entry point --------------


def _fails(state: State) -> dict[str, Any]:
    time.sleep(0.05)
    raise ConnectionError("upstream down")


@pytest.mark.parametrize("where", ["node", "default"])
@pytest.mark.parametrize("call", ALL_CALLS)
async def test_an_error_whose_retry_cannot_fit_ends_the_run_at_once(call: str, where: str) -> None:
    policy = RetryPolicy(initial_interval=3.0, jitter=False)
    graph = with_deadlines(_graph(_fails, policy=policy, where=where), timeout=TIMEOUT)
    t0 = time.monotonic()
    out = await _run(graph, call)
    assert time.monotonic() - t0 < 0.05 + MARGIN
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert "ConnectionError" in outcome.reason and "would not fit" in outcome.reason


# -- the guard -----------------------------------------------------------------------------------


def test_every_retry_policy_of_the_compiled_graph_is_guarded_once() -> None:
    b = _graph(_fails, policy=RetryPolicy(), where="default")
    graph = with_deadlines(with_deadlines(b, timeout=TIMEOUT), timeout=TIMEOUT)
    (policy,) = graph.nodes["work"].retry_policy
    assert isinstance(policy.retry_on, RetryGuard)
    assert not isinstance(policy.retry_on.policy.retry_on, RetryGuard)


def test_outside_a_run_the_guard_answers_as_the_policy_does() -> None:
    guard = RetryGuard(RetryPolicy(retry_on=ConnectionError), "work")
    assert guard(ConnectionError()) is True
    assert guard(ValueError()) is False
