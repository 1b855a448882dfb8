"""A local OpenAI-compatible chat server that streams slowly and reports what it sent, and when.

`ChatOpenAI(base_url=server.base_url, api_key="test")` talks to it for real (HTTP over loopback,
the OpenAI SDK's own SSE parsing and retries). The test scripts the replies -- text, tool calls,
errors, a slow first byte -- and afterwards asks the server the questions a deadline test must
ask: did the client go away, when, and how many token chunks were sent after a given instant?

Each response is an `Exchange`, in the OpenAI wire format: the wait before the first byte, the
JSON completion or the SSE stream of chunks (stopped at `max_tokens`), the JSON errors, and the
disconnect watch. The server and its responses share one state (the requests seen, what was
sent, whether the client is gone or the server is stopping).

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
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.types import Message, Receive, Scope, Send

from .._core.extras import require_extra
from ._background import Background
from ._chat_record import ServedChatRequest, disconnects
from ._chat_script import ChatReply, check_seconds, words
from ._ports import unused_port_socket

__all__ = [
    "DEFAULT_CHUNK_INTERVAL",
    "AsgiEndpoint",
    "Exchange",
    "FakeOpenAIServer",
    "invalid_messages",
    "parse_body",
]

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
    `default_reply` is served. As OpenAI does, a request whose `messages` leave a tool call
    unanswered (or answer one never made) is refused with a 400, without using the script.
    Works with `with` and `async with`; the `await_*` helpers wait without blocking the event
    loop (use them in async tests: the client you just cancelled may need the loop to close
    its socket).
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
            elif (why := invalid_messages(body)) is not None:  # as OpenAI refuses a history
                reply = ChatReply.error(400, why)
            else:
                reply = self._script.popleft() if self._script else self.default_reply
            rec = ServedChatRequest(len(self.requests), started, body, headers, reply)
            self.requests.append(rec)
            self._changed.notify_all()
        await Exchange(self, rec, receive, send).run()


# -- one response ------------------------------------------------------------------------------

_ARGUMENT_PIECE = 8  # a tool call's JSON arguments are streamed in pieces of this many characters


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


def invalid_messages(body: Mapping[str, Any]) -> str | None:
    """Why OpenAI would refuse the body's `messages` with a 400, as it words it, or None.

    The history rules a real provider checks: an assistant message with `tool_calls` is
    followed by a `tool` message answering each call, before any other message; a `tool`
    message answers a call of the assistant message before it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    open_calls: dict[str, int] = {}  # an open call's id -> the index of the message that made it
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return (
                    f"Invalid parameter: messages.[{i}]: messages with role 'tool' must be a "
                    "response to a preceeding message with 'tool_calls'."
                )
            del open_calls[message["tool_call_id"]]
            continue
        if open_calls:
            return _unanswered(open_calls)
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                    open_calls[call["id"]] = i
    return _unanswered(open_calls) if open_calls else None


def _unanswered(open_calls: Mapping[str, int]) -> str:
    return (
        f"messages.[{min(open_calls.values())}]: An assistant message with 'tool_calls' must be "
        "followed by tool messages responding to each 'tool_call_id'. The following "
        f"tool_call_ids did not have response messages: {', '.join(open_calls)}"
    )


class Exchange:
    """One response: waits, streams or answers, and watches for the client going away."""

    def __init__(
        self, server: FakeOpenAIServer, rec: ServedChatRequest, receive: Receive, send: Send
    ) -> None:
        self.server = server
        self.rec = rec
        self.reply = rec.reply
        self._receive = receive
        self._send = send
        self.gone = asyncio.Event()  # the client left, or the server is stopping
        self.finishing = False  # the last body part is on its way: a disconnect now is the end
        self.completion_id = f"chatcmpl-fake{rec.index}"
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
                body = {"error": {"message": "The fake server stopped.", "type": "server_error"}}
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
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_exceeded",
        }.get(status, "server_error")
        message = self.reply.error_message or f"Scripted error {status}."
        payload = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
        extra = {}
        if self.reply.retry_after is not None:
            extra["retry-after"] = f"{self.reply.retry_after:g}"
        await self._start(status, "application/json", extra)
        await self._body(json.dumps(payload).encode(), more=False)

    def _tool_calls(self) -> list[tuple[str, str, str]]:
        return [
            (call.id or f"call_fake{self.rec.index}_{i}", call.name, call.arguments_json)
            for i, call in enumerate(self.reply.calls)
        ]

    def _usage(self, prompt: int, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _prompt_tokens(self) -> int:
        messages = self.rec.body.get("messages")
        if not isinstance(messages, list):
            return 0
        return sum(len(words(json.dumps(m))) for m in messages)

    async def _complete(self) -> None:
        """Non-streaming: the whole answer after as long as streaming it would have taken (cut
        at `max_tokens` text tokens, when the answer is text)."""
        calls = self._tool_calls()
        n_tokens = len(self.reply.tokens) + sum(
            1 + math.ceil(len(args) / _ARGUMENT_PIECE) for _, _, args in calls
        )
        limit = self.rec.max_tokens
        cut = limit is not None and n_tokens > limit
        tokens = self.reply.tokens[:limit] if cut else self.reply.tokens
        if cut:
            assert limit is not None
            n_tokens, calls = limit, []
        if await self._pause(n_tokens * self.interval):
            return
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(tokens) or (None if calls else ""),
            "refusal": None,
        }
        if calls:
            message["tool_calls"] = [
                {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
                for id_, name, args in calls
            ]
        payload = {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "length" if cut else "tool_calls" if calls else "stop",
                }
            ],
            "usage": self._usage(self._prompt_tokens(), n_tokens),
        }
        await self._start(200, "application/json", {})
        await self._body(json.dumps(payload).encode(), more=False)

    def _event(
        self, delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None
    ) -> bytes:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        chunk: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    @property
    def include_usage(self) -> bool:
        options = self.rec.body.get("stream_options")
        return isinstance(options, dict) and bool(options.get("include_usage"))

    async def _stream(self) -> None:
        calls = self._tool_calls()
        await self._start(200, "text/event-stream", {"cache-control": "no-cache"})
        opener = {"role": "assistant", "content": None if calls and not self.reply.tokens else ""}
        if not await self._body(self._event(opener), more=True):
            return
        sent = 0
        deltas: list[dict[str, Any]] = [{"content": token} for token in self.reply.tokens]
        for i, (id_, name, args) in enumerate(calls):
            head = {"index": i, "id": id_, "type": "function"}
            deltas.append({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
            for p in range(0, len(args), _ARGUMENT_PIECE):
                piece = args[p : p + _ARGUMENT_PIECE]
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        limit = self.rec.max_tokens
        for delta in deltas[:limit]:
            if await self._pause(self.interval):
                return
            if not await self._body(self._event(delta), more=True, chunk=True):
                return
            sent += 1
        finish = (
            "length"
            if limit is not None and len(deltas) > limit
            else "tool_calls"
            if calls
            else "stop"
        )
        tail = self._event({}, finish)
        if self.include_usage:
            tail += self._event(None, usage=self._usage(self._prompt_tokens(), sent))
        await self._body(tail + b"data: [DONE]\n\n", more=False)  # one write: no gap to race
