"""Clocks: monotonic for arithmetic inside a process, wall for the wire and for checkpoints."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from .validate import check_number

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
        self._wall = check_number(wall, "wall", "epoch seconds")
        self._mono = check_number(monotonic, "monotonic", "a number of seconds")

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        """Move both readings forward by `seconds` (a finite number >= 0; time never runs back)."""
        secs = check_number(seconds, "seconds")
        if secs < 0:
            raise ValueError(f"seconds must be >= 0 (time never runs back), got {seconds!r}")
        self._mono += secs
        self._wall += secs

    def jump_wall(self, seconds: float) -> None:
        """Move only the wall reading, by `seconds` (finite; negative jumps back)."""
        self._wall += check_number(seconds, "seconds")

    def __repr__(self) -> str:
        return f"ManualClock(wall={self._wall!r}, monotonic={self._mono!r})"
