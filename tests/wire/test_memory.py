"""A client cannot fill the server's memory through the middleware: measured on a real uvicorn.

The server runs in its own process (its resident memory is then its own), behind
`DeadlineASGIMiddleware`, with a slow route that never reads its body. A client streams a large
body at it; the server's peak resident memory must stay within a small bound, because the
middleware reads at most one message ahead of the app and the server's flow control then
stops reading the socket.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 64
BODY = 512 << 20  # bytes the client offers at most
STREAM_FOR = 20.0  # seconds the client streams at most
STALLED = 1.0  # seconds a send may block before the client concludes the server stopped reading

SERVER = """
import socket, sys
import anyio, uvicorn
from langgraph_deadline.asgi import DeadlineASGIMiddleware

async def app(scope, receive, send):
    if scope["path"] == "/slow":
        await anyio.sleep(60)  # busy elsewhere: never reads its body
    else:
        while (await receive()).get("more_body"):
            pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
mw = DeadlineASGIMiddleware(app, max_timeout=60.0)
config = uvicorn.Config(mw, http=sys.argv[1], lifespan="off", log_level="warning")
uvicorn.Server(config).run(sockets=[sock])
"""


def _mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # kB
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture(params=["h11", "httptools"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, request.param], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield proc.pid, port
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _post(port: int, path: str, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head = f"POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: {len(body)}\r\n\r\n"
        s.sendall(head.encode() + body)
        return s.recv(1024)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_client_streaming_a_huge_body_to_a_route_that_does_not_read_it_stays_bounded(
    server: tuple[int, int],
) -> None:
    pid, port = server
    deadline = time.monotonic() + 10
    while True:  # the server is up, warm, and has read a body through the middleware once
        try:
            assert b"200" in _post(port, "/ping", b"x" * 200_000)
            break
        except OSError:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
    before = _mib(pid, "VmRSS")
    chunk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=STALLED) as s:
        s.sendall(f"POST /slow HTTP/1.1\r\nHost: a\r\nContent-Length: {BODY}\r\n\r\n".encode())
        until = time.monotonic() + STREAM_FOR
        while sent < BODY and time.monotonic() < until:
            try:
                sent += s.send(chunk[: BODY - sent])
            except TimeoutError:
                break  # nothing could be sent for a second: the server stopped reading
        peak = _mib(pid, "VmHWM")
    grew = peak - before
    assert grew <= LIMIT_MIB, f"server grew by {grew:.0f} MiB after {sent >> 20} MiB sent"
    assert sent < BODY, "the client was never held back"
