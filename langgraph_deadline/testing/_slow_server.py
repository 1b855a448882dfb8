"""A loopback HTTP server that answers slowly and reports, per request, whether the client left.

It runs its own event loop in a background thread, so sync and async tests can use it alike,
and it answers the question a deadline test must ask: was the connection really closed?
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from ._background import Background, wait_until

__all__ = ["SlowServer", "ServedRequest"]


@dataclasses.dataclass
class ServedRequest:
    """What the server saw of one request. Times are `time.monotonic()` readings."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    started: float
    answered: float | None = None  # the full response was written
    disconnected: float | None = None  # the client closed the connection before the answer
    status: int | None = None

    @property
    def open(self) -> bool:
        return self.answered is None and self.disconnected is None


class SlowServer(Background):
    """`GET /slow?delay=S&status=N&retry_after=R` answers after S seconds (with a `Retry-After`
    header when asked); `/fast` at once; `/trickle?chunks=N&interval=I&stall_after=K&stall=S`
    answers at once and sends its body in N chunks, one every I seconds, stopping for S
    seconds (default: for good) after the K-th (a body that stalls); `/drop` reads the
    request and closes the connection without an answer (a write whose reply is lost); anything
    else 404.

    ```python
    with SlowServer() as server:
        httpx.get(server.url("/slow?delay=2"), timeout=0.5)  # raises ReadTimeout
        assert server.wait_disconnected(1.0)
    ```
    """

    def __init__(self, *, host: str = "127.0.0.1", default_delay: float = 2.0) -> None:
        self.host = host
        self.port = 0
        self.default_delay = default_delay
        self.requests: list[ServedRequest] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> SlowServer:
        self._thread = threading.Thread(target=self._serve, name="SlowServer", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("SlowServer did not start")
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    # -- what happened ----------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[list[ServedRequest]], bool], timeout: float) -> bool:
        """Wait until `predicate(requests)` holds; False if it did not within `timeout` seconds."""
        return wait_until(self._changed, lambda: predicate(self.requests), timeout)

    def wait_disconnected(self, timeout: float, *, count: int = 1) -> bool:
        """Wait until at least `count` requests saw their client disconnect."""
        return self.wait_for(
            lambda rs: sum(r.disconnected is not None for r in rs) >= count, timeout
        )

    def open_requests(self) -> list[ServedRequest]:
        with self._lock:
            return [r for r in self.requests if r.open]

    # -- serving ----------------------------------------------------------------------------------

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(asyncio.start_server(self._handle, self.host, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                parts = urlsplit(target)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                req = ServedRequest(method, parts.path, query, headers, time.monotonic())
                with self._lock:
                    self.requests.append(req)
                self._notify()
                if not await self._answer(req, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        except asyncio.CancelledError:
            # stop() with a request still open: end quietly (Python 3.11's stream callback
            # would log a cancelled handler as an error).
            return
        finally:
            writer.close()

    async def _answer(
        self, req: ServedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if req.path == "/drop":
            req.disconnected = time.monotonic()
            self._notify()
            return False
        if req.path == "/trickle":
            return await self._trickle(req, reader, writer)
        if req.path == "/slow":
            delay = float(req.query.get("delay", self.default_delay))
        elif req.path == "/fast":
            delay = 0.0
        else:
            delay = 0.0
            req.status = 404
        if delay > 0:
            sleeper = asyncio.ensure_future(asyncio.sleep(delay))
            eof = asyncio.ensure_future(reader.read(1))
            done, _ = await asyncio.wait({sleeper, eof}, return_when=asyncio.FIRST_COMPLETED)
            if eof in done and not eof.result():
                sleeper.cancel()
                req.disconnected = time.monotonic()
                self._notify()
                return False
            eof.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await eof
        status = req.status or int(req.query.get("status", "200"))
        req.status = status
        body = f'{{"path": "{req.path}", "delay": {delay}}}'.encode()
        extra = f"retry-after: {req.query['retry_after']}\r\n" if "retry_after" in req.query else ""
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            req.disconnected = time.monotonic()
            self._notify()
            return False
        req.answered = time.monotonic()
        self._notify()
        return True

    async def _trickle(
        self, req: ServedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        chunks = int(req.query.get("chunks", "10"))
        interval = float(req.query.get("interval", "0.01"))
        stall_after = int(req.query.get("stall_after", "-1"))
        stall = float(req.query.get("stall", "inf"))
        req.status = 200
        eof = asyncio.ensure_future(reader.read(1))
        try:
            writer.write(
                b"HTTP/1.1 200 X\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for i in range(chunks):
                wait = interval + (stall if i == stall_after else 0.0)
                done, _ = await asyncio.wait({eof}, timeout=None if wait == float("inf") else wait)
                if done:  # the client left
                    req.disconnected = time.monotonic()
                    self._notify()
                    return False
                data = f"chunk {i}\n".encode()
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            req.disconnected = time.monotonic()
            self._notify()
            return False
        finally:
            eof.cancel()
        req.answered = time.monotonic()
        self._notify()
        return True
