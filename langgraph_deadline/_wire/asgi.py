"""`DeadlineASGIMiddleware`: each request served under its caller's deadline, capped."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .._core.deadline import SYSTEM_CLOCK, Clock, Deadline
from .._core.headers import WIRE, WireFormat, error_body, read
from .._core.records import Terminal
from .._core.validate import check_cap, check_fits, check_flag, check_seconds
from .exchange import Exchange, Receive, Scope, Send, answer

__all__ = ["DeadlineASGIMiddleware"]

log = logging.getLogger("langgraph_deadline.asgi")


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
    - A malformed deadline value: ignored with a logged warning (a valid one beside it still
      counts), or 400 when `strict`.

    Args:
        max_timeout: the most any request may get, in seconds; None for no cap (not advised).
        default_timeout: for requests that carry no deadline; None means `max_timeout`.
        reserve: seconds held back to answer the caller before its own deadline fires.
        max_skew: how far `X-Request-Deadline` may disagree with the relative header and still
            be used (seconds).
        strict: answer 400 to a malformed deadline header instead of ignoring it.
        wire: the header names.
        clock: the clock deadlines are read on (tests inject a skewed one).

    Memory stays bounded whatever the client sends: the middleware reads at most one request
    message ahead of the app (see `docs/security.md`).

    Raises:
        TypeError, ValueError: `app` not callable, a bad number, `default_timeout` above
            `max_timeout`, a `reserve` that takes the whole `max_timeout` or `default_timeout`
            (every request would get a 504), `strict` not a bool, `wire` not a `WireFormat`,
            `clock` not a clock.
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
        if not callable(app):
            raise TypeError(f"app must be an ASGI application (a callable), got {app!r:.60}")
        if not isinstance(wire, WireFormat):
            raise TypeError(f"wire must be a WireFormat, got {type(wire).__name__}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(
                f"clock must have monotonic() and time() methods, got {type(clock).__name__}"
            )
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
        # A reserve that takes the whole of either limit would answer every request 504.
        check_fits(self.max_timeout, reserve=self.reserve, needs={}, name="max_timeout")
        if default_timeout is not None:
            check_fits(default, reserve=self.reserve, needs={}, name="default_timeout")
        self.max_skew = check_seconds(max_skew, "max_skew")
        self.strict = check_flag(strict, "strict")
        self.wire = wire
        self.clock = SYSTEM_CLOCK if clock is None else clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = f"{scope.get('method', '')} {scope.get('path', '')}"
        got = read(scope["headers"], wire=self.wire, max_skew=self.max_skew, clock=self.clock)
        if got.errors:
            detail = "; ".join(got.errors)
            if self.strict:
                body = json.dumps({"error": "bad_deadline_header", "detail": detail})
                await answer(send, 400, body.encode())
                return
            log.warning("%s: ignored a malformed deadline header: %s", where, detail)
        if got.skew is not None:
            log.debug("%s: absolute deadline %+.3f s off: ignored", where, got.skew)
        # `clamp` in seconds: the caller's time left (or the default), never above the cap.
        received = got.deadline
        left = self.default_timeout if received is None else received.remaining()
        if self.max_timeout is not None and (left is None or self.max_timeout < left):
            left = self.max_timeout
        handler: Deadline | None = None
        if left is not None:
            left -= self.reserve
            if left <= 0.0:
                detail = f"no time left when {where} arrived"
                log.info("%s: %s, handler not run", where, detail)
                await answer(send, 504, error_body(Terminal.DEADLINE_EXCEEDED, None, detail))
                return
            # The handler's code sees `deadline - reserve` and ends on its own there, with its
            # own outcome; a handler that does not is cut half a reserve later. Either way the
            # answer leaves before the caller's deadline.
            handler = Deadline._after(left, self.clock)
        await Exchange(scope, receive, send, where).run(self.app, handler, self.reserve / 2)

    def __repr__(self) -> str:
        return (
            f"DeadlineASGIMiddleware(max_timeout={self.max_timeout!r}, "
            f"default_timeout={self.default_timeout!r}, reserve={self.reserve!r})"
        )
