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

`LANGGRAPH_DEADLINE_SYNC_HTTP=off` in the environment leaves httpx untouched.
"""

from __future__ import annotations

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
_MODULES: Final = ("httpx", "httpx2")
_MARK: Final = "__langgraph_deadline__"
_OPENED: Final = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete"})

_pending: list[str] = (
    [] if os.environ.get(ENV, "").strip().lower() in {"0", "off", "false", "no"} else [*_MODULES]
)
_lock = threading.Lock()


def ensure() -> None:
    """Wrap the default transport of httpx and httpx2, for those imported since the last call
    (cheap: a look at a list, empty once both are wrapped, or left alone)."""
    for name in _pending:
        if name in sys.modules:
            with _lock:
                for name in [n for n in _pending if n in sys.modules]:
                    _wrap(sys.modules[name])
                    _pending.remove(name)
            return


def patched(module: Any) -> bool:
    """Whether `module`'s (httpx's or httpx2's) default sync transport is wrapped."""
    return getattr(module.HTTPTransport.handle_request, _MARK, False) is True


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
    deadline = current_deadline()
    left = None if deadline is None else deadline.remaining()
    if step.abandoned or (left is not None and left < 0.001):
        scopes = current_scopes()
        url = request.url
        raise DeadlineExceeded(
            f"deadline exceeded: {request.method} {url.scheme}://{url.host}{url.path} not sent, "
            + ("the step was abandoned" if step.abandoned else "no time left"),
            deadline=deadline,
            step=scopes[-1].name if scopes else None,
            scopes=scopes,
        )
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


def _forget(step: SyncBody, closers: list[Callable[[], object]]) -> None:
    for close in closers:
        step.forget(close)
    closers.clear()


def _h2(stream: Any) -> bool:
    """Whether TLS negotiated HTTP/2 on `stream`."""
    ssl_object = stream.get_extra_info("ssl_object")
    return ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"


def _shut(stream: Any) -> None:
    """Shut a connection down both ways from another thread: the server sees it close, and
    the thread reading it wakes at once (closing the socket itself would do neither)."""
    try:
        sock = stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            # (the base class's: an SSLSocket's own drops its TLS state under the reader)
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, ValueError):  # closed already, or detached (its TLS socket is shut)
        pass
