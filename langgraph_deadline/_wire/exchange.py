"""One request under a deadline, watching for its client leaving without hoarding its body.

Only `receive` tells an ASGI app that its client left, so something must wait on it while the
handler works. The app reads the request itself at first; if it is still running after
`WATCH_AFTER` and not reading, a watcher task becomes the one reader of `receive` and hands the
app what it reads. Quick requests never pay for that task, nor for a timer: the requests
younger than `WATCH_AFTER` share one per event loop. (On event loops other than asyncio's, the
watcher starts at once, in a task group.)

Memory is bounded: the watcher keeps at most `READ_AHEAD` request messages the app has not
taken, plus the one in its hand, and stops calling `receive` until the app takes one. The
server's flow control then holds the rest of the body in the client's socket, as if there were
no middleware. The price: a client that leaves while a route is not reading a body it has not
finished sending is noticed when the route reads again, or at the deadline, not at once. (No
reader could do better: on the socket the disconnect comes behind the unread body.) A request
whose body has been read in full, the usual case, is watched at all times.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._core.context import CancelSignal, current_signal, deadline_scope, reset_signal, set_signal
from .._core.cut import Cut
from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.headers import error_body
from .young import Young, young_on

__all__ = ["READ_AHEAD", "WATCH_AFTER", "Exchange", "answer"]

log = logging.getLogger("langgraph_deadline.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_DISCONNECT: Message = {"type": "http.disconnect"}
WATCH_AFTER: Final = 0.02  # seconds a request runs before a task watches for its client leaving
READ_AHEAD: Final = 1  # request messages the watcher may hold that the app has not taken


class Exchange:
    """One request/response under a deadline, watching for the client leaving while it runs."""

    __slots__ = (
        "_complete",
        "_cut",
        "_cut_at",
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
        "_watch_at",
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
        # Made in `run`, for the event loop it runs on. On asyncio this library's `Cut`: an
        # anyio scope would cancel the clean-up a handler's LangGraph run leaves through (a
        # task it awaits) before it starts, and the tasks LangGraph started would run on.
        self._cut: anyio.CancelScope | Cut
        self._cut_at = math.inf  # loop time of the cut (asyncio: `_tick` cuts, not anyio)
        self._watch_at = math.inf  # loop time from which a watcher may start (asyncio)
        # The request's "stop" for work the handler starts in other tasks (LangGraph's nodes,
        # a streamed agent behind a StreamingResponse): cancelled on disconnect and at the cut.
        self._signal = CancelSignal(current_signal())
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._outbox: MemoryObjectSendStream[Message] | None = None
        self._inbox: MemoryObjectReceiveStream[Message] | None = None

    async def run(self, app: ASGIApp, deadline: Deadline | None, grace: float) -> None:
        started = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): watch from the start
            self._cut = anyio.CancelScope()
            if deadline is not None:
                self._cut.deadline = anyio.current_time() + deadline.remaining() + grace
            async with anyio.create_task_group() as tg:
                self._open_inbox()
                tg.start_soon(self._watcher)
                error, expired = await self._serve(app, deadline)
                tg.cancel_scope.cancel()
        else:
            task = asyncio.current_task(loop)
            assert task is not None  # an ASGI server runs each request in a task
            self._cut = Cut(loop, task)
            now = loop.time()
            self._watch_at = now + WATCH_AFTER
            if deadline is not None:
                self._cut_at = now + deadline.remaining() + grace
            young: Young | None = None
            if self._cut_at < self._watch_at:
                self._timer = loop.call_at(self._cut_at, self.tick, loop)
            else:
                young = young_on(loop)
                young.add(self, self._watch_at)
            try:
                error, expired = await self._serve(app, deadline)
            finally:
                if young is not None:
                    young.discard(self)
                if self._timer is not None:
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
        await answer(self._send, 504, body)

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

    def tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cut at the deadline; from `WATCH_AFTER` on, start the watcher unless the app is
        reading the request itself (it then sees a disconnect first hand); then wait for the
        next of the two. (On asyncio; anyio's deadline and a task group do this elsewhere.)"""
        self._timer = None
        if self._done:
            return
        now = loop.time()
        if now >= self._cut_at:
            self._cut.cancel()
            self._cut_at = math.inf
        if self._task is None and now >= self._watch_at:
            if self._reading:
                self._watch_at = now + WATCH_AFTER
            else:
                self._open_inbox()
                self._task = loop.create_task(self._watcher())
                self._watch_at = math.inf
        when = min(self._watch_at, self._cut_at)
        if when != math.inf:
            self._timer = loop.call_at(when, self.tick, loop)

    def _open_inbox(self) -> None:
        self._outbox, self._inbox = anyio.create_memory_object_stream[Message](READ_AHEAD)

    async def _watcher(self) -> None:
        assert self._outbox is not None
        with self._outbox:  # closed on leaving: the app takes what is left, then a disconnect
            while True:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self._left()
                    return
                await self._outbox.send(message)  # waits while the app has not taken enough

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


async def answer(send: Send, status: int, body: bytes) -> None:
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
