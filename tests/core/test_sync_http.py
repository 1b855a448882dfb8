"""`_core/sync_http.py`: the httpx requests of a sync step's body follow its deadline, with the
client the body made (no hooks): refused past it, cut to it, and their connection shut down
when the step is abandoned. Outside a sync step nothing changes. Real httpx clients, a real
sync graph, a loopback server that records when its client left."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph.graph import START, StateGraph

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline._core.sync_http import ENV
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

TIMEOUT = 0.3
MARGIN = 0.3  # a loaded 2-core machine


class State(DeadlineState, total=False):
    text: str


@pytest.fixture
def slow() -> Iterator[SlowServer]:
    with SlowServer() as server:
        yield server


def _run(body: Any, timeout: float = TIMEOUT) -> tuple[dict[str, Any], float]:
    def node(state: State) -> dict[str, Any]:
        return {"text": body()}

    graph = with_deadlines(
        StateGraph(State).add_node("fetch", node).add_edge(START, "fetch"), timeout=timeout
    )
    t0 = time.monotonic()
    out = graph.invoke({"text": ""})
    return out, t0 + timeout


@pytest.mark.parametrize("kept_alive", [False, True], ids=["new", "kept-alive"])
def test_a_hung_request_of_an_abandoned_step_is_closed_at_the_deadline(
    slow: SlowServer, kept_alive: bool
) -> None:
    with httpx.Client(timeout=30.0) as client:  # its own read timeout: 30 s
        if kept_alive:  # taken from the pool: known only by its read timeout, cut to the budget
            client.get(slow.url("/fast"))
        out, deadline = _run(lambda: client.get(slow.url("/slow?delay=10")).text)
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert out["deadline_trace"][-1].status in {StepStatus.ABANDONED, StepStatus.TIMED_OUT}
        assert slow.wait_disconnected(deadline + MARGIN - time.monotonic())
        (hung,) = [r for r in slow.requests if r.path == "/slow"]
        assert hung.disconnected is not None and hung.disconnected < deadline + MARGIN


def test_the_abandoned_step_says_its_connection_was_closed(slow: SlowServer) -> None:
    """A body left stuck past its budget on something no budget reaches (here a lock), with a
    response open: abandoned, its connection shut, and its outcome says so. (A body waiting on
    the answer itself is as likely to end by its own read timeout, cut to the same instant.)"""
    release = threading.Event()

    def body() -> str:
        with (
            httpx.Client() as client,
            client.stream("GET", slow.url("/trickle?chunks=100&interval=0.05")) as response,
        ):
            next(response.iter_bytes())  # the answer came: its connection is open
            release.wait(10.0)
            return "never"

    try:
        out, deadline = _run(body, timeout=1.0)
    finally:
        release.set()
    assert "1 HTTP connection closed" in out["deadline_outcome"].reason
    assert "its thread still running" in out["deadline_outcome"].reason
    assert slow.wait_disconnected(deadline + MARGIN - time.monotonic())


def test_a_body_that_streams_past_the_deadline_is_closed_mid_body(slow: SlowServer) -> None:
    def read() -> str:
        with (
            httpx.Client() as client,
            client.stream("GET", slow.url("/trickle?chunks=100&interval=0.05")) as response,
        ):
            return "".join(response.iter_text())

    out, deadline = _run(read)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert slow.wait_disconnected(deadline + MARGIN - time.monotonic())
    assert slow.requests[0].disconnected < deadline + MARGIN  # type: ignore[operator]


def test_a_stream_the_body_left_open_when_it_raised_is_closed_at_once(slow: SlowServer) -> None:
    """A model stream stopped at the deadline on a worker thread raises out of the SDK's loop
    and leaves its response unread and unclosed (litellm's does): the body ended, so the step
    is not abandoned, and the connection stayed open, streaming, until the garbage collector
    found it. It is shut when the body raises."""
    left: list[Any] = []  # (held, as a reference cycle holds litellm's: nothing closes them)

    def read() -> str:
        client = httpx.Client()
        request = client.build_request("GET", slow.url("/trickle?chunks=100&interval=0.05"))
        response = client.send(request, stream=True)
        left.append(chunks := response.iter_bytes())
        next(chunks)
        raise ValueError("the stream's consumer gave up")

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="gave up"):
        _run(read)
    assert slow.wait_disconnected(MARGIN), "the stream the body left was still open"
    assert slow.requests[0].disconnected < t0 + TIMEOUT  # type: ignore[operator]
    for chunks in left:  # (its body holds the step, whose error holds the run's frames)
        chunks.close()
    left.clear()


def test_outside_a_sync_step_a_request_is_untouched(slow: SlowServer) -> None:
    """A sync `deadline_scope` only sets the context: the request runs to its end."""
    with deadline_scope(0.05), httpx.Client() as client:
        assert client.get(slow.url("/slow?delay=0.3")).status_code == 200


def test_a_request_past_the_deadline_is_not_sent_and_a_trace_of_yours_still_runs(
    slow: SlowServer,
) -> None:
    events: list[str] = []

    def late() -> str:
        with httpx.Client() as client:
            client.get(slow.url("/fast"), extensions={"trace": lambda name, _: events.append(name)})
            time.sleep(TIMEOUT + 0.05)  # the step is past its deadline (and abandoned)
            try:
                client.get(slow.url("/fast?late=1"))
            except DeadlineExceeded:
                events.append("refused")
            return "late"

    _run(late)
    assert slow.wait_for(lambda rs: len(rs) >= 1, 1.0)
    time.sleep(0.2)  # the late request would have come by now
    assert [r.query for r in slow.requests] == [{}]  # the late one never left
    assert "connection.connect_tcp.complete" in events  # the caller's own trace was called
    assert events[-1] == "refused"


def test_the_environment_can_leave_httpx_as_it_is() -> None:
    code = (
        "import httpx, urllib3\n"
        "from langgraph.graph import START, StateGraph\n"
        "from langgraph_deadline import DeadlineState, with_deadlines\n"
        "from langgraph_deadline._core.sync_http import patched\n"
        "class S(DeadlineState, total=False):\n    x: int\n"
        "g = StateGraph(S).add_node('n', lambda s: {'x': 1}).add_edge(START, 'n')\n"
        "with_deadlines(g, timeout=5.0).invoke({'x': 0})\n"
        "print(patched(httpx), patched(urllib3))\n"
    )
    for value, expected in (("off", "False False"), ("", "True True")):
        env = {**os.environ, ENV: value}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == expected


def test_on_the_event_loops_thread_a_request_ends_at_the_budget(slow: SlowServer) -> None:
    """Sync `invoke` called from a coroutine runs the node on the loop's thread (no worker to
    walk away from): the request's read timeout, cut to the budget, ends it there."""

    async def main() -> tuple[dict[str, Any], float]:
        with httpx.Client(timeout=30.0) as client:
            return _run(lambda: client.get(slow.url("/slow?delay=10")).text)

    out, deadline = asyncio.run(main())
    assert time.monotonic() < deadline + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_trace"][-1].status is StepStatus.TIMED_OUT
    assert slow.wait_disconnected(deadline + MARGIN - time.monotonic())
