"""One response of `FakeOpenAIServer` in the OpenAI wire format: the wait before the first byte,
the JSON completion or the SSE stream of chunks (stopped at `max_tokens`), the JSON errors,
and the disconnect watch.

One module because the waits, the bodies and the disconnect watch of one response share its
state (what was sent, whether the client is gone): `Exchange`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._chat_script import words

if TYPE_CHECKING:
    from starlette.types import Message, Receive, Scope, Send

    from ._chat_record import ServedChatRequest
    from ._openai_server import FakeOpenAIServer

__all__ = ["AsgiEndpoint", "Exchange", "parse_body"]

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
