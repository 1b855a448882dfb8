"""What every loopback test server shares: it runs in a thread and is a sync and async context
manager. The async form starts and stops it off the event loop, which it must not block."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import anyio

__all__ = ["Background", "wait_until"]


class Background:
    """Subclasses implement `start()` (returning self) and `stop()`."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await anyio.to_thread.run_sync(self.stop)


def wait_until(changed: threading.Condition, holds: Callable[[], bool], timeout: float) -> bool:
    """Block until `holds()` is true, looked at each time `changed` is notified; False if it was
    not within `timeout` seconds (what a test server's `wait_for` does)."""
    end = time.monotonic() + timeout
    with changed:
        while not holds():
            left = end - time.monotonic()
            if left <= 0:
                return False
            changed.wait(left)
        return True
