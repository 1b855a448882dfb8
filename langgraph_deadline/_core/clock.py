"""Clocks: monotonic for arithmetic inside a process, wall for the wire and for checkpoints."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SYSTEM_CLOCK", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What a `Deadline` needs of time: a monotonic reading and a wall reading, in seconds."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The real clocks: `time.monotonic` and `time.time`."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to, for tests of budget arithmetic.

    `advance(s)` moves both readings; `jump_wall(s)` moves only the wall clock, as an NTP step
    or a machine whose clock is off would, so tests can show the monotonic arithmetic ignores it.
    """

    __slots__ = ("_mono", "_wall")

    def __init__(self, *, wall: float = 1_800_000_000.0, monotonic: float = 1_000.0) -> None:
        self._wall = float(wall)
        self._mono = float(monotonic)

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        self._mono += seconds
        self._wall += seconds

    def jump_wall(self, seconds: float) -> None:
        self._wall += seconds

    def __repr__(self) -> str:
        return f"ManualClock(wall={self._wall!r}, monotonic={self._mono!r})"
