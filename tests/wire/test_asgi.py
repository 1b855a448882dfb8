"""DeadlineASGIMiddleware in process (httpx's ASGI transport, no sockets): its decisions."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx
import pytest

from langgraph_deadline import DeadlineExceeded, current_deadline
from langgraph_deadline.asgi import DeadlineASGIMiddleware

Scope = dict[str, Any]


class App:
    """A bare ASGI app that reports the deadline it saw, and can sleep or raise."""

    def __init__(self) -> None:
        self.calls: list[float | None] = []

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            await send({"type": f"{message['type']}.complete"})
            return
        d = current_deadline()
        self.calls.append(None if d is None else d.remaining())
        path = scope["path"]
        if path == "/sleep":
            await anyio.sleep(30)
        elif path == "/raise":
            raise DeadlineExceeded("rank ran out", step="rank")
        elif path == "/boom":
            raise ValueError("boom")
        body = json.dumps({"remaining": self.calls[-1]}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a.test")


@pytest.mark.anyio
async def test_handler_sees_the_callers_deadline_less_the_reserve() -> None:
    app = App()
    mw = DeadlineASGIMiddleware(app, max_timeout=30.0, reserve=0.1)
    async with _client(mw) as client:
        r = await client.get("/", headers={"X-Request-Timeout-Ms": "2000"})
    assert r.status_code == 200
    assert 1.8 < r.json()["remaining"] <= 1.9


@pytest.mark.anyio
async def test_without_a_header_the_default_then_the_maximum_applies() -> None:
    app = App()
    async with _client(DeadlineASGIMiddleware(app, max_timeout=8.0, default_timeout=3.0)) as c:
        await c.get("/")
    async with _client(DeadlineASGIMiddleware(app, max_timeout=8.0)) as c:
        await c.get("/")
    async with _client(DeadlineASGIMiddleware(app, max_timeout=None)) as c:
        await c.get("/")
    with_default, with_max, unlimited = app.calls
    assert with_default is not None
    assert 2.8 < with_default <= 3.0
    assert with_max is not None
    assert 7.8 < with_max <= 8.0
    assert unlimited is None


@pytest.mark.anyio
async def test_handler_raising_deadline_exceeded_gets_a_504_naming_its_step() -> None:
    async with _client(DeadlineASGIMiddleware(App(), max_timeout=5.0)) as client:
        r = await client.get("/raise")
    assert r.status_code == 504
    assert r.json() == {"terminal": "deadline_exceeded", "step": "rank", "detail": "rank ran out"}


@pytest.mark.anyio
async def test_a_handler_that_ignores_the_deadline_is_cut_within_the_reserve() -> None:
    app = App()
    mw = DeadlineASGIMiddleware(app, max_timeout=5.0, reserve=0.2)
    async with _client(mw) as client:
        t0 = anyio.current_time()
        r = await client.get("/sleep", headers={"X-Request-Timeout-Ms": "500"})
        took = anyio.current_time() - t0
    assert r.status_code == 504
    assert r.json()["step"] == "GET /sleep"
    assert 0.3 <= took < 0.5  # handler deadline 0.3 s, cut half a reserve later, before 0.5 s


@pytest.mark.anyio
async def test_other_errors_pass_through_unwrapped() -> None:
    mw = DeadlineASGIMiddleware(App(), max_timeout=5.0)
    async with _client(mw) as client:
        with pytest.raises(ValueError, match="boom"):
            await client.get("/boom")


@pytest.mark.anyio
async def test_malformed_header_is_logged_and_ignored_or_400_when_strict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App()
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline.asgi"):
        async with _client(DeadlineASGIMiddleware(app, max_timeout=4.0)) as client:
            r = await client.get("/", headers={"grpc-timeout": "5x"})
    assert r.status_code == 200
    assert "malformed deadline header" in caplog.text
    assert "grpc-timeout" in caplog.text
    async with _client(DeadlineASGIMiddleware(app, max_timeout=4.0, strict=True)) as client:
        r = await client.get("/", headers={"grpc-timeout": "5x"})
    assert r.status_code == 400
    assert r.json()["error"] == "bad_deadline_header"
    assert "grpc-timeout" in r.json()["detail"]
    assert len(app.calls) == 1  # the strict server did not run the handler


@pytest.mark.anyio
async def test_lifespan_passes_through() -> None:
    app = App()
    mw = DeadlineASGIMiddleware(app, max_timeout=1.0)
    sent: list[Any] = []
    messages = iter([{"type": "lifespan.startup"}])

    async def receive() -> Any:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    await mw({"type": "lifespan"}, receive, send)
    assert sent == [{"type": "lifespan.startup.complete"}]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_timeout": 5.0, "default_timeout": 6.0}, ValueError),
        ({"max_timeout": -1.0}, ValueError),
        ({"max_timeout": 5.0, "reserve": float("nan")}, ValueError),
        ({"max_timeout": "5"}, TypeError),
        ({"max_timeout": 1.0, "reserve": 2.0}, ValueError),
        ({"max_timeout": 1.0, "reserve": 1.0}, ValueError),
        ({"max_timeout": 5.0, "default_timeout": 1.0, "reserve": 1.0}, ValueError),
        ({"max_timeout": None, "default_timeout": 1.0, "reserve": 2.0}, ValueError),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        DeadlineASGIMiddleware(App(), **kwargs)


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("max_timeout", 10**400, ValueError),
        ("reserve", 1e300, ValueError),
        ("strict", "no", TypeError),
        ("clock", 5, TypeError),
        ("wire", "X-Budget-Ms", TypeError),
    ],
)
def test_each_bad_setting_is_named_at_construction(
    name: str, value: object, error: type[Exception]
) -> None:
    kwargs: dict[str, Any] = {"max_timeout": 5.0, name: value}
    with pytest.raises(error, match=name):
        DeadlineASGIMiddleware(App(), **kwargs)


def test_an_app_that_is_not_callable_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="app"):
        DeadlineASGIMiddleware(None, max_timeout=5.0)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_malformed_sibling_does_not_void_a_valid_shorter_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App()
    headers = {"X-Request-Timeout-Ms": "1000", "grpc-timeout": "soon"}
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline.asgi"):
        async with _client(DeadlineASGIMiddleware(app, max_timeout=8.0, reserve=0.0)) as client:
            r = await client.get("/", headers=headers)
    assert r.status_code == 200
    assert 0.8 < r.json()["remaining"] <= 1.0  # not the 8 s maximum
    assert "grpc-timeout" in caplog.text


@pytest.mark.parametrize("max_timeout", [5.0, None], ids=["deadline", "no-deadline"])
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_a_client_that_leaves_cancels_the_handler_on_any_event_loop(
    anyio_backend: str, max_timeout: float | None
) -> None:
    cancelled: list[bool] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    mw = DeadlineASGIMiddleware(app, max_timeout=max_timeout)
    sent: list[Any] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> Any:
        if messages:
            return messages.pop()
        await anyio.sleep(0.1)  # the client goes away 100 ms in
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
    with anyio.fail_after(2):
        await mw(scope, receive, send)
    assert cancelled == [True]
    assert sent == []  # nobody to answer


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_the_watcher_reads_at_most_one_message_ahead_and_loses_none(
    anyio_backend: str,
) -> None:
    chunks = [bytes([i]) * 10 for i in range(50)]
    pulled: list[int] = []
    got: list[bytes] = []
    pulled_while_busy: list[int] = []

    async def receive() -> Any:
        if len(pulled) == len(chunks):  # the body is all read: only a disconnect may come
            await anyio.sleep_forever()
        pulled.append(len(pulled))
        i = len(pulled) - 1
        return {"type": "http.request", "body": chunks[i], "more_body": i < len(chunks) - 1}

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await anyio.sleep(0.2)  # busy: the watcher has been reading for it since 20 ms
        pulled_while_busy.append(len(pulled))
        while True:
            message = await receive()
            got.append(message["body"])
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: Any) -> None:
        pass

    scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
    with anyio.fail_after(5):
        await DeadlineASGIMiddleware(app, max_timeout=5.0)(scope, receive, send)
    assert pulled_while_busy == [2]  # one waiting for the app, one in the watcher's hand
    assert got == chunks


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_a_handler_waiting_on_its_request_body_is_cut_at_the_deadline(
    anyio_backend: str,
) -> None:
    async def receive() -> Any:
        await anyio.sleep(30)  # a client that never sends its body

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await receive()  # the app reads the request itself: no watcher, the timer still cuts

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    mw = DeadlineASGIMiddleware(app, max_timeout=5.0, reserve=0.2)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/up",
        "headers": [(b"grpc-timeout", b"300m")],
    }
    t0 = anyio.current_time()
    with anyio.fail_after(2):
        await mw(scope, receive, send)
    took = anyio.current_time() - t0
    assert 0.1 <= took < 0.3  # handler deadline 0.1 s, cut half a reserve later
    assert sent[0]["status"] == 504
    assert json.loads(sent[1]["body"])["step"] == "POST /up"


@pytest.mark.anyio
async def test_concurrent_requests_are_each_watched_and_each_cut() -> None:
    cancelled: list[str] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.append(scope["path"])
            raise

    def client(leaves_after: float) -> tuple[Any, Any, list[Any]]:
        messages = [{"type": "http.request", "body": b"", "more_body": False}]
        sent: list[Any] = []

        async def receive() -> Any:
            if messages:
                return messages.pop()
            await anyio.sleep(leaves_after)
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        return receive, send, sent

    mw = DeadlineASGIMiddleware(app, max_timeout=5.0, reserve=0.02)
    answers: dict[str, list[Any]] = {}

    async def call(path: str, timeout_ms: str, leaves_after: float) -> None:
        receive, send, answers[path] = client(leaves_after)
        headers = [(b"x-request-timeout-ms", timeout_ms.encode())]
        await mw({"type": "http", "method": "GET", "path": path, "headers": headers}, receive, send)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "/left-1", "5000", 0.1)
            tg.start_soon(call, "/left-2", "5000", 0.15)
            tg.start_soon(call, "/soon", "25", 30)  # cut before a watcher would start
            tg.start_soon(call, "/later", "300", 30)
    assert sorted(cancelled) == ["/later", "/left-1", "/left-2", "/soon"]
    assert answers["/left-1"] == answers["/left-2"] == []  # nobody to answer
    assert answers["/soon"][0]["status"] == answers["/later"][0]["status"] == 504


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"max_timeout": 1.0, "reserve": 2.0}, r"reserve \(2 s\) must be less than max_timeout"),
        (
            {"max_timeout": 5.0, "default_timeout": 1.0, "reserve": 1.5},
            r"reserve \(1.5 s\) must be less than default_timeout",
        ),
    ],
)
def test_a_reserve_that_takes_the_whole_limit_is_refused_naming_both(
    kwargs: dict[str, Any], says: str
) -> None:
    """Else every request would be answered 504 and the handler never run."""
    with pytest.raises(ValueError, match=says):
        DeadlineASGIMiddleware(App(), **kwargs)


@pytest.mark.anyio
async def test_a_handler_running_a_plain_langgraph_run_has_its_tasks_cancelled_at_the_cut() -> None:
    # The handler's LangGraph run leaves through a clean-up task that cancels the tasks it
    # started (here a Functional API @task); the cut lets that clean-up run, so the @task's
    # request is closed at the server, not served to its end after the 504.
    from langgraph.func import entrypoint, task
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from langgraph_deadline.testing import SlowServer

    with SlowServer() as server:

        @task
        async def fetch(n: int) -> str:
            async with httpx.AsyncClient() as client:
                return (await client.get(server.url("/slow?delay=5"))).text

        @entrypoint()
        async def workflow(n: int) -> str:
            return await fetch(n)

        async def route(request: Any) -> JSONResponse:
            return JSONResponse({"answer": await workflow.ainvoke(1)})

        app = DeadlineASGIMiddleware(Starlette(routes=[Route("/", route)]), max_timeout=0.5)
        async with _client(app) as client:
            response = await client.get("/")
        assert response.status_code == 504
        assert await anyio.to_thread.run_sync(server.wait_disconnected, 2.0)
