"""Real LangGraph graphs, real HTTP over loopback: what happens when the deadline passes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    budgeted,
    client_timeout,
    deadline_scope,
    remaining,
    terminal_of,
    with_deadlines,
)
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

MARGIN = 0.5  # generous: a loaded 2-core machine


class State(DeadlineState):
    log: list[str]


def _http_chain(server: SlowServer, started: list[str]) -> StateGraph[Any, Any, Any, Any]:
    def make(name: str) -> Any:
        async def node(state: State) -> dict[str, Any]:
            started.append(name)
            async with httpx.AsyncClient() as client:
                await client.get(server.url(f"/slow?delay=2&node={name}"))
            return {"log": [*state.get("log", []), name]}

        node.__name__ = name
        return node

    b = StateGraph(State)
    for name in ("fetch1", "fetch2", "fetch3"):
        b.add_node(name, make(name))
    b.add_edge(START, "fetch1")
    b.add_edge("fetch1", "fetch2")
    b.add_edge("fetch2", "fetch3")
    b.add_edge("fetch3", END)
    return b


@pytest.mark.anyio
async def test_three_slow_http_nodes_under_one_second_end_at_node_one(
    slow_server: SlowServer,
) -> None:
    started: list[str] = []
    graph = with_deadlines(_http_chain(slow_server, started), timeout=1.0)
    t0 = time.monotonic()
    out = await graph.ainvoke({"log": []})
    took = time.monotonic() - t0

    assert took < 1.0 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "fetch1"
    assert started == ["fetch1"]  # nodes 2 and 3 never started
    assert slow_server.wait_disconnected(2.0), "the server never saw the client go away"
    assert len(slow_server.requests) == 1
    assert slow_server.open_requests() == []
    cut = [r for r in out["deadline_trace"] if r.name == "fetch1"]
    assert cut
    assert cut[-1].status is StepStatus.TIMED_OUT


@pytest.mark.anyio
async def test_hand_built_graph_with_budgeted_nodes_drains_after_the_cut(
    slow_server: SlowServer,
) -> None:
    """Without with_deadlines: budgeted nodes + a deadline_scope around the call."""
    started: list[str] = []
    b = _http_chain(slow_server, started)
    for name, spec in list(b.nodes.items()):
        b.nodes[name] = type(spec)(
            **{**_spec_fields(spec), "runnable": budgeted(spec.runnable, name=name)}
        )
    graph = b.compile()
    from langgraph.errors import GraphDrained

    t0 = time.monotonic()
    # The sync form only sets the contextvar: the nodes' own scopes do the cutting, and the
    # run drains after node 1. The state has the deadline fields, so the node writes the outcome
    # there; with more steps scheduled LangGraph raises GraphDrained (with_deadlines turns it
    # into a return value; a state without the fields gets DeadlineExceeded instead).
    with pytest.raises(GraphDrained, match="deadline_exceeded"), deadline_scope(1.0):
        await graph.ainvoke({"log": []})
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert started == ["fetch1"]
    assert slow_server.wait_disconnected(2.0)


def _spec_fields(spec: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


@pytest.mark.anyio
async def test_min_viable_short_circuit_makes_no_request(slow_server: SlowServer) -> None:
    async def fast(state: State) -> dict[str, Any]:
        await asyncio.sleep(0.3)
        return {"log": ["fast"]}

    async def fetch(state: State) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/fast"))
        return {"log": [*state["log"], "fetch"]}

    b = StateGraph(State)
    b.add_node("fast", fast)
    b.add_node("fetch", fetch)
    b.add_edge(START, "fast")
    b.add_edge("fast", "fetch")
    graph = with_deadlines(b, timeout=1.0, min_viable={"fetch": 0.9})
    out = await graph.ainvoke({"log": []})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "fetch"
    assert out["log"] == ["fast"]
    assert slow_server.requests == []
    skipped = out["deadline_trace"][-1]
    assert skipped.name == "fetch"
    assert skipped.status is StepStatus.SKIPPED


@pytest.mark.anyio
async def test_retry_policy_stops_when_the_budget_cannot_cover_the_next_attempt() -> None:
    attempts: list[float] = []

    async def flaky(state: State) -> dict[str, Any]:
        attempts.append(time.monotonic())
        await asyncio.sleep(0.2)
        raise ConnectionError("upstream down")

    b = StateGraph(State)
    b.add_node(
        "flaky",
        flaky,
        retry_policy=RetryPolicy(
            max_attempts=50, initial_interval=0.1, backoff_factor=1.0, jitter=False
        ),
    )
    b.add_edge(START, "flaky")
    graph = with_deadlines(b, timeout=1.0, min_viable={"flaky": 0.2})
    t0 = time.monotonic()
    out = await graph.ainvoke({"log": []})
    took = time.monotonic() - t0
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert took < 1.0 + MARGIN
    assert 2 <= len(attempts) <= 4  # 0.3 s an attempt: never 50, never one started past 0.8 s
    assert all(t - t0 < 0.85 for t in attempts)
    # Either the last retry was refused up front (its backoff plus min_viable did not fit), or
    # an attempt was skipped or cut: never a retry that the budget could not cover.
    statuses = [r.status for r in out["deadline_trace"]]
    refused = "retry would not fit" in out["deadline_outcome"].reason
    assert refused or StepStatus.SKIPPED in statuses or StepStatus.TIMED_OUT in statuses


def test_sync_graph_with_a_blocking_node_returns_on_time_and_says_abandoned() -> None:
    release = __import__("threading").Event()

    def blocking(state: State) -> dict[str, Any]:
        release.wait(5)  # a C call we cannot interrupt
        return {"log": ["blocking"]}

    def after(state: State) -> dict[str, Any]:
        return {"log": [*state["log"], "after"]}

    b = StateGraph(State)
    b.add_node("blocking", blocking)
    b.add_node("after", after)
    b.add_edge(START, "blocking")
    b.add_edge("blocking", "after")
    graph = with_deadlines(b, timeout=0.5)
    t0 = time.monotonic()
    try:
        out = graph.invoke({"log": []})
    finally:
        release.set()
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "blocking"
    assert out["log"] == []
    rec = out["deadline_trace"][-1]
    assert rec.status is StepStatus.ABANDONED


@pytest.mark.anyio
@pytest.mark.parametrize("use_ainvoke", [True, False])
async def test_a_looping_graph_ends_with_deadline_exceeded_not_step_limit(
    use_ainvoke: bool,
) -> None:
    async def spin(state: State) -> dict[str, Any]:
        await asyncio.sleep(0.02)
        return {"log": [*state["log"][-3:], "spin"]}

    b = StateGraph(State)
    b.add_node("spin", spin)
    b.add_edge(START, "spin")
    b.add_conditional_edges("spin", lambda s: "spin", ["spin"])
    graph = with_deadlines(b, timeout=0.5)
    cfg = {"recursion_limit": 100_000}
    t0 = time.monotonic()
    if use_ainvoke:
        out = await graph.ainvoke({"log": []}, cfg)
    else:
        out = None
        async for chunk in graph.astream({"log": []}, cfg, stream_mode="values"):
            out = chunk
    took = time.monotonic() - t0
    assert out is not None
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert 0.45 < took < 0.5 + MARGIN


@pytest.mark.anyio
async def test_graph_without_deadline_fields_raises_with_outcome_and_partial_state(
    slow_server: SlowServer,
) -> None:
    from typing import TypedDict

    class Plain(TypedDict):
        log: list[str]

    async def first(state: Plain) -> dict[str, Any]:
        return {"log": ["first"]}

    async def fetch(state: Plain) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/slow?delay=3"))
        return {"log": [*state["log"], "fetch"]}

    b = StateGraph(Plain)
    b.add_node("first", first)
    b.add_node("fetch", fetch)
    b.add_edge(START, "first")
    b.add_edge("first", "fetch")
    for call in ("ainvoke", "astream"):
        graph = with_deadlines(b, timeout=0.5)
        with pytest.raises(DeadlineExceeded) as info:
            await _drive(graph, call)
        err = info.value
        assert terminal_of(err) is Terminal.DEADLINE_EXCEEDED
        assert err.outcome.step == "fetch"
        assert err.state == {"log": ["first"]}
    assert slow_server.wait_disconnected(2.0, count=2)


async def _drive(graph: Any, call: str) -> None:
    if call == "ainvoke":
        await graph.ainvoke({"log": []})
    else:
        async for _ in graph.astream({"log": []}, stream_mode="values"):
            pass


@pytest.mark.anyio
async def test_caller_cancellation_is_cancelled_not_deadline(slow_server: SlowServer) -> None:
    started: list[str] = []
    graph = with_deadlines(_http_chain(slow_server, started), timeout=10)
    task = asyncio.ensure_future(graph.ainvoke({"log": []}))
    assert await asyncio.to_thread(slow_server.wait_for, lambda rs: len(rs) == 1, 2.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as info:
        await task
    assert terminal_of(info.value) is Terminal.CANCELLED
    assert slow_server.wait_disconnected(2.0)


@pytest.mark.anyio
async def test_abandoned_astream_does_not_keep_the_run_alive(slow_server: SlowServer) -> None:
    started: list[str] = []
    graph = with_deadlines(_http_chain(slow_server, started), timeout=0.6)
    stream = graph.astream({"log": []}, stream_mode="updates")
    consumer = asyncio.ensure_future(stream.__anext__())  # start the run, then walk away
    assert await asyncio.to_thread(slow_server.wait_for, lambda rs: len(rs) == 1, 2.0)
    # Nobody reads the stream any more, and nobody closes it: the node's budget still ends it.
    assert await asyncio.to_thread(slow_server.wait_disconnected, 0.6 + MARGIN + 0.5)
    consumer.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await consumer
    await stream.aclose()


@pytest.mark.anyio
async def test_a_node_cap_and_the_run_deadline_combine(slow_server: SlowServer) -> None:
    seen: dict[str, float] = {}

    async def probe(state: State) -> dict[str, Any]:
        seen["remaining"] = remaining()
        seen["client_timeout"] = client_timeout(10.0) or 0.0
        return {}

    b = StateGraph(State)
    b.add_node("probe", probe)
    b.add_edge(START, "probe")
    out = await with_deadlines(b, timeout=5, caps={"probe": 0.25}).ainvoke({"log": []})
    assert 0 < seen["remaining"] <= 0.25
    assert 0 < seen["client_timeout"] <= 0.25
    rec = out["deadline_trace"][-1]
    assert rec.requested_ms == 250
    assert rec.allocated_ms == 250
    assert not rec.clamped
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED


def test_bad_configuration_gets_clear_errors() -> None:
    b = StateGraph(State)
    b.add_node("a", lambda s: {})
    b.add_edge(START, "a")
    with pytest.raises(ValueError, match="unknown nodes"):
        with_deadlines(b, caps={"nope": 1.0})
    with pytest.raises(ValueError, match="min_viable"):
        with_deadlines(b, min_viable={"a": -1})
    with pytest.raises(ValueError, match="timeout"):
        with_deadlines(b, timeout=float("nan"))
    with pytest.raises(TypeError, match="reserve"):
        with_deadlines(b, reserve="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="StateGraph"):
        with_deadlines(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cap"):
        budgeted(lambda s: s, cap=-2)


def test_terminal_of_works_outside_an_event_loop() -> None:
    assert terminal_of({"log": []}) is Terminal.COMPLETED
    assert terminal_of({"log": [], "__interrupt__": ["x"]}) is None  # paused, not ended
    assert terminal_of(TimeoutError()) is Terminal.DEADLINE_EXCEEDED
    assert terminal_of(asyncio.CancelledError()) is Terminal.CANCELLED
    assert terminal_of(ValueError()) is Terminal.FAILED


def test_a_sync_node_that_stops_itself_with_check_is_cut_not_failed() -> None:
    from langgraph_deadline import check

    def loop(state: State) -> dict[str, Any]:
        while True:
            check()  # cooperative: raises DeadlineExceeded once the budget is spent
            time.sleep(0.005)

    b = StateGraph(State)
    b.add_node("loop", loop)
    b.add_edge(START, "loop")
    for _ in range(5):
        out = with_deadlines(b, timeout=0.2).invoke({"log": []})
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert out["deadline_trace"][-1].status in (StepStatus.TIMED_OUT, StepStatus.ABANDONED)


@pytest.mark.anyio
@pytest.mark.parametrize("call", ["ainvoke", "astream", "invoke"])
async def test_retry_policy_backoff_that_cannot_fit_is_not_waited_for(call: str) -> None:
    attempts: list[float] = []

    def flaky(state: State) -> dict[str, Any]:
        attempts.append(time.monotonic())
        raise ConnectionError("upstream down")

    b = StateGraph(State)
    b.add_node("flaky", flaky, retry_policy=RetryPolicy(initial_interval=3.0, jitter=False))
    b.add_edge(START, "flaky")
    graph = with_deadlines(b, timeout=1.0)
    t0 = time.monotonic()
    if call == "ainvoke":
        out = await graph.ainvoke({"log": []})
    elif call == "invoke":
        out = await asyncio.to_thread(graph.invoke, {"log": []})
    else:
        out = {}
        async for chunk in graph.astream({"log": []}, stream_mode="values"):
            out = chunk
    assert time.monotonic() - t0 < 0.5  # no 3 s sleep, no waiting for the deadline
    assert len(attempts) == 1
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert "retry would not fit" in out["deadline_outcome"].reason
