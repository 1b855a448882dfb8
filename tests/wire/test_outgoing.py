"""Outgoing requests on loopback, asked of the server: what arrived, with what, and when it left."""

from __future__ import annotations

import itertools
import time
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from examples.across_services._serve import Served
from langgraph_deadline import Deadline, DeadlineExceeded, deadline_scope
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.testing import SlowServer

LIBS = pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
MARGIN = 0.4  # a loaded 2-core machine


def _expired() -> Deadline:
    d = Deadline.after(0.01)
    time.sleep(0.02)
    return d


@LIBS
def test_a_sync_request_after_expiry_sends_nothing(lib: Any, slow_server: SlowServer) -> None:
    with lib.Client(event_hooks=deadline_hooks()) as client:
        client.get(slow_server.url("/fast?n=control"))  # no deadline: goes out
        with deadline_scope(_expired(), name="fetch"), pytest.raises(DeadlineExceeded) as info:
            client.post(slow_server.url("/fast?n=late"), json={"x": 1})
    assert info.value.step == "fetch"
    time.sleep(0.2)  # give a stray request every chance to arrive
    assert [r.query["n"] for r in slow_server.requests] == ["control"]


@LIBS
@pytest.mark.anyio
async def test_an_async_request_after_expiry_sends_nothing(
    lib: Any, slow_server: SlowServer
) -> None:
    async with lib.AsyncClient(event_hooks=deadline_hooks()) as client:
        await client.get(slow_server.url("/fast?n=control"))
        with deadline_scope(_expired()), pytest.raises(DeadlineExceeded):
            await client.get(slow_server.url("/fast?n=late"))
    await anyio.sleep(0.2)
    assert [r.query["n"] for r in slow_server.requests] == ["control"]


@LIBS
def test_sync_client_timeouts_are_cut_to_the_deadline(lib: Any, slow_server: SlowServer) -> None:
    # Sync code has no cancel scope: the clamped read timeout is what ends the wait.
    with lib.Client(event_hooks=deadline_hooks(), timeout=30.0) as client:
        t0 = time.monotonic()
        with deadline_scope(0.6), pytest.raises(lib.ReadTimeout):
            client.get(slow_server.url("/slow?delay=5"))
        took = time.monotonic() - t0
    assert 0.55 < took < 0.6 + MARGIN
    assert slow_server.wait_disconnected(1.0)
    (request,) = slow_server.requests
    assert 0 < int(request.headers["x-request-timeout-ms"]) <= 600
    assert abs(int(request.headers["x-request-deadline"]) / 1000 - time.time() - (0.6 - took)) < 0.5


@pytest.mark.anyio
async def test_async_request_is_cancelled_at_the_deadline(slow_server: SlowServer) -> None:
    async with httpx.AsyncClient(event_hooks=deadline_hooks(), timeout=30.0) as client:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            async with deadline_scope(0.5, name="search"):
                await client.get(slow_server.url("/slow?delay=5"))
        took = time.monotonic() - t0
    assert took < 0.5 + MARGIN
    assert slow_server.wait_disconnected(1.0)
    assert slow_server.open_requests() == []


def _flaky_service(seen: list[int]) -> Starlette:
    async def flaky(request: Request) -> Response:
        seen.append(int(request.headers["x-request-timeout-ms"]))
        await anyio.sleep(0.3)
        return Response(status_code=503)

    return Starlette(routes=[Route("/flaky", flaky)])


@pytest.mark.anyio
async def test_each_retry_sends_what_is_left_then() -> None:
    seen: list[int] = []

    async def retry_until_it_works(client: httpx.AsyncClient, url: str) -> None:
        while (await client.get(url)).status_code == 503:  # no budget of its own
            pass

    with Served(_flaky_service(seen)) as service:
        async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
            with pytest.raises(DeadlineExceeded):
                async with deadline_scope(1.0):
                    await retry_until_it_works(client, service.url("/flaky"))
    assert len(seen) >= 3
    assert seen[0] <= 1000
    assert all(a - b >= 250 for a, b in itertools.pairwise(seen))  # each one less
