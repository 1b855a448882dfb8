"""The httpx/httpx2 hooks, on mock transports: headers, clamped timeouts, refusal, 504 mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import httpx2
import pytest

from langgraph_deadline import Deadline, DeadlineExceeded, deadline_scope
from langgraph_deadline._core.headers import error_body
from langgraph_deadline.http import WireFormat, deadline_hooks
from langgraph_deadline.testing import ManualClock

Handler = Callable[[Any], Any]

OURS_504 = error_body("deadline_exceeded", "search", "search cancelled at its budget")


def _sync_client(lib: Any, handler: Handler, **kwargs: Any) -> Any:
    return lib.Client(transport=lib.MockTransport(handler), event_hooks=deadline_hooks(), **kwargs)


def _async_client(lib: Any, handler: Handler, **kwargs: Any) -> Any:
    return lib.AsyncClient(
        transport=lib.MockTransport(handler), event_hooks=deadline_hooks(), **kwargs
    )


LIBS = pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])


@LIBS
def test_headers_and_clamped_timeouts_on_a_sync_client(lib: Any) -> None:
    seen: list[Any] = []

    def handler(request: Any) -> Any:
        seen.append(request)
        return lib.Response(200)

    clock = ManualClock(wall=1_800_000_000.0)
    with _sync_client(lib, handler, timeout=lib.Timeout(30.0, connect=0.2)) as client:
        client.get("http://b.test/no-deadline")
        with deadline_scope(Deadline.after(1.5, clock=clock)):
            client.get("http://b.test/x")
    plain, sent = seen
    assert "x-request-timeout-ms" not in plain.headers
    assert plain.extensions["timeout"] == {
        "connect": 0.2,
        "read": 30.0,
        "write": 30.0,
        "pool": 30.0,
    }
    assert sent.headers["x-request-timeout-ms"] == "1500"
    assert sent.headers["x-request-deadline"] == "1800000001500"
    # each of the four is cut to what is left; a shorter one of the client's own stays
    assert sent.extensions["timeout"] == {"connect": 0.2, "read": 1.5, "write": 1.5, "pool": 1.5}


@LIBS
@pytest.mark.anyio
async def test_headers_and_clamped_timeouts_on_an_async_client(lib: Any) -> None:
    seen: list[Any] = []

    def handler(request: Any) -> Any:
        seen.append(request)
        return lib.Response(200)

    clock = ManualClock()
    async with _async_client(lib, handler, timeout=None) as client:
        with deadline_scope(Deadline.after(0.25, clock=clock)):
            await client.get("http://b.test/x")
    (sent,) = seen
    assert sent.headers["x-request-timeout-ms"] == "250"
    assert sent.extensions["timeout"] == {
        "connect": 0.25,
        "read": 0.25,
        "write": 0.25,
        "pool": 0.25,
    }


@LIBS
def test_each_redirect_hop_gets_what_is_left_then(lib: Any) -> None:
    clock = ManualClock()
    seen: list[str] = []

    def handler(request: Any) -> Any:
        seen.append(request.headers["x-request-timeout-ms"])
        clock.advance(0.3)  # each hop takes 300 ms
        if request.url.path == "/a":
            return lib.Response(307, headers={"location": "/b"})
        return lib.Response(200)

    with (
        _sync_client(lib, handler, follow_redirects=True) as client,
        deadline_scope(Deadline.after(2.0, clock=clock)),
    ):
        client.get("http://b.test/a")
    assert seen == ["2000", "1700"]


@LIBS
def test_each_retry_gets_what_is_left_then_and_none_once_it_is_gone(lib: Any) -> None:
    clock = ManualClock()
    seen: list[str] = []

    def handler(request: Any) -> Any:
        seen.append(request.headers["x-request-timeout-ms"])
        clock.advance(0.4)
        return lib.Response(503)

    def retry(client: Any) -> None:
        for _ in range(5):  # a naive retry loop: the hooks stop it when time is up
            client.get("http://b.test/flaky")

    with (
        _sync_client(lib, handler) as client,
        deadline_scope(Deadline.after(1.0, clock=clock), name="fetch"),
        pytest.raises(DeadlineExceeded) as info,
    ):
        retry(client)
    assert seen == ["1000", "600", "200"]  # the 4th attempt was never sent
    assert info.value.step == "fetch"
    assert "GET http://b.test/flaky not sent" in str(info.value)


@LIBS
@pytest.mark.anyio
async def test_nothing_is_sent_after_expiry(lib: Any) -> None:
    calls: list[Any] = []
    clock = ManualClock()
    d = Deadline.after(1.0, clock=clock)
    clock.advance(1.0)
    async with _async_client(lib, calls.append) as client:
        with deadline_scope(d), pytest.raises(DeadlineExceeded):
            await client.post("http://b.test/x", json={"a": 1})
    assert calls == []


@LIBS
@pytest.mark.anyio
async def test_our_504_comes_back_as_deadline_exceeded(lib: Any) -> None:
    def handler(request: Any) -> Any:
        return lib.Response(504, content=OURS_504, headers={"content-type": "application/json"})

    async with _async_client(lib, handler) as client:
        with pytest.raises(DeadlineExceeded) as info:
            await client.get("http://b.test/retrieve?token=secret")
    err = info.value
    assert err.step == "search"
    assert "GET http://b.test/retrieve answered 504" in str(err)
    assert "secret" not in str(err)
    assert err.outcome.terminal == "deadline_exceeded"

    with _sync_client(lib, handler) as sync_client, pytest.raises(DeadlineExceeded):
        sync_client.get("http://b.test/retrieve")

    async with _async_client(lib, handler) as client:  # streamed responses too
        with pytest.raises(DeadlineExceeded):
            async with client.stream("GET", "http://b.test/retrieve"):
                pass


@LIBS
def test_other_504s_stay_http_responses(lib: Any) -> None:
    def handler(request: Any) -> Any:
        return lib.Response(504, text="<html>Gateway Timeout</html>")

    with _sync_client(lib, handler) as client:
        response = client.get("http://b.test/x")
    assert response.status_code == 504
    assert response.text == "<html>Gateway Timeout</html>"


def test_hooks_use_configured_header_names() -> None:
    seen: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    wire = WireFormat(timeout_header="X-Budget-Ms", deadline_header=None)
    client = httpx.Client(
        transport=httpx.MockTransport(handler), event_hooks=deadline_hooks(wire=wire)
    )
    with client, deadline_scope(Deadline.after(1.0, clock=ManualClock())):
        client.get("http://b.test/x")
    assert seen[0].headers["x-budget-ms"] == "1000"
    assert "x-request-deadline" not in seen[0].headers


@pytest.mark.anyio
async def test_openai_sdk_gets_deadline_exceeded_and_does_not_retry() -> None:
    openai = pytest.importorskip("openai")
    sent: list[str] = []

    def handler(request: Any) -> Any:
        sent.append(request.headers["x-request-timeout-ms"])
        return httpx2.Response(504, content=OURS_504, headers={"content-type": "application/json"})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler), event_hooks=deadline_hooks())
    client = openai.AsyncOpenAI(api_key="test", base_url="http://llm.test/v1", http_client=http)
    messages = [{"role": "user", "content": "hi"}]
    with (
        deadline_scope(Deadline.after(5.0, clock=ManualClock())),
        pytest.raises(DeadlineExceeded) as info,
    ):
        await client.chat.completions.create(model="m", messages=messages)
    assert info.value.step == "search"
    assert sent == ["5000"]  # one request: a downstream deadline is not retried
    clock = ManualClock()
    expired = Deadline.after(1.0, clock=clock)
    clock.advance(1.0)
    with deadline_scope(expired), pytest.raises(DeadlineExceeded):
        await client.chat.completions.create(model="m", messages=messages)
    assert sent == ["5000"]  # nothing sent after expiry


@LIBS
def test_a_big_or_unsized_504_body_is_never_read_by_the_hook(lib: Any) -> None:
    def chunks() -> Any:
        yield OURS_504  # a deadline answer, but streamed without a length: not read

    def handler(request: Any) -> Any:
        if request.url.path == "/big":
            big = b'{"terminal": "deadline_exceeded", "pad": "' + b"x" * 10_000 + b'"}'
            return lib.Response(504, content=big, headers={"content-type": "application/json"})
        return lib.Response(504, content=chunks(), headers={"content-type": "application/json"})

    with _sync_client(lib, handler) as client, deadline_scope(Deadline.after(5)):
        assert client.get("http://b.test/big").status_code == 504
        with client.stream("GET", "http://b.test/unsized") as response:
            assert response.status_code == 504
            assert not response.is_stream_consumed  # left for the caller to read, or not
