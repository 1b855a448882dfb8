"""httpx event hooks: the deadline out with each request, a 504 back as `DeadlineExceeded`."""

from __future__ import annotations

import logging
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any

from .._core.context import current_deadline, current_scopes
from .._core.deadline import SYSTEM_CLOCK, Clock, Deadline
from .._core.errors import DeadlineExceeded
from .._core.headers import (
    BODY_MAX,
    WIRE,
    HeaderError,
    WireFormat,
    clamp,
    outgoing,
    parse_error_body,
    read,
)
from .._core.records import Terminal
from .._core.stall import current_watch, idle, progress
from .._core.validate import check_cap, check_flag, check_seconds, show

__all__ = ["WireFormat", "deadline_hooks", "from_headers", "to_headers"]

EventHook = Callable[[Any], Awaitable[None]]

log = logging.getLogger("langgraph_deadline.http")


def deadline_hooks(*, wire: WireFormat = WIRE) -> dict[str, list[EventHook]]:
    """Event hooks for an httpx or httpx2 client, sync or async: `Client(event_hooks=...)`.

    Before each request is sent (redirects and retries included), with the deadline in context:
    - no time left (under 1 ms): `DeadlineExceeded` is raised and nothing is sent;
    - otherwise the deadline headers are set and the request's connect, read, write and pool
      timeouts are cut to the time left. Each is a limit per I/O wait: in async code the
      enclosing deadline scope is what cancels a response that trickles in past the deadline.
    Without a deadline in context a request goes out untouched.

    In a step with an idle cap (`deadline_tool(idle_cap=)`), the response and each chunk of
    its body are progress of that step: a body that stops arriving is cut as stalled.

    After each response: a 504 whose JSON body says `"terminal": "deadline_exceeded"` (what
    `DeadlineASGIMiddleware` answers) raises `DeadlineExceeded` naming the downstream step.

    To keep hooks of your own, add them to the lists returned.
    """
    return {"request": [_OnRequest(wire)], "response": [_OnResponse()]}


def to_headers(deadline: Deadline | None = None, *, wire: WireFormat = WIRE) -> dict[str, str]:
    """The deadline headers for a request sent now: `deadline`, or the one in context.

    For clients without event hooks. Empty when there is no deadline. Call it right before
    sending: the time left is computed when it is called.

    Raises:
        DeadlineExceeded: no time is left (under 1 ms): do not send.
        TypeError: `deadline` is not a `Deadline`.
    """
    if deadline is not None and not isinstance(deadline, Deadline):
        raise TypeError(f"deadline must be a Deadline or None, got {type(deadline).__name__}")
    d = current_deadline() if deadline is None else deadline
    if d is None:
        return {}
    _, headers = outgoing(d, wire)
    if not headers:
        raise _refused(d, "request not sent")
    return headers


def from_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    *,
    max_timeout: float | None = None,
    max_skew: float = 1.0,
    strict: bool = True,
    wire: WireFormat = WIRE,
    clock: Clock | None = None,
) -> Deadline | None:
    """The deadline an incoming request asks for, never later than `max_timeout` from now.

    The relative headers rule (`X-Request-Timeout-Ms`, `grpc-timeout`), the earliest of them;
    `X-Request-Deadline` only makes it earlier, and only when it agrees within `max_skew`
    seconds (else it is ignored: the clocks disagree); alone, it is taken as it is. A request
    that carries no deadline gets `max_timeout` from now, or None when `max_timeout` is None.
    A malformed value raises when `strict`; otherwise it is ignored with a logged warning and
    the earliest valid value counts: a bad value never extends a deadline nor voids a good one.
    For servers that `DeadlineASGIMiddleware` does not fit.

    Raises:
        ValueError: `strict` and a deadline value that does not follow the wire format (the
            message says which and why); `max_timeout` or `max_skew` not a finite number >= 0.
        TypeError: `headers` not a mapping or (name, value) pairs; a bad option type.
    """
    cap = check_cap(max_timeout, "max_timeout")
    skew = check_seconds(max_skew, "max_skew")
    strict = check_flag(strict, "strict")
    if not isinstance(wire, WireFormat):
        raise TypeError(f"wire must be a WireFormat, got {type(wire).__name__}")
    if clock is not None and not isinstance(clock, Clock):
        raise TypeError(f"clock must have monotonic() and time() methods, got {show(clock)}")
    clk = SYSTEM_CLOCK if clock is None else clock
    got = read(_pairs(headers), wire=wire, max_skew=skew, clock=clk)
    if got.errors:
        if strict:
            raise HeaderError("; ".join(got.errors))
        log.warning("ignored a malformed deadline header: %s", "; ".join(got.errors))
    return clamp(got.deadline, max_timeout=cap, default_timeout=None, clock=clk)


def _pairs(headers: object) -> list[tuple[str | bytes, str | bytes]]:
    """`headers` as a list of (name, value) pairs, or a TypeError saying what is wrong."""
    if isinstance(headers, Mapping):
        items: list[Any] = list(headers.items())
    elif isinstance(headers, Iterable) and not isinstance(headers, str | bytes):
        items = list(headers)
    else:
        raise TypeError(
            "headers must be a mapping of names to values or (name, value) pairs, "
            f"got {type(headers).__name__}: {show(headers)}"
        )
    for item in items:
        if not (
            isinstance(item, tuple | list)
            and len(item) == 2
            and all(isinstance(part, str | bytes) for part in item)
        ):
            raise TypeError(f"each header must be a (name, value) pair of str, got {show(item)}")
    return [(name, value) for name, value in items]


# -- the hooks ------------------------------------------------------------------------------------


class _Done:
    """An awaitable that is already done: lets one hook serve sync and async clients alike."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


class _OnRequest:
    __slots__ = ("_wire",)

    def __init__(self, wire: WireFormat) -> None:
        self._wire = wire

    def __call__(self, request: Any) -> Awaitable[None]:
        d = current_deadline()
        if d is None:
            return _DONE
        left, headers = outgoing(d, self._wire)
        if not headers:
            raise _refused(d, f"{request.method} {_where(request.url)} not sent")
        for name, value in headers.items():
            request.headers[name] = value  # (cheaper than .update() in httpx)
        timeout = request.extensions.get("timeout")
        if timeout:
            request.extensions["timeout"] = {
                k: left if v is None or v > left else v for k, v in timeout.items()
            }
        return _DONE

    def __repr__(self) -> str:
        return f"deadline request hook ({self._wire.timeout_header})"


class _OnResponse:
    __slots__ = ()

    def __call__(self, response: Any) -> Awaitable[None]:
        if current_watch() is not None:  # a step with an idle cap: its body's bytes are progress
            progress()
            response.stream = _watched(response)
        if response.status_code != 504 or not _small_json(response.headers):
            return _DONE  # only a short JSON body can be a deadline answer: never read a big one
        if not hasattr(response.stream, "__iter__"):  # an async client's response
            return self._async(response)
        response.read()
        _raise_if_deadline(response)
        return _DONE

    async def _async(self, response: Any) -> None:
        await response.aread()
        _raise_if_deadline(response)

    def __repr__(self) -> str:
        return "deadline response hook (504 -> DeadlineExceeded)"


def _watched(response: Any) -> Any:
    """`response.stream`, each chunk of it progress of the step it is read in (`stall.py`: its
    idle cap starts again), its end the end of that step's stream."""
    stream = response.stream
    module = sys.modules[type(response).__module__.partition(".")[0]]  # httpx or httpx2
    if hasattr(stream, "__aiter__"):

        class Async(module.AsyncByteStream):  # type: ignore[misc,name-defined]
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in stream:
                    progress()
                    yield chunk

            async def aclose(self) -> None:
                idle()
                await stream.aclose()

        return Async()

    class Sync(module.SyncByteStream):  # type: ignore[misc,name-defined]
        def __iter__(self) -> Iterator[bytes]:
            for chunk in stream:
                progress()
                yield chunk

        def close(self) -> None:
            idle()
            stream.close()

    return Sync()


def _small_json(headers: Any) -> bool:
    length = headers.get("content-length", "")
    return (
        headers.get("content-type", "").startswith("application/json")
        and length.isascii()
        and length.isdigit()
        and int(length) <= BODY_MAX
    )


def _raise_if_deadline(response: Any) -> None:
    fields = parse_error_body(response.headers.get("content-type", ""), response.content)
    if fields is None or fields["terminal"] != Terminal.DEADLINE_EXCEEDED:
        return
    request = response.request
    where = f"{request.method} {_where(request.url)}"
    step = fields.get("step")
    detail = fields.get("detail")
    message = f"deadline exceeded downstream: {where} answered 504"
    if isinstance(detail, str) and detail:
        message += f" ({detail})"
    raise DeadlineExceeded(
        message,
        deadline=current_deadline(),
        step=step if isinstance(step, str) and step else where,
        scopes=current_scopes(),
    )


def _refused(d: Deadline, what: str) -> DeadlineExceeded:
    scopes = current_scopes()
    step = scopes[-1].name if scopes else None
    return DeadlineExceeded(
        f"deadline exceeded: {what}, no time left", deadline=d, step=step, scopes=scopes
    )


def _where(url: Any) -> str:
    """The URL without its query (which may hold secrets)."""
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"
