"""The core of the loopback chat servers of the testing kit (`FakeOpenAIServer`,
`FakeAnthropicServer`, `FakeOllamaServer`, `FakeGeminiServer`, `FakeBedrockServer`): a local
server that streams slowly and reports what it sent, and when.

A server runs in a background thread; each request gets the next scripted `ChatReply` and is
answered by an `Exchange`: the wait before the first byte, the JSON answer or the stream of
chunks (stopped at the request's output-token limit, a stall), the JSON errors, and the
disconnect watch. What differs between providers is only the wire format: each server names its
routes and its `Exchange` subclass says how an answer, a chunk and an error are written.

Starlette and uvicorn are imported only when a server starts, so importing this module (and
`langgraph_deadline.testing`) does not need them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute
    from starlette.types import Message, Receive, Scope, Send

from .._core.extras import require_extra
from ._background import Background, wait_until
from ._chat_record import ServedChatRequest, Wire, disconnects
from ._chat_script import ChatReply, check_seconds, words
from ._ports import unused_port_socket

__all__ = [
    "DEFAULT_CHUNK_INTERVAL",
    "AsgiEndpoint",
    "ChatServer",
    "Exchange",
    "parse_body",
]

DEFAULT_CHUNK_INTERVAL = 0.005
"""Seconds between two token chunks of a stream, unless the server or the reply says otherwise."""


class ChatServer(Background):
    """A chat API on loopback, in a background thread: the script, the lifecycle and what
    happened. Subclasses give `wire`, `exchange` (how a response is written) and `_routes`.

    Replies are served in order, one per request (retries included); when the script runs out,
    `default_reply` is served. Works with `with` and `async with`; the `await_*` helpers wait
    without blocking the event loop (use them in async tests: the client you just cancelled
    may need the loop to close its socket).
    """

    wire: ClassVar[Wire] = "openai"
    exchange: ClassVar[type[Exchange]]

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
    def url(self) -> str:
        """`http://host:port`: the server's root. Its port is one no earlier server of the
        process had: LangChain's provider packages keep an HTTP client per base URL for the
        life of the process, and a reused one would carry an old server's connections (of an
        event loop since closed) to this one."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        require_extra("asgi", type(self).__name__, "starlette", "uvicorn")
        import uvicorn

        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
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
            target=self._serve, args=(server, sock), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        end = time.monotonic() + 10
        while not server.started:
            if self._error is not None or not self._thread.is_alive() or time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"{type(self).__name__} did not start") from self._error
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
        return wait_until(self._changed, lambda: predicate(self.requests), timeout)

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

    def _routes(self) -> list[BaseRoute]:
        raise NotImplementedError

    def _endpoint(self) -> AsgiEndpoint:
        """The raw ASGI endpoint of the chat route(s)."""
        return AsgiEndpoint(self._chat)

    def _refusal(self, body: Mapping[str, Any]) -> str | None:
        """Why the provider would refuse `body` with a 400 before using the script, or None."""
        return None

    def _build_app(self) -> Starlette:
        from starlette.applications import Starlette

        return Starlette(routes=self._routes())

    def _notify(self, change: Callable[[], object] | None = None) -> None:
        with self._changed:
            if change is not None:
                change()
            self._changed.notify_all()

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            elif (why := self._refusal(body)) is not None:  # as the provider refuses it
                reply = ChatReply.error(400, why)
            else:
                reply = self._script.popleft() if self._script else self.default_reply
            path = request.url.path
            rec = ServedChatRequest(
                len(self.requests), started, body, headers, reply, path=path, wire=self.wire
            )
            self.requests.append(rec)
            self._changed.notify_all()
        await self.exchange(self, rec, receive, send).run()


# -- one response ------------------------------------------------------------------------------

ARGUMENT_PIECE = 8  # a tool call's JSON arguments are streamed in pieces of this many characters


class AsgiEndpoint:
    """Starlette serves an endpoint that is neither a function nor a method as a raw ASGI app."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def parse_body(raw: bytes) -> tuple[dict[str, Any], str | None]:
    """A request body as a JSON object, or `({}, why)` when it is not one (answered 400)."""
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError as exc:
        return {}, str(exc)
    if not isinstance(parsed, dict):
        return {}, "the body is not a JSON object"
    return parsed, None


class Exchange:
    """One response: waits, streams or answers, and watches for the client going away. A
    subclass writes the provider's wire format: `_error_body`, `_answer` (a whole answer),
    and a stream's `_opener`, `_chunks` (each one token chunk, counted) and `_tail`."""

    stream_type: ClassVar[str] = "text/event-stream"

    def __init__(
        self, server: ChatServer, rec: ServedChatRequest, receive: Receive, send: Send
    ) -> None:
        self.server = server
        self.rec = rec
        self.reply = rec.reply
        self.tokens = rec.reply.tokens_for(rec.body)  # a reply following a length hint: fewer
        self._receive = receive
        self._send = send
        self.gone = asyncio.Event()  # the client left, or the server is stopping
        self.finishing = False  # the last body part is on its way: a disconnect now is the end
        self.completion_id = f"fake{rec.index}"
        self.model = rec.model or server.model
        self.created = int(time.time())
        interval = self.reply.chunk_interval
        self.interval = server.chunk_interval if interval is None else interval

    async def run(self) -> None:
        listener = asyncio.ensure_future(self._listen())
        self.server._wakers.add(self.gone)
        if self.server._stopping:
            self.gone.set()
        try:
            if await self._pause(self.reply.delay):
                return
            if self.reply.is_error:
                await self._error()
            elif self.rec.stream:
                await self._stream()
            else:
                await self._complete()
        except OSError:  # a server that reports a dead client by failing the send
            self._mark_disconnected()
        finally:
            self.server._wakers.discard(self.gone)
            listener.cancel()
            await asyncio.wait([listener])  # unlike `await listener`, keeps our own cancellation
            if self.rec.ended is None and self.rec.disconnected is None:
                await self._cut()

    async def _cut(self) -> None:
        """The server is stopping with this response unfinished: end it (503 if not started)."""
        self.server._notify(lambda: setattr(self.rec, "cut_by_shutdown", True))
        self.finishing = True
        with contextlib.suppress(Exception):
            if self.rec.status is None:
                await self._start(503, "application/json", {})
                body = self._error_body(503, "The fake server stopped.")
                await self._send({"type": "http.response.body", "body": json.dumps(body).encode()})
            else:
                await self._send({"type": "http.response.body", "body": b""})

    async def _listen(self) -> None:
        """uvicorn answers `receive()` with `http.disconnect` as soon as the socket closes (and
        calling it is what makes uvicorn read the socket again, so it notices at all)."""
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if not self.finishing:
                    self._mark_disconnected()
                return

    def _mark_disconnected(self) -> None:
        if self.rec.disconnected is None and self.rec.ended is None:
            now = time.monotonic()
            self.server._notify(lambda: setattr(self.rec, "disconnected", now))
        self.gone.set()

    async def _pause(self, seconds: float) -> bool:
        """Sleep `seconds` (may be inf); True if the client left (or the server stops) first."""
        if self.gone.is_set():
            return True
        if seconds <= 0:
            await asyncio.sleep(0)  # let the disconnect listener run even at full speed
            return self.gone.is_set()
        try:
            async with asyncio.timeout(None if math.isinf(seconds) else seconds):
                await self.gone.wait()
        except TimeoutError:
            return False
        return True

    # -- sending ------------------------------------------------------------------------------

    async def _start(self, status: int, content_type: str, extra: Mapping[str, str]) -> None:
        headers = {
            "content-type": content_type,
            "x-request-id": f"req_fake{self.rec.index}",
            **{k.lower(): v for k, v in self.reply.headers.items()},
            **{k.lower(): v for k, v in extra.items()},
        }
        message: Message = {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        }
        await self._send(message)
        now = time.monotonic()

        def record() -> None:
            self.rec.status = status
            self.rec.first_byte = now

        self.server._notify(record)

    async def _body(self, data: bytes, *, more: bool, chunk: bool = False) -> bool:
        """Send a body part; False (nothing sent) if the client left or the server is stopping."""
        if self.gone.is_set():
            return False
        if not more:
            self.finishing = True
        await self._send({"type": "http.response.body", "body": data, "more_body": more})
        now = time.monotonic()
        if chunk:
            self.server._notify(lambda: self.rec.chunk_times.append(now))
        if not more:
            self.server._notify(lambda: setattr(self.rec, "ended", now))
        return True

    async def _error(self) -> None:
        status = self.reply.status
        message = self.reply.error_message or f"Scripted error {status}."
        extra = self._error_headers(status)
        if self.reply.retry_after is not None:
            extra["retry-after"] = f"{self.reply.retry_after:g}"
        await self._start(status, "application/json", extra)
        await self._body(json.dumps(self._error_body(status, message)).encode(), more=False)

    def _tool_calls(self) -> list[tuple[str, str, str]]:
        """(id, name, JSON arguments) of each tool call the reply makes."""
        return [
            (call.id or f"call_fake{self.rec.index}_{i}", call.name, call.arguments_json)
            for i, call in enumerate(self.reply.calls)
        ]

    def _prompt_tokens(self) -> int:
        body = self.rec.body
        messages = body.get("messages", body.get("contents"))
        if not isinstance(messages, list):
            return 0
        return sum(len(words(json.dumps(m))) for m in messages)

    async def _complete(self) -> None:
        """Not streamed: the whole answer after as long as streaming it would have taken (cut
        at the output-token limit, when the answer is text)."""
        calls = self._tool_calls()
        n_tokens = len(self.tokens) + sum(
            1 + math.ceil(len(args) / ARGUMENT_PIECE) for _, _, args in calls
        )
        limit = self.rec.max_tokens
        cut = limit is not None and n_tokens > limit
        tokens = self.tokens[:limit] if cut else self.tokens
        if cut:
            assert limit is not None
            n_tokens, calls = limit, []
        if await self._pause(n_tokens * self.interval):
            return
        payload = self._answer("".join(tokens), calls, cut, n_tokens)
        await self._start(200, "application/json", {})
        await self._body(json.dumps(payload).encode(), more=False)

    async def _stream(self) -> None:
        calls = self._tool_calls()
        await self._start(200, self.stream_type, {"cache-control": "no-cache"})
        opener = self._opener(calls)
        if opener and not await self._body(opener, more=True):
            return
        sent = 0
        chunks = self._chunks(calls)
        limit = self.rec.max_tokens
        for n, chunk in enumerate(chunks[:limit]):
            if n == self.reply.stall_after and await self._pause(self.reply.stall_for):
                return  # stalled, and the client left meanwhile
            if await self._pause(self.interval):
                return
            if not await self._body(chunk, more=True, chunk=True):
                return
            sent += 1
        cut = limit is not None and len(chunks) > limit
        await self._body(self._tail(calls, sent, cut), more=False)  # one write: no gap to race

    # -- the wire format ----------------------------------------------------------------------

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def _error_headers(self, status: int) -> dict[str, str]:
        """Headers an error answer carries besides `retry-after` (AWS's error type)."""
        return {}

    def _answer(
        self, text: str, calls: list[tuple[str, str, str]], cut: bool, n_tokens: int
    ) -> dict[str, Any]:
        """The JSON of a whole answer: `text`, then `calls`; `cut` at the token limit."""
        raise NotImplementedError

    def _opener(self, calls: list[tuple[str, str, str]]) -> bytes:
        """What a stream sends before its first token chunk (may be nothing)."""
        return b""

    def _chunks(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        """The stream's token chunks: the text's, then the tool calls'."""
        raise NotImplementedError

    def _tail(self, calls: list[tuple[str, str, str]], sent: int, cut: bool) -> bytes:
        """What a stream sends after its `sent` token chunks; `cut` at the token limit."""
        raise NotImplementedError
