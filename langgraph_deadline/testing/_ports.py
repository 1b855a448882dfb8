"""Ports for local servers that no earlier server of the process had."""

from __future__ import annotations

import socket
import threading

_PORTS_HANDED_OUT: set[tuple[str, int]] = set()
_PORTS_LOCK = threading.Lock()


def unused_port_socket(host: str) -> socket.socket:
    """A socket bound to a port no earlier server of this process had. langchain-openai keeps
    one httpx client per base URL for the life of the process: a server on a reused port would
    be reached through an old server's client, with idle connections of an event loop that
    may be closed by now ("Event loop is closed" in whichever test or run comes next)."""
    held: list[socket.socket] = []  # ports seen before stay bound, so the next bind differs
    try:
        with _PORTS_LOCK:
            for _ in range(1000):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, 0))
                key = (host, sock.getsockname()[1])
                if key not in _PORTS_HANDED_OUT:
                    _PORTS_HANDED_OUT.add(key)
                    return sock
                held.append(sock)
        raise RuntimeError(f"FakeOpenAIServer found no port on {host} unused in this process")
    finally:
        for sock in held:
            sock.close()
