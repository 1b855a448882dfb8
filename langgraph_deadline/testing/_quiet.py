"""Assertions that a deadline really stopped the work: nothing was sent after it.

They read what a recording server saw (`FakeOpenAIServer`, or any server with the same few
methods) and compare it with the deadline, measured on `time.monotonic()` like the server's own
timestamps:

```python
out = await agent.ainvoke({"messages": [("user", "count to 500")]})
await await_nothing_sent_after(server, Deadline.at(out["deadline"]))
```
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from .._core.deadline import SYSTEM_CLOCK, Deadline

__all__ = ["RecordingServer", "assert_nothing_sent_after", "await_nothing_sent_after"]

DEFAULT_CHUNKS = 1
"""Token chunks allowed after the instant: one may already be on the wire when the client cuts."""


class RecordingServer(Protocol):
    """What the assertions need from a server: its requests and when each sent what."""

    @property
    def requests(self) -> Sequence[Any]: ...

    def requests_after(self, t: float) -> Sequence[Any]: ...

    def chunks_sent_after(self, t: float) -> int: ...

    def open_requests(self) -> Sequence[Any]: ...

    def wait_idle(self, timeout: float) -> bool: ...

    async def await_idle(self, timeout: float) -> bool: ...


def _instant(at: Deadline | float) -> float:
    """A `time.monotonic()` reading for `at` (a monotonic float is taken as is)."""
    if isinstance(at, Deadline):
        if at.clock is SYSTEM_CLOCK:
            return at._mono
        return time.monotonic() + (at.timestamp - time.time())
    return float(at)


def assert_nothing_sent_after(
    server: RecordingServer,
    at: Deadline | float,
    *,
    chunks: int = DEFAULT_CHUNKS,
    within: float = 1.0,
) -> None:
    """Assert that after `at` (a `Deadline`, or a `time.monotonic()` reading) the server
    started no request, sent at most `chunks` token chunks, and holds no request open.

    Waits up to `within` seconds for open requests to end first (a client cut at the deadline
    closes its socket a moment later). Blocks: in async tests use `await_nothing_sent_after`.

    Raises:
        AssertionError: with what each request did around `at`.
    """
    server.wait_idle(within)
    _check(server, _instant(at), chunks)


async def await_nothing_sent_after(
    server: RecordingServer,
    at: Deadline | float,
    *,
    chunks: int = DEFAULT_CHUNKS,
    within: float = 1.0,
) -> None:
    """`assert_nothing_sent_after` for async tests: waits without blocking the event loop.

    Raises:
        AssertionError: with what each request did around `at`.
    """
    await server.await_idle(within)
    _check(server, _instant(at), chunks)


def _check(server: RecordingServer, t: float, chunks: int) -> None:
    late = list(server.requests_after(t))
    sent = server.chunks_sent_after(t)
    still_open = list(server.open_requests())
    problems = []
    if late:
        problems.append(f"{len(late)} request(s) started after it")
    if sent > chunks:
        problems.append(f"{sent} token chunk(s) sent after it (allowed: {chunks})")
    if still_open:
        problems.append(f"{len(still_open)} request(s) still open")
    if problems:
        raise AssertionError(
            "work went on after the deadline: "
            + "; ".join(problems)
            + "\n"
            + "\n".join(_describe(r, t) for r in server.requests)
        )


def _describe(request: Any, t: float) -> str:
    def rel(value: Any) -> str:
        return "-" if value is None else f"{(value - t) * 1000.0:+.1f} ms"

    after = request.chunks_sent_after(t) if hasattr(request, "chunks_sent_after") else "?"
    started = rel(getattr(request, "started", None))
    return (
        f"  request {getattr(request, 'index', '?')}: started {started}"
        f", status {getattr(request, 'status', None)}"
        f", chunks after {after}"
        f", ended {rel(getattr(request, 'ended', None))}"
        f", disconnected {rel(getattr(request, 'disconnected', None))}"
        " (times relative to the deadline)"
    )
