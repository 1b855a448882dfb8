"""A sync node that bounds its own request with `client_timeout()` (docs/howto/sync-code.md,
"Bound I/O") races its step's cut: the client's read timeout fires at the instant the wrapper
stops waiting. Whichever wins, the run ends `deadline_exceeded`, never with the client's
`httpx.ReadTimeout` as a failure. Many runs of a real sync graph with a real httpx client (a
shared one, whose kept-alive connection makes the race likeliest) against a loopback server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph.graph import START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, client_timeout, with_deadlines
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

RUNS = 60  # main: the client's error won 2 to 5 runs in 60
TIMEOUT = 0.08


class State(DeadlineState, total=False):
    report: str


@pytest.fixture(scope="module")
def slow() -> Iterator[SlowServer]:
    with SlowServer() as server:
        yield server


def _graph(client: httpx.Client, url: str) -> Any:
    def fetch(state: State) -> dict[str, Any]:
        r = client.get(url, timeout=client_timeout(cap=5.0))
        return {"report": r.text}

    return with_deadlines(
        StateGraph(State).add_node("fetch", fetch).add_edge(START, "fetch"), timeout=TIMEOUT
    )


def _last(graph: Any, mode: str) -> dict[str, Any]:
    if mode == "invoke":
        out: dict[str, Any] = graph.invoke({"report": ""})
        return out
    *_, out = graph.stream({"report": ""}, stream_mode="values")
    return dict(out)


@pytest.mark.parametrize("mode", ["invoke", "stream"])
def test_whatever_wins_the_race_the_run_ends_deadline_exceeded(slow: SlowServer, mode: str) -> None:
    with httpx.Client() as client:
        client.get(slow.url("/fast"))  # a kept-alive connection for the node's request
        graph = _graph(client, slow.url("/slow?delay=5"))
        ends: list[tuple[object, object]] = []
        for _ in range(RUNS):
            try:
                out = _last(graph, mode)
            except httpx.ReadTimeout as exc:  # the client's error won, and failed the run
                ends.append((type(exc).__name__, None))
                continue
            ends.append((out["deadline_outcome"].terminal, out["deadline_trace"][-1].status))
    failed = [end for end in ends if end[0] is not Terminal.DEADLINE_EXCEEDED]
    assert not failed, f"{len(failed)} of {RUNS} runs did not end deadline_exceeded: {failed[0]}"
    # Cut either way: abandoned (the wrapper stopped waiting first) or timed_out (the body's
    # client gave up at the budget first, and its thread ended there).
    assert {status for _, status in ends} <= {StepStatus.ABANDONED, StepStatus.TIMED_OUT}
