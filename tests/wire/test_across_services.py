"""Two real services on loopback (examples/across_services): A, the planner, asks B, the
retriever, whose search tool is slow. One deadline, set by A's caller, stops all three hops."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from examples.across_services import planner, retriever
from examples.across_services._serve import RunReport, Served
from langgraph_deadline import DeadlineExceeded, Terminal, deadline_scope
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.testing import SlowServer

RESERVE = 0.1  # each service's reserve (the examples' default): time kept to answer its caller
LATE = 0.3  # how late past its deadline a run may end on a loaded 2-core machine


@dataclasses.dataclass
class Services:
    a: Served
    a_app: Starlette
    b: Served
    b_app: Starlette
    search: SlowServer


@pytest.fixture
def services(slow_server: SlowServer) -> Iterator[Services]:
    b_app = retriever.create_app(search_url=slow_server.url("/slow?delay=10"))
    with Served(b_app) as b:
        a_app = planner.create_app(retriever_url=b.url())
        with Served(a_app) as a:
            yield Services(a, a_app, b, b_app, slow_server)


def _one_run(app: Starlette, timeout: float = 3.0) -> RunReport:
    end = time.monotonic() + timeout
    while not app.state.runs and time.monotonic() < end:
        time.sleep(0.01)
    (run,) = app.state.runs
    assert isinstance(run, RunReport)
    return run


@pytest.mark.anyio
async def test_a_with_1_5_s_left_calls_b_whose_own_default_is_30_s(services: Services) -> None:
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=10.0) as client:
        r = await client.post(
            services.a.url("/ask"),
            json={"question": "Why was my order late?"},
            headers={"X-Request-Timeout-Ms": "1500"},
        )
    answered = time.monotonic()
    deadline = t0 + 1.5

    # A answers 504 before its caller's deadline, naming B's step and B's address.
    assert r.status_code == 504
    body = r.json()
    assert body["terminal"] == "deadline_exceeded"
    assert body["step"] == "search"
    assert services.b.url("/retrieve") in body["detail"]
    assert deadline - 2 * RESERVE - 0.05 < answered < deadline + LATE

    # B's run got only what was left of A's budget, not its own 30 s, and ended with it.
    b_run = _one_run(services.b_app)
    assert b_run.terminal is Terminal.DEADLINE_EXCEEDED
    assert b_run.step == "search"
    assert b_run.budget is not None
    assert b_run.budget < 1.5 - 2 * RESERVE
    assert deadline - 2 * RESERVE - 0.05 < b_run.ended < deadline + LATE

    # B's slow search request was cancelled: the search server saw the socket close.
    assert services.search.wait_disconnected(1.0)
    (search,) = services.search.requests
    assert search.disconnected is not None
    assert deadline - 2 * RESERVE - 0.05 < search.disconnected < deadline + LATE
    # ... and it had been told how little time was left (the deadline's third hop).
    assert 0 < int(search.headers["x-request-timeout-ms"]) < 1500 - 2 * 100

    # A's own run ended deadline_exceeded pointing at B's step.
    a_run = _one_run(services.a_app)
    assert a_run.terminal is Terminal.DEADLINE_EXCEEDED
    assert a_run.step == "search"


@pytest.mark.anyio
async def test_a_caller_with_the_hooks_gets_deadline_exceeded(services: Services) -> None:
    async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
        with pytest.raises(DeadlineExceeded) as info:
            async with deadline_scope(1.0, name="gateway"):
                await client.post(services.a.url("/ask"), json={"question": "where is it?"})
    err = info.value
    assert err.step == "search"
    assert services.a.url("/ask") in str(err)
    assert services.b.url("/retrieve") in str(err)  # the chain of hops, outermost first
    assert services.search.wait_disconnected(1.0)


@pytest.mark.anyio
async def test_a_client_that_disconnects_from_a_cancels_b_work(services: Services) -> None:
    async with httpx.AsyncClient() as client:
        with anyio.move_on_after(0.8):
            await client.post(
                services.a.url("/ask"),
                json={"question": "still there?"},
                headers={"X-Request-Timeout-Ms": "20000"},
            )
    left = time.monotonic()

    # The search request two hops down was closed, soon after the client left A.
    assert services.search.wait_disconnected(2.0)
    (search,) = services.search.requests
    assert search.disconnected is not None
    assert search.disconnected - left < 0.5
    # Both runs ended as cancelled, not as deadline_exceeded: nobody ran out of time.
    assert _one_run(services.b_app).terminal is Terminal.CANCELLED
    assert _one_run(services.a_app).terminal is Terminal.CANCELLED


@pytest.mark.anyio
async def test_with_time_to_spare_the_answer_comes_back(slow_server: SlowServer) -> None:
    b_app = retriever.create_app(search_url=slow_server.url("/slow?delay=0.2"))
    with Served(b_app) as b:
        a_app = planner.create_app(retriever_url=b.url())
        with Served(a_app) as a:
            async with (
                httpx.AsyncClient(event_hooks=deadline_hooks()) as client,
                deadline_scope(5.0),
            ):
                r = await client.post(a.url("/ask"), json={"question": "Refund?"})
    assert r.status_code == 200
    assert r.json()["answer"] == "1 document(s) about 'refund'"
    assert _one_run(a_app).terminal is Terminal.COMPLETED
    b_run = _one_run(b_app)
    assert b_run.terminal is Terminal.COMPLETED
    assert b_run.budget is not None
    assert b_run.budget < 5.0 - 2 * RESERVE
