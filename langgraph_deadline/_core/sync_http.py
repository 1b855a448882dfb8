"""The HTTP requests of a sync step's body: bounded by its deadline, closed when it is abandoned.

A thread cannot be stopped, but the connection it waits on can be closed. A chat model's SDK
(OpenAI, Anthropic, Ollama, google-genai, Mistral) builds its own httpx client, which the user
never sees, so no event hook of ours can reach it: the one seam they all share is httpx's
default transport. Its `handle_request` (httpx's and httpx2's) is wrapped once, the first time
a sync step runs after the module was imported; outside a sync step's body it only looks up a
context variable. Inside one (`workers.current_body()`):

- a request is not sent once the step is past its deadline or abandoned (`DeadlineExceeded`:
  an SDK's retry after the deadline never leaves);
- its connect, read, write and pool timeouts are cut to the time left, so a request that hangs
  ends at the deadline by itself;
- the connection it runs on is registered with the step, and shut down (both ways) when
  the step is abandoned: the server sees it close at once, whatever the request was doing
  (waiting for its answer on a new connection, streaming its body). A kept-alive connection
  taken from the pool is known only once the answer's headers came: before that, the cut read
  timeout ends it, at the deadline. An HTTP/2 connection is never shut down (other requests
  may share it): its timeouts alone bound it.

urllib3 (botocore's, hence AWS Bedrock's, and `requests`') gets the same, at its pool's
`_make_request`: refused past the deadline (botocore's retries included), its connect and read
timeouts cut to the time left, and its connection's socket shut down when the step is
abandoned (forgotten when the pool takes the connection back). It is also refused and cut, not
registered, wherever a deadline is in force without a sync step: an async caller's model call
that its library runs on an executor thread (langchain-aws's), which the caller's cancel scope
cannot reach.

`LANGGRAPH_DEADLINE_SYNC_HTTP=off` in the environment leaves httpx and urllib3 untouched.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

from .context import current_deadline, current_scopes
from .errors import DeadlineExceeded
from .workers import SyncBody, current_body

__all__ = ["ENV", "ensure", "patched"]

ENV: Final = "LANGGRAPH_DEADLINE_SYNC_HTTP"
_MODULES: Final = ("httpx", "httpx2", "urllib3")
_MARK: Final = "__langgraph_deadline__"
_OPENED: Final = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete"})

_pending: list[str] = (
    [] if os.environ.get(ENV, "").strip().lower() in {"0", "off", "false", "no"} else [*_MODULES]
)
_lock = threading.Lock()


def ensure() -> None:
    """Wrap the default transport of httpx and httpx2, and urllib3's pools, for those imported
    since the last call (cheap: a look at a list, empty once all are wrapped, or left alone)."""
    for name in _pending:
        if name in sys.modules:
            with _lock:
                for name in [n for n in _pending if n in sys.modules]:
                    (_wrap_urllib3 if name == "urllib3" else _wrap)(sys.modules[name])
                    _pending.remove(name)
            return


def patched(module: Any) -> bool:
    """Whether `module`'s (httpx's or httpx2's) default sync transport, or urllib3's pools,
    are wrapped."""
    if module.__name__ == "urllib3":
        method = module.connectionpool.HTTPConnectionPool._make_request
    else:
        method = module.HTTPTransport.handle_request
    return getattr(method, _MARK, False) is True


def _wrap(module: Any) -> None:
    transport = module.HTTPTransport
    original = transport.handle_request
    if getattr(original, _MARK, False):
        return

    class Body(module.SyncByteStream):  # type: ignore[misc]
        """A response body that forgets its connection's closer before it gives the connection
        back to the pool (where another request may take it)."""

        def __init__(self, stream: Any, step: SyncBody, close: Callable[[], object]) -> None:
            self._stream, self._step, self._close = stream, step, close

        def __iter__(self) -> Iterator[bytes]:
            yield from self._stream

        def close(self) -> None:
            self._step.forget(self._close)
            self._stream.close()

    @functools.wraps(original)
    def handle_request(self: Any, request: Any) -> Any:
        step = current_body()
        if step is None:
            return original(self, request)
        return _send(step, original, self, request, Body)

    setattr(handle_request, _MARK, True)
    transport.handle_request = handle_request


def _send(
    step: SyncBody, original: Callable[..., Any], transport: Any, request: Any, body_type: Any
) -> Any:
    """Send `request` for a sync step's body (`step`): refused past its deadline, its timeouts
    cut to the time left, its connection shut down if the step is abandoned first (an HTTP/1.1
    one: an HTTP/2 connection may carry other steps' requests too)."""
    url = request.url
    left = _time_left(step, lambda: f"{request.method} {url.scheme}://{url.host}{url.path}")
    extensions = request.extensions
    timeout = extensions.get("timeout")
    if left is not None and timeout:
        extensions["timeout"] = {
            k: left if v is None or v > left else v for k, v in timeout.items()
        }
    opened: list[Callable[[], object]] = []
    outer_trace = extensions.get("trace")

    def trace(name: str, info: dict[str, Any]) -> None:
        if name in _OPENED:  # a new connection: shut down if the step is abandoned mid-request
            stream = info.get("return_value")
            if stream is not None and not _h2(stream):
                close = functools.partial(_shut, stream)
                opened.append(close)
                step.on_abandon(close)
            elif stream is not None:  # HTTP/2: shared, so never shut down for one step
                _forget(step, opened)
        if outer_trace is not None:
            outer_trace(name, info)

    extensions["trace"] = trace
    try:
        response = original(transport, request)
    except BaseException:
        _forget(step, opened)
        raise
    finally:
        if outer_trace is None:
            extensions.pop("trace", None)
        else:
            extensions["trace"] = outer_trace
    stream = response.extensions.get("network_stream")
    if stream is not None and response.extensions.get("http_version", b"").startswith(b"HTTP/1"):
        close = functools.partial(_shut, stream)
        step.on_abandon(close)  # (before the connect's are forgotten: no gap between them)
        response.stream = body_type(response.stream, step, close)
    _forget(step, opened)
    return response


def _time_left(step: SyncBody | None, what: Callable[[], str]) -> float | None:
    """The time left for a request (`what` names it) of a sync step (`step`) or under a
    deadline; `DeadlineExceeded` if there is none, or the step was abandoned."""
    deadline = current_deadline()
    left = None if deadline is None else deadline.remaining()
    abandoned = step is not None and step.abandoned
    if abandoned or (left is not None and left < 0.001):
        scopes = current_scopes()
        raise DeadlineExceeded(
            f"deadline exceeded: {what()} not sent, "
            + ("the step was abandoned" if abandoned else "no time left"),
            deadline=deadline,
            step=scopes[-1].name if scopes else None,
            scopes=scopes,
        )
    return left


def _wrap_urllib3(module: Any) -> None:
    pool = module.connectionpool.HTTPConnectionPool
    original, put = pool._make_request, pool._put_conn
    if getattr(original, _MARK, False):
        return
    timeout_type = module.Timeout

    @functools.wraps(original)
    def _make_request(self: Any, conn: Any, method: str, url: str, *args: Any, **kw: Any) -> Any:
        step = current_body()
        if step is None and current_deadline() is None:
            return original(self, conn, method, url, *args, **kw)
        left = _time_left(step, lambda: f"{method} {self.scheme}://{self.host}{url}")
        if left is not None and not args:  # (urllib3 2 and 1.26 pass `timeout` by name)
            timeout = self._get_timeout(kw.get("timeout", self.timeout))
            connect, read = timeout.connect_timeout, timeout.read_timeout
            kw["timeout"] = timeout_type(
                connect=left if not isinstance(connect, float | int) else min(connect, left),
                read=left if not isinstance(read, float | int) else min(read, left),
            )
        if step is None:
            return original(self, conn, method, url, *args, **kw)
        close = functools.partial(_shut_conn, conn)
        conn.__dict__[_MARK] = (step, close)
        step.on_abandon(close)
        try:
            return original(self, conn, method, url, *args, **kw)
        except BaseException:
            _release(conn)
            raise

    @functools.wraps(put)
    def _put_conn(self: Any, conn: Any) -> None:
        if conn is not None:
            _release(conn)
        put(self, conn)

    setattr(_make_request, _MARK, True)
    pool._make_request, pool._put_conn = _make_request, _put_conn


def _release(conn: Any) -> None:
    """The step that ran a request on urllib3's `conn` no longer needs to shut it down."""
    held = conn.__dict__.pop(_MARK, None)
    if held is not None:
        held[0].forget(held[1])


def _shut_conn(conn: Any) -> None:
    """Shut urllib3's `conn` down both ways (if it has connected yet: before, its connect
    timeout, cut to the budget, ends it)."""
    sock = getattr(conn, "sock", None)
    if isinstance(sock, socket.socket):
        _shut_socket(sock)


def _forget(step: SyncBody, closers: list[Callable[[], object]]) -> None:
    for close in closers:
        step.forget(close)
    closers.clear()


def _h2(stream: Any) -> bool:
    """Whether TLS negotiated HTTP/2 on `stream`."""
    ssl_object = stream.get_extra_info("ssl_object")
    return ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"


def _shut(stream: Any) -> None:
    """Shut an httpcore connection down both ways from another thread."""
    sock = stream.get_extra_info("socket")
    if isinstance(sock, socket.socket):
        _shut_socket(sock)


def _shut_socket(sock: socket.socket) -> None:
    """Shut a socket down both ways from another thread: the server sees it close, and the
    thread reading it wakes at once (closing the socket itself would do neither)."""
    # (the base class's: an SSLSocket's own drops its TLS state under the reader; closed
    # already, or detached: its TLS socket is shut)
    with contextlib.suppress(OSError, ValueError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
