"""`DeadlineASGIMiddleware`: each request served under its caller's deadline, capped."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._core.cancel import CancelSignal, current_signal, reset_signal, set_signal
from .._core.clock import SYSTEM_CLOCK, Clock
from .._core.context import deadline_scope
from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.records import Terminal
from .._core.validate import check_cap, check_seconds
from .format import WIRE, HeaderError, WireFormat, clamp, error_body, read

__all__ = ["DeadlineASGIMiddleware"]

log = logging.getLogger("langgraph_deadline.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_DISCONNECT: Message = {"type": "http.disconnect"}
WATCH_AFTER: Final = 0.02  # seconds a request runs before a task watches for its client leaving


class DeadlineASGIMiddleware:
    """Serve every HTTP request under one deadline: the caller's, capped by the server's maximum.

    The deadline is read from the request headers (see `langgraph_deadline.http.from_headers`),
    or is `default_timeout` from now when there is none, and is never later than `max_timeout`
    from now: a client cannot buy more time than the server allows. The handler gets that
    deadline minus `reserve` (the time kept to answer), in context (so a graph run, an httpx
    call or a tool started in the handler inherits it with no extra code) and as a cancel scope.

    - No time left on arrival: 504 at once, the handler does not run.
    - The deadline passes, or the handler raises `DeadlineExceeded`: 504 with a short JSON body
      `{"terminal": "deadline_exceeded", "step": ..., "detail": ...}`. If the response had
      already started, the connection is cut instead (a status cannot be taken back).
    - The client disconnects: the handler is cancelled (its steps end as `cancelled`).
    - A malformed deadline header: ignored with a logged warning, or 400 when `strict`.

    Args:
        max_timeout: the most any request may get, in seconds; None for no cap (not advised).
        default_timeout: for requests that carry no deadline; None means `max_timeout`.
        reserve: seconds held back to answer the caller before its own deadline fires.
        max_skew: how far `X-Request-Deadline` may disagree with the relative header and still
            be used (seconds).
        strict: answer 400 to a malformed deadline header instead of ignoring it.
        wire: the header names.
        clock: the clock deadlines are read on (tests inject a skewed one).

    Raises:
        TypeError, ValueError: a bad number, or `default_timeout` above `max_timeout`.
    """

    def __init__(
        self,
        app: Callable[[Any, Any, Any], Awaitable[None]],
        *,
        max_timeout: float | None,
        default_timeout: float | None = None,
        reserve: float = 0.05,
        max_skew: float = 1.0,
        strict: bool = False,
        wire: WireFormat = WIRE,
        clock: Clock | None = None,
    ) -> None:
        self.app = app
        self.max_timeout = check_cap(max_timeout, "max_timeout")
        default = check_cap(default_timeout, "default_timeout")
        if default is None:
            default = self.max_timeout
        elif self.max_timeout is not None and default > self.max_timeout:
            raise ValueError(
                f"default_timeout ({default:g} s) must not exceed max_timeout "
                f"({self.max_timeout:g} s)"
            )
        self.default_timeout = default
        self.reserve = check_seconds(reserve, "reserve")
        self.max_skew = check_seconds(max_skew, "max_skew")
        self.strict = strict
        self.wire = wire
        self.clock = SYSTEM_CLOCK if clock is None else clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = f"{scope.get('method', '')} {scope.get('path', '')}"
        try:
            got = read(scope["headers"], wire=self.wire, max_skew=self.max_skew, clock=self.clock)
        except HeaderError as exc:
            if self.strict:
                body = json.dumps({"error": "bad_deadline_header", "detail": str(exc)})
                await _answer(send, 400, body.encode())
                return
            log.warning("%s: ignored a malformed deadline header: %s", where, exc)
            received = None
        else:
            received = got.deadline
            if got.skew is not None:
                log.debug("%s: absolute deadline %+.3f s off: ignored", where, got.skew)
        deadline = clamp(
            received,
            max_timeout=self.max_timeout,
            default_timeout=self.default_timeout,
            clock=self.clock,
        )
        handler: Deadline | None = None
        if deadline is not None:
            left = deadline.remaining() - self.reserve
            if left <= 0.0:
                detail = f"no time left when {where} arrived"
                log.info("%s: %s, handler not run", where, detail)
                await _answer(send, 504, error_body(Terminal.DEADLINE_EXCEEDED, None, detail))
                return
            # The handler's code sees `deadline - reserve` and ends on its own there, with its
            # own outcome; a handler that does not is cut half a reserve later. Either way the
            # answer leaves before the caller's deadline.
            handler = Deadline.after(left, clock=self.clock)
        await _Exchange(scope, receive, send, where).run(self.app, handler, self.reserve / 2)

    def __repr__(self) -> str:
        return (
            f"DeadlineASGIMiddleware(max_timeout={self.max_timeout!r}, "
            f"default_timeout={self.default_timeout!r}, reserve={self.reserve!r})"
        )


class _Exchange:
    """One request/response under a deadline, watching for the client leaving while it runs.

    Only `receive` tells an ASGI app that its client left, so something must be waiting on it
    while the handler works. The app reads the request itself at first; if it is still running
    after `WATCH_AFTER` and not reading, a watcher task becomes the one reader of `receive` and
    hands the app what it reads. Quick requests never pay for that task. (On event loops other
    than asyncio's, the watcher starts at once, in a task group.)
    """

    __slots__ = (
        "_complete",
        "_cut",
        "_disconnected",
        "_done",
        "_inbox",
        "_outbox",
        "_reading",
        "_receive",
        "_scope",
        "_send",
        "_signal",
        "_started",
        "_task",
        "_timer",
        "_where",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send, where: str) -> None:
        self._scope = scope
        self._receive = receive
        self._send = send
        self._where = where
        self._started = False  # the response has started: a 504 is no longer possible
        self._complete = False  # the response is complete: a disconnect is no cancellation
        self._disconnected = False
        self._reading = False  # the app is waiting on `receive` itself
        self._done = False
        self._cut = anyio.CancelScope()
        # The request's "stop" for work the handler starts in other tasks (LangGraph's nodes,
        # a streamed agent behind a StreamingResponse): cancelled on disconnect and at the cut.
        self._signal = CancelSignal(current_signal())
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._outbox: MemoryObjectSendStream[Message] | None = None
        self._inbox: MemoryObjectReceiveStream[Message] | None = None

    async def run(self, app: ASGIApp, deadline: Deadline | None, grace: float) -> None:
        started = time.monotonic()
        if deadline is not None:
            self._cut.deadline = anyio.current_time() + deadline.remaining() + grace
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): watch from the start
            async with anyio.create_task_group() as tg:
                self._open_inbox()
                tg.start_soon(self._watcher)
                error, expired = await self._serve(app, deadline)
                tg.cancel_scope.cancel()
        else:
            self._timer = loop.call_later(WATCH_AFTER, self._watch, loop)
            try:
                error, expired = await self._serve(app, deadline)
            finally:
                self._timer.cancel()
                if self._task is not None:
                    self._task.cancel()
        elapsed = time.monotonic() - started
        if self._disconnected:
            log.info("%s: cancelled, the client disconnected after %.3f s", self._where, elapsed)
            if error is not None:
                log.debug("%s: the cancelled handler raised", self._where, exc_info=error)
            return
        if error is not None:
            raise error
        if expired is None and self._cut.cancelled_caught:
            expired = DeadlineExceeded(
                f"deadline exceeded in {self._where}", deadline=deadline, step=self._where
            )
        if expired is None:
            return
        if self._started:
            log.info("%s: deadline exceeded after %.3f s mid-response: cut", self._where, elapsed)
            return  # the server closes a response the app did not finish
        log.info("%s: deadline exceeded after %.3f s: 504", self._where, elapsed)
        body = error_body(expired.outcome.terminal, expired.step, str(expired))
        await _answer(self._send, 504, body)

    async def _serve(
        self, app: ASGIApp, deadline: Deadline | None
    ) -> tuple[Exception | None, DeadlineExceeded | None]:
        """Run the app under the deadline; its error, or the deadline error, is returned."""
        token = set_signal(self._signal)
        try:
            with deadline_scope(deadline, name=self._where), self._cut:
                await app(self._scope, self._take, self._give)
        except DeadlineExceeded as exc:
            return None, exc
        except Exception as exc:
            return exc, None
        finally:
            self._done = True
            reset_signal(token)
            if self._cut.cancel_called:
                self._signal.cancel("caller" if self._disconnected else "deadline")
        return None, None

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the watcher, unless the app is reading the request itself (it then sees a
        disconnect first hand): then try again later."""
        if self._done:
            return
        if self._reading:
            self._timer = loop.call_later(WATCH_AFTER, self._watch, loop)
            return
        self._open_inbox()
        self._task = loop.create_task(self._watcher())

    def _open_inbox(self) -> None:
        self._outbox, self._inbox = anyio.create_memory_object_stream[Message](math.inf)

    async def _watcher(self) -> None:
        assert self._outbox is not None
        with self._outbox:
            while True:
                message = await self._receive()
                self._outbox.send_nowait(message)
                if message["type"] == "http.disconnect":
                    self._left()
                    return

    def _left(self) -> None:
        if not self._complete:
            self._disconnected = True
            self._cut.cancel()
            self._signal.cancel("caller")

    async def _take(self) -> Message:
        if self._inbox is not None:  # the watcher reads for the app
            try:
                return await self._inbox.receive()
            except anyio.EndOfStream:
                return dict(_DISCONNECT)
        self._reading = True
        try:
            message = await self._receive()
        finally:
            self._reading = False
        if message["type"] == "http.disconnect":
            self._left()
        return message

    async def _give(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self._started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self._complete = True
        await self._send(message)


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
