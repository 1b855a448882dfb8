"""DeadlineASGIMiddleware behind a real uvicorn on loopback: what each incoming header gets."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from examples.across_services._serve import Served
from langgraph_deadline import DeadlineExceeded, current_deadline, deadline_scope
from langgraph_deadline.asgi import DeadlineASGIMiddleware
from langgraph_deadline.http import deadline_hooks

MAX = 5.0
DEFAULT = 2.0
RESERVE = 0.05
MARGIN = 0.4


@dataclasses.dataclass
class Seen:
    """What the handlers saw: the time they had at start; streams that were cut."""

    budgets: list[float | None] = dataclasses.field(default_factory=list)
    cut: list[float] = dataclasses.field(default_factory=list)


def _handlers(seen: Seen) -> Starlette:
    async def budget(request: Request) -> Response:
        d = current_deadline()
        seen.budgets.append(None if d is None else d.remaining())
        if request.query_params.get("wait"):
            await anyio.sleep(30)
        return JSONResponse({"remaining": seen.budgets[-1]})

    async def stream(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"tick\n"
                    await anyio.sleep(0.1)
            finally:
                seen.cut.append(time.monotonic())

        return StreamingResponse(chunks())

    return Starlette(routes=[Route("/budget", budget), Route("/stream", stream)])


class Skewed:
    """A clock whose wall reading is ten minutes ahead: a server with a bad NTP day."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time() + 600.0


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def server(seen: Seen) -> Iterator[Served]:
    inner = _handlers(seen)

    def wrap(**kwargs: Any) -> Any:
        return DeadlineASGIMiddleware(
            inner, max_timeout=MAX, default_timeout=DEFAULT, reserve=RESERVE, **kwargs
        )

    app = Starlette(
        routes=[
            Mount("/lenient", app=wrap()),
            Mount("/strict", app=wrap(strict=True)),
            Mount("/skewed", app=wrap(clock=Skewed())),
        ]
    )
    with Served(app) as served:
        yield served


def _now_ms(ahead: float = 0.0) -> str:
    return str(int((time.time() + ahead) * 1000))


@pytest.mark.parametrize(
    ("headers", "budget"),
    [
        ({"X-Request-Timeout-Ms": "1000000000"}, MAX),  # 10^9 ms: clamped to max_timeout
        ({"X-Request-Timeout-Ms": "9" * 30}, MAX),  # 30 digits: absurd, clamped
        ({"X-Request-Timeout-Ms": "1500"}, 1.5),
        ({"grpc-timeout": "1500m"}, 1.5),
        ({"grpc-timeout": "1S", "X-Request-Timeout-Ms": "3000"}, 1.0),  # the earliest
        ({}, DEFAULT),  # none: default_timeout
    ],
)
def test_well_formed_headers_get_the_budget_they_ask_for_up_to_the_maximum(
    server: Served, seen: Seen, headers: dict[str, str], budget: float
) -> None:
    for mode in ("lenient", "strict"):
        r = httpx.get(server.url(f"/{mode}/budget"), headers=headers)
        assert r.status_code == 200
        assert budget - RESERVE - 0.2 < r.json()["remaining"] <= budget - RESERVE


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Request-Timeout-Ms": "-5"},
        {"X-Request-Timeout-Ms": "abc"},
        {"X-Request-Timeout-Ms": "1.5"},
        {"grpc-timeout": "9" * 30 + "S"},  # more than 8 digits
        {"grpc-timeout": "5x"},  # no such unit
        {"X-Request-Deadline": "1700000000"},  # seconds, not milliseconds
    ],
)
def test_malformed_headers_are_ignored_with_a_warning_or_refused_when_strict(
    server: Served, seen: Seen, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline.asgi"):
        r = httpx.get(server.url("/lenient/budget"), headers=headers)
    assert r.status_code == 200  # served, under the default
    assert DEFAULT - RESERVE - 0.2 < r.json()["remaining"] <= DEFAULT - RESERVE
    assert "ignored a malformed deadline header" in caplog.text

    r = httpx.get(server.url("/strict/budget"), headers=headers)
    assert r.status_code == 400
    assert r.json()["error"] == "bad_deadline_header"
    assert len(seen.budgets) == 1  # the strict server never ran the handler


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Request-Timeout-Ms": "0"},
        {"X-Request-Timeout-Ms": "30"},  # less than the reserve: not worth starting
        {"grpc-timeout": "0n"},
        {"X-Request-Deadline": _now_ms(-5.0)},
    ],
)
def test_an_expired_incoming_deadline_gets_504_without_running_the_handler(
    server: Served, seen: Seen, headers: dict[str, str]
) -> None:
    for mode in ("lenient", "strict"):
        r = httpx.get(server.url(f"/{mode}/budget"), headers=headers)
        assert r.status_code == 504
        assert r.json()["terminal"] == "deadline_exceeded"
    assert seen.budgets == []


def test_a_handler_past_its_deadline_gets_504(server: Served, seen: Seen) -> None:
    t0 = time.monotonic()
    r = httpx.get(server.url("/lenient/budget?wait=1"), headers={"X-Request-Timeout-Ms": "700"})
    took = time.monotonic() - t0
    assert r.status_code == 504
    assert r.json() == {
        "terminal": "deadline_exceeded",
        "step": "GET /lenient/budget",
        "detail": "deadline exceeded in GET /lenient/budget",
    }
    assert 0.7 - RESERVE < took < 0.7 + MARGIN


def test_a_stream_past_its_deadline_is_cut(server: Served, seen: Seen) -> None:
    received: list[bytes] = []

    def read_stream() -> None:
        headers = {"X-Request-Timeout-Ms": "600"}
        with httpx.stream("GET", server.url("/lenient/stream"), headers=headers) as r:
            assert r.status_code == 200
            received.extend(r.iter_bytes())

    t0 = time.monotonic()
    with pytest.raises(httpx.RemoteProtocolError):
        read_stream()
    assert b"".join(received).startswith(b"tick\n")
    assert 0.6 - RESERVE < time.monotonic() - t0 < 0.6 + MARGIN
    assert len(seen.cut) == 1  # the generator behind the stream was stopped
    assert seen.cut[0] - t0 < 0.6 + MARGIN


@pytest.mark.anyio
async def test_a_server_clock_ten_minutes_ahead_still_gets_the_relative_budget(
    server: Served, seen: Seen
) -> None:
    # The caller sends both headers from the real clock; the server's clock is 10 min ahead,
    # so the absolute deadline looks 10 min past: it is ignored, the relative one rules.
    async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded) as info:
            async with deadline_scope(1.5, name="caller"):
                await client.get(server.url("/skewed/budget?wait=1"))
        took = time.monotonic() - t0
    assert info.value.step == "GET /skewed/budget"  # the server's 504, mapped back
    assert seen.budgets[0] is not None
    assert 1.5 - RESERVE - 0.2 < seen.budgets[0] <= 1.5 - RESERVE
    assert 1.5 - RESERVE < took < 1.5 + MARGIN


def test_an_absolute_deadline_is_used_only_within_the_skew_threshold(
    server: Served, seen: Seen
) -> None:
    # In agreement with the server's (skewed) clock and 0.5 s earlier than the relative one:
    # used. In agreement with the real clock only: 10 min off, ignored.
    agreeing = {"X-Request-Timeout-Ms": "2500", "X-Request-Deadline": _now_ms(600 + 2.0)}
    r = httpx.get(server.url("/skewed/budget"), headers=agreeing)
    assert 2.0 - RESERVE - 0.2 < r.json()["remaining"] <= 2.0 - RESERVE
    disagreeing = {"X-Request-Timeout-Ms": "2500", "X-Request-Deadline": _now_ms(2.0)}
    r = httpx.get(server.url("/skewed/budget"), headers=disagreeing)
    assert 2.5 - RESERVE - 0.2 < r.json()["remaining"] <= 2.5 - RESERVE
