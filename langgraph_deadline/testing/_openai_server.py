"""A local OpenAI-compatible chat server that streams slowly and reports what it sent, and when.

`ChatOpenAI(base_url=server.base_url, api_key="test")` talks to it for real (HTTP over loopback,
the OpenAI SDK's own SSE parsing and retries). The test scripts the replies -- text, tool calls,
errors, a slow first byte -- and afterwards asks the server the questions a deadline test must
ask: did the client go away, when, and how many token chunks were sent after a given instant?

Starlette and uvicorn are imported only when a server starts, so importing this module (and
`langgraph_deadline.testing`) does not need them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.types import Receive, Scope, Send

from .._core.extras import require_extra
from ._background import Background
from ._chat_record import ServedChatRequest, disconnects
from ._chat_script import ChatReply, check_seconds
from ._openai_wire import AsgiEndpoint, Exchange, parse_body
from ._ports import unused_port_socket

__all__ = ["DEFAULT_CHUNK_INTERVAL", "FakeOpenAIServer"]

DEFAULT_CHUNK_INTERVAL = 0.005
"""Seconds between two token chunks of a stream, unless the server or the reply says otherwise."""


class FakeOpenAIServer(Background):
    """An OpenAI-compatible `POST /v1/chat/completions` on loopback, in a background thread.

    ```python
    with FakeOpenAIServer([ChatReply.counting(100)], chunk_interval=0.05) as server:
        model = ChatOpenAI(base_url=server.base_url, api_key="test", streaming=True)
        ...  # cancel the call after 0.5 s
        assert server.wait_disconnected(1.0)
        assert server.chunks_sent_after(server.requests[0].disconnected) == 0
    ```

    Replies are served in order, one per request (retries included); when the script runs out,
    `default_reply` is served. Works with `with` and `async with`; the `await_*` helpers wait
    without blocking the event loop (use them in async tests: the client you just cancelled may
    need the loop to close its socket).
    """

    def __init__(
        self,
        replies: Iterable[ChatReply] = (),
        *,
        chunk_interval: float = DEFAULT_CHUNK_INTERVAL,
        default_reply: ChatReply | None = None,
        host: str = "127.0.0.1",
        model: str = "fake-model",
    ) -> None:
        self.chunk_interval = check_seconds("chunk_interval", chunk_interval)
        self.default_reply = default_reply or ChatReply.text("This is the default reply.")
        self.host = host
        self.port = 0
        self.model = model
        self.requests: list[ServedChatRequest] = []
        self._script: deque[ChatReply] = deque(replies)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._wakers: set[asyncio.Event] = set()  # one per open response, set on shutdown
        self._stopping = False

    # -- script -------------------------------------------------------------------------------

    def enqueue(self, *replies: ChatReply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending_replies(self) -> int:
        """Scripted replies not served yet."""
        with self._lock:
            return len(self._script)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """For `ChatOpenAI(base_url=...)` / `openai.OpenAI(base_url=...)`: ends in `/v1`. Its
        port is one no earlier server of the process had: langchain-openai keeps an HTTP
        client per base URL for the life of the process, and a reused one would carry an old
        server's connections (of an event loop since closed) to this one."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        require_extra("asgi", "FakeOpenAIServer", "starlette", "uvicorn")
        import uvicorn

        if self._thread is not None:
            raise RuntimeError("FakeOpenAIServer is already started")
        sock = unused_port_socket(self.host)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._build_app(),
            log_config=None,  # leave the process's logging alone
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        self._server = server
        self._stopping = False
        self._thread = threading.Thread(
            target=self._serve, args=(server, sock), name="FakeOpenAIServer", daemon=True
        )
        self._thread.start()
        end = time.monotonic() + 10
        while not server.started:
            if self._error is not None or not self._thread.is_alive() or time.monotonic() > end:
                self.stop()
                raise RuntimeError("FakeOpenAIServer did not start") from self._error
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        server, loop, thread = self._server, self._loop, self._thread
        if server is None or thread is None:
            return
        self._stopping = True
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake_all)
        server.should_exit = True
        thread.join(10)
        if thread.is_alive():  # pragma: no cover - a stuck connection
            server.force_exit = True
            thread.join(5)
        self._server = self._loop = self._thread = None

    def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve(sockets=[sock]))
        except BaseException as exc:  # reported by start()
            self._error = exc
        finally:
            sock.close()
            loop.close()

    def _wake_all(self) -> None:
        for waker in list(self._wakers):
            waker.set()

    # -- what happened ------------------------------------------------------------------------

    def wait_for(
        self, predicate: Callable[[list[ServedChatRequest]], bool], timeout: float
    ) -> bool:
        """Block until `predicate(requests)` holds; False if it did not within `timeout` s."""
        end = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.requests):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    # The async waits take `timeout` like their sync twins (and return False, not raise).
    async def await_for(
        self,
        predicate: Callable[[list[ServedChatRequest]], bool],
        timeout: float,
    ) -> bool:
        """`wait_for` for async code: polls every 2 ms, never blocks the event loop."""
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                if predicate(self.requests):
                    return True
            if time.monotonic() >= end:
                return False
            await anyio.sleep(0.002)

    def wait_disconnected(self, timeout: float, *, count: int = 1) -> bool:
        """Until at least `count` requests saw their client go away before the end."""
        return self.wait_for(lambda rs: disconnects(rs) >= count, timeout)

    async def await_disconnected(self, timeout: float, *, count: int = 1) -> bool:
        return await self.await_for(lambda rs: disconnects(rs) >= count, timeout)

    def wait_requests(self, count: int, timeout: float) -> bool:
        """Until at least `count` requests have arrived."""
        return self.wait_for(lambda rs: len(rs) >= count, timeout)

    async def await_requests(self, count: int, timeout: float) -> bool:
        return await self.await_for(lambda rs: len(rs) >= count, timeout)

    def wait_chunks(self, count: int, timeout: float) -> bool:
        """Until at least `count` token chunks have been sent, over all requests."""
        return self.wait_for(lambda rs: sum(r.chunks_sent for r in rs) >= count, timeout)

    async def await_chunks(self, count: int, timeout: float) -> bool:
        return await self.await_for(lambda rs: sum(r.chunks_sent for r in rs) >= count, timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Until no request is open (each one ended or saw its client go away)."""
        return self.wait_for(lambda rs: not any(r.open for r in rs), timeout)

    async def await_idle(self, timeout: float) -> bool:
        return await self.await_for(lambda rs: not any(r.open for r in rs), timeout)

    def open_requests(self) -> list[ServedChatRequest]:
        """Requests still being answered: neither ended nor disconnected."""
        with self._lock:
            return [r for r in self.requests if r.open]

    def requests_after(self, t: float) -> list[ServedChatRequest]:
        """Requests that arrived after monotonic instant `t` (e.g. retries after a deadline)."""
        with self._lock:
            return [r for r in self.requests if r.started > t]

    def chunks_sent_after(self, t: float) -> int:
        """Token chunks sent after monotonic instant `t`, over all requests."""
        with self._lock:
            return sum(r.chunks_sent_after(t) for r in self.requests)

    # -- serving ------------------------------------------------------------------------------

    def _build_app(self) -> Starlette:
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def models(_request: Any) -> JSONResponse:
            data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}]
            return JSONResponse({"object": "list", "data": data})

        return Starlette(
            routes=[
                Route(
                    "/v1/chat/completions", AsgiEndpoint(self._chat_completions), methods=["POST"]
                ),
                Route("/v1/models", models, methods=["GET"]),
            ]
        )

    def _notify(self, change: Callable[[], object] | None = None) -> None:
        with self._changed:
            if change is not None:
                change()
            self._changed.notify_all()

    async def _chat_completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A raw ASGI endpoint: it owns `receive`, so it can hear the disconnect at once."""
        from starlette.requests import ClientDisconnect, Request

        started = time.monotonic()
        request = Request(scope, receive)
        try:
            raw = await request.body()
        except ClientDisconnect:  # gone before the request was even complete: not recorded
            return
        headers = {k.lower(): v for k, v in request.headers.items()}
        body, bad = parse_body(raw)
        with self._changed:
            if bad is not None:  # answered 400; the script is not consumed
                reply = ChatReply.error(400, f"invalid JSON body: {bad}")
            else:
                reply = self._script.popleft() if self._script else self.default_reply
            rec = ServedChatRequest(len(self.requests), started, body, headers, reply)
            self.requests.append(rec)
            self._changed.notify_all()
        await Exchange(self, rec, receive, send).run()
