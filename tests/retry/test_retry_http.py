"""`retry` against a real loopback HTTP server that answers 429 with `Retry-After`.

`SlowServer` cannot send a `Retry-After` header, so this file has its own tiny server: it answers
from a script of (status, headers) and records when each request arrived.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import httpx
import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline._retry.retry import retry
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

MARGIN = 0.5  # generous: a loaded 2-core machine


class ScriptedServer:
    """Answers each request with the next (status, headers) of `script`, then 200; records arrivals
    as `time.monotonic()` readings."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = list(script)
        self.arrivals: list[float] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with outer._lock:
                    outer.arrivals.append(time.monotonic())
                    status, headers = outer.script.pop(0) if outer.script else (200, {})
                body = b'{"ok": true}' if status == 200 else b'{"error": "slow down"}'
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/items"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def busy_server() -> Iterator[ScriptedServer]:
    """First request: 429 with `Retry-After: 0.3`; then 200."""
    with ScriptedServer([(429, {"Retry-After": "0.3"})]) as server:
        yield server


# Clients are made once, outside the timed part: making one costs tens of milliseconds.
@pytest.fixture
async def aclient() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def _async_fetch(client: httpx.AsyncClient, url: str) -> Callable[[], Awaitable[Any]]:
    @retry(on=httpx.HTTPStatusError, name="get_items")
    async def get_items() -> Any:
        response = await client.get(url)
        response.raise_for_status()
        return response.json()

    return get_items


def _sync_fetch(client: httpx.Client, url: str) -> Callable[[], Any]:
    @retry(on=httpx.HTTPStatusError, name="get_items")
    def get_items() -> Any:
        response = client.get(url)
        response.raise_for_status()
        return response.json()

    return get_items


@pytest.mark.anyio
async def test_retry_after_that_does_not_fit_is_not_waited_for(
    busy_server: ScriptedServer, aclient: httpx.AsyncClient
) -> None:
    fetch = _async_fetch(aclient, busy_server.url)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded) as info:
        async with deadline_scope(0.2):
            await fetch()
    took = time.monotonic() - t0

    assert took < 0.15  # it gave up at once, it did not sleep towards the deadline
    err = info.value
    assert err.step == "get_items"
    assert "Retry-After of 0.300s does not fit" in str(err)
    assert isinstance(err.__cause__, httpx.HTTPStatusError)
    assert err.__cause__.response.status_code == 429
    await anyio.sleep(0.35)  # past the Retry-After: a late retry would have arrived by now
    assert len(busy_server.arrivals) == 1


def test_retry_after_that_does_not_fit_is_not_waited_for_sync(
    busy_server: ScriptedServer, client: httpx.Client
) -> None:
    fetch = _sync_fetch(client, busy_server.url)
    t0 = time.monotonic()
    with deadline_scope(0.2), pytest.raises(DeadlineExceeded, match="Retry-After"):
        fetch()
    assert time.monotonic() - t0 < 0.15
    time.sleep(0.35)
    assert len(busy_server.arrivals) == 1


@pytest.mark.anyio
async def test_retry_after_that_fits_is_honoured(
    busy_server: ScriptedServer, aclient: httpx.AsyncClient
) -> None:
    fetch = _async_fetch(aclient, busy_server.url)
    async with deadline_scope(2.0):
        assert await fetch() == {"ok": True}
    first, second = busy_server.arrivals
    assert 0.25 <= second - first < 0.3 + MARGIN


def test_retry_after_that_fits_is_honoured_sync(
    busy_server: ScriptedServer, client: httpx.Client
) -> None:
    fetch = _sync_fetch(client, busy_server.url)
    with deadline_scope(2.0):
        assert fetch() == {"ok": True}
    first, second = busy_server.arrivals
    assert 0.25 <= second - first < 0.3 + MARGIN


@pytest.mark.anyio
async def test_an_attempt_cut_by_the_deadline_is_not_retried(slow_server: SlowServer) -> None:
    calls = 0

    @retry(on=httpx.TransportError, name="slow")
    async def slow() -> None:
        nonlocal calls
        calls += 1
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/slow?delay=5"))

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        async with deadline_scope(0.3):
            await slow()
    assert time.monotonic() - t0 < 0.3 + MARGIN
    assert calls == 1
    assert slow_server.wait_disconnected(2.0)  # the cut attempt's socket really closed
    assert len(slow_server.requests) == 1


class State(DeadlineState):
    items: Any


@pytest.mark.anyio
async def test_attempts_reach_the_runs_trace_inside_a_graph(
    busy_server: ScriptedServer, aclient: httpx.AsyncClient
) -> None:
    fetch = _async_fetch(aclient, busy_server.url)

    async def load(state: State) -> dict[str, Any]:
        return {"items": await fetch()}

    builder = StateGraph(State)
    builder.add_node("load", load)
    builder.add_edge(START, "load")
    builder.add_edge("load", END)
    out = await with_deadlines(builder, timeout=2.0).ainvoke({"items": None})

    assert out["items"] == {"ok": True}
    tries = [r for r in out["deadline_trace"] if r.name == "get_items"]
    assert [(r.kind, r.attempt, r.status) for r in tries] == [
        ("tool", 1, StepStatus.FAILED),
        ("tool", 2, StepStatus.COMPLETED),
    ]
    assert tries[0].remaining_ms is not None and tries[0].remaining_ms <= 2000.0
