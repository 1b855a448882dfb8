"""HTTP overhead: what the httpx hooks and the ASGI middleware add to one request.

- loopback: GET requests over keep-alive connections from one `httpx.AsyncClient` to uvicorn +
  Starlette serving a trivial route, the server in a process of its own. Two identical apps on
  two ports, one behind `DeadlineASGIMiddleware`; two clients, one with `deadline_hooks()` and a
  deadline in context. The four combinations run interleaved, in a shuffled order each round.
- in process: the same two pieces without sockets: the two hooks called on an `httpx.Request`
  and `httpx.Response`, and the app called through the middleware with in-memory
  `receive`/`send`, against the bare app.

Every figure is a difference or a ratio against the plain variant measured in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from langgraph_deadline import deadline_scope
from langgraph_deadline.asgi import DeadlineASGIMiddleware
from langgraph_deadline.http import deadline_hooks

from ._common import Check, Section, Table, median, percentile

__all__ = ["TARGET_MIDDLEWARE_US", "run"]

ROOT = Path(__file__).resolve().parents[1]
TARGET_MIDDLEWARE_US = 50.0  # per request, in process


def _apps() -> tuple[Any, Any]:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def ok(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    def app() -> Starlette:
        return Starlette(routes=[Route("/ok", ok)])

    return app(), DeadlineASGIMiddleware(app(), max_timeout=30.0)


def serve(plain_port: int, wrapped_port: int) -> None:
    """Serve the plain app and the wrapped one on two loopback ports (a separate process)."""
    import uvicorn

    plain, wrapped = _apps()
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        for app, port in ((plain, plain_port), (wrapped, wrapped_port))
    ]

    async def main() -> None:
        await asyncio.gather(*(s.serve() for s in servers))

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def _server() -> Iterator[tuple[str, str]]:
    ports = (_free_port(), _free_port())
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.http_overhead", *map(str, ports)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    urls = tuple(f"http://127.0.0.1:{p}/ok" for p in ports)
    try:
        end = time.monotonic() + 30
        for url in urls:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(url).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError("the benchmark server did not start")
                time.sleep(0.05)
        yield urls[0], urls[1]
    finally:
        proc.terminate()
        proc.wait(10)


async def _loopback(rounds: int, warmup: int) -> dict[str, list[float]]:
    with _server() as (plain_url, wrapped_url):
        async with (
            httpx.AsyncClient() as plain,
            httpx.AsyncClient(event_hooks=deadline_hooks()) as hooked,
        ):
            cases: dict[str, tuple[httpx.AsyncClient, str]] = {
                "bare": (plain, plain_url),
                "hooks": (hooked, plain_url),
                "middleware": (plain, wrapped_url),
                "both": (hooked, wrapped_url),
            }
            samples: dict[str, list[float]] = {name: [] for name in cases}
            order = list(cases)
            with deadline_scope(3600.0):  # the hooks see a deadline; the plain client ignores it
                for i in range(warmup + rounds):
                    random.shuffle(order)
                    for name in order:
                        client, url = cases[name]
                        t0 = time.perf_counter()
                        response = await client.get(url)
                        took = time.perf_counter() - t0
                        assert response.status_code == 200, response
                        if i >= warmup:
                            samples[name].append(took * 1e6)
    return samples


def _hooks_in_process(n: int) -> tuple[float, float]:
    """µs per request for the two hooks: with a deadline in context, and without one."""
    request_hook = deadline_hooks()["request"][0]
    response_hook = deadline_hooks()["response"][0]
    request = httpx.Request("GET", "http://b.test/x", extensions={"timeout": {"read": 5.0}})
    response = httpx.Response(200, request=request)

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            request_hook(request)
            response_hook(response)
        return (time.perf_counter() - t0) / n * 1e6

    without = loop()
    with deadline_scope(3600.0):
        with_deadline = loop()
    return with_deadline, without


async def _asgi_in_process(n: int) -> tuple[float, float]:
    """µs per request for the bare Starlette app and the same app behind the middleware."""
    plain, wrapped = _apps()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/ok",
        "raw_path": b"/ok",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"a.test"), (b"x-request-timeout-ms", b"2000")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    body: dict[str, Any] = {"type": "http.request", "body": b"", "more_body": False}
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not done.is_set():
            done.set()
            return body
        await asyncio.sleep(3600)  # like a server: nothing more until the client leaves
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        return None

    async def time_app(app: Callable[..., Awaitable[None]]) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            done.clear()
            await app(dict(scope), receive, send)
        return (time.perf_counter() - t0) / n * 1e6

    await time_app(plain)
    await time_app(wrapped)
    results: dict[str, list[float]] = {"plain": [], "wrapped": []}
    for _ in range(5):
        results["plain"].append(await time_app(plain))
        results["wrapped"].append(await time_app(wrapped))
    return median(results["plain"]), median(results["wrapped"])


def run(*, quick: bool) -> Section:
    """Measure the hooks' and the middleware's per-request cost; `quick` takes fewer samples."""
    rounds, warmup, n = (300, 50, 2_000) if quick else (2_000, 200, 20_000)
    gc.collect()
    samples = asyncio.run(_loopback(rounds, warmup))
    bare = median(samples["bare"])
    labels = {
        "bare": "bare: httpx.AsyncClient -> uvicorn + Starlette",
        "hooks": "client with deadline_hooks(), a deadline in context",
        "middleware": "server behind DeadlineASGIMiddleware (default timeout)",
        "both": "both: headers sent, read and a deadline set",
    }
    loop_table = Table(
        f"HTTP overhead on loopback: GET, keep-alive, {rounds} requests per variant, interleaved",
        ("variant", "p50 µs", "p99 µs", "+ µs at p50", "ratio"),
    )
    for name, label in labels.items():
        values = samples[name]
        p50 = median(values)
        loop_table.add(
            label,
            f"{p50:.0f}",
            f"{percentile(values, 99):.0f}",
            "" if name == "bare" else f"{p50 - bare:+.0f}",
            f"{p50 / bare:.2f}x",
        )
    loop_table.notes.append(
        "client and server in two processes on the same machine; the server runs both apps "
        "on one event loop, on two ports"
    )

    hooks_on, hooks_off = _hooks_in_process(n)
    plain_us, wrapped_us = asyncio.run(_asgi_in_process(max(500, n // 10)))
    proc_table = Table(
        "HTTP overhead in process (no sockets)",
        ("piece", "µs per request"),
    )
    proc_table.add("request + response hook, deadline in context", f"{hooks_on:.1f}")
    proc_table.add("request + response hook, no deadline", f"{hooks_off:.1f}")
    proc_table.add("bare Starlette app, called directly", f"{plain_us:.1f}")
    proc_table.add("the same app behind DeadlineASGIMiddleware", f"{wrapped_us:.1f}")
    proc_table.notes.append(
        "the middleware's cost here is the header parsing, the deadline in context and a "
        "cancel scope; a request still running after 20 ms also gets a task that watches for "
        "its client leaving"
    )

    middleware_us = wrapped_us - plain_us
    section = Section(tables=[loop_table, proc_table])
    both = median(samples["both"])
    section.figures += [
        ("HTTP hooks, per request", f"{hooks_on:.1f} µs in process"),
        ("ASGI middleware, per request", f"{middleware_us:.1f} µs in process"),
        ("loopback GET ratio, hooks + middleware / bare", f"{both / bare:.2f}x"),
    ]
    section.checks.append(
        Check("ASGI middleware cost per request", middleware_us, TARGET_MIDDLEWARE_US, " µs")
    )
    return section


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
