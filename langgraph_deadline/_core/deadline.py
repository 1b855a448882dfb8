"""The `Deadline` value: one absolute instant, with the arithmetic every step needs, and the
clocks it reads (monotonic for arithmetic inside a process, wall for the wire and checkpoints)."""

from __future__ import annotations

import datetime as _dt
import time
from typing import Final, Protocol, final, runtime_checkable

from .validate import (
    MAX_SECONDS,
    MIN_EPOCH,
    check_cap,
    check_number,
    check_seconds,
    show,
    too_early,
)

__all__ = [
    "MIN_TIMESTAMP",
    "SYSTEM_CLOCK",
    "Clock",
    "Deadline",
    "ManualClock",
    "SystemClock",
    "earliest",
]

# -- clocks ----------


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


# -- the deadline ----------

_set = object.__setattr__

# 2000-01-01 UTC. An earlier "absolute" deadline is a duration passed as a timestamp
# (`Deadline.at(5)`), not a moment anyone means.
MIN_TIMESTAMP: Final = MIN_EPOCH


@final
class Deadline:
    """An absolute instant by which a run must be finished. Immutable; deadlines only get earlier.

    Like Go's `time.Time`, a deadline holds two readings of the same instant: a monotonic one,
    used for all arithmetic inside this process (immune to wall-clock jumps), and a wall-clock
    one (`timestamp`, epoch seconds), used on the wire and in checkpoints.

    >>> d = Deadline.after(5.0)
    >>> 0 < d.remaining() <= 5.0
    True
    >>> d.budget(cap=2.0) <= 2.0
    True
    """

    __slots__ = ("_clock", "_mono", "_wall")

    _mono: float
    _wall: float
    _clock: Clock

    def __init__(self, *, monotonic: float, wall: float, clock: Clock = SYSTEM_CLOCK) -> None:
        """Not for users: use `Deadline.after()` or `Deadline.at()`, which read the clock.

        Builds a deadline from two readings of one instant on `clock`. Both must be finite: a
        NaN would never expire, yet leave no time (`remaining()` 0).

        Raises:
            TypeError, ValueError: a reading is not a finite number.
        """
        object.__setattr__(self, "_mono", check_number(monotonic, "monotonic", "a clock reading"))
        object.__setattr__(self, "_wall", check_number(wall, "wall", "epoch seconds"))
        object.__setattr__(self, "_clock", clock)

    @classmethod
    def _of(cls, monotonic: float, wall: float, clock: Clock) -> Deadline:
        """A deadline from readings this library computed itself, unchecked (the hot path)."""
        d = object.__new__(cls)
        _set(d, "_mono", monotonic)
        _set(d, "_wall", wall)
        _set(d, "_clock", clock)
        return d

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def after(cls, seconds: float, *, clock: Clock | None = None) -> Deadline:
        """The deadline `seconds` from now.

        Raises:
            TypeError: `seconds` is not a number.
            ValueError: `seconds` is negative, NaN or infinite.
        """
        secs = check_seconds(seconds, "seconds")
        clk = SYSTEM_CLOCK if clock is None else clock
        return cls._of(clk.monotonic() + secs, clk.time() + secs, clk)

    @classmethod
    def at(cls, timestamp: float | _dt.datetime, *, clock: Clock | None = None) -> Deadline:
        """The deadline at an absolute wall-clock time: epoch seconds, or an aware `datetime`.

        The instant is mapped once onto this process's monotonic clock, so later wall-clock jumps
        do not move it. It must lie between 2000-01-01 (`MIN_TIMESTAMP`: anything earlier is a
        duration passed by mistake: use `Deadline.after`) and 100 years from now.

        Raises:
            TypeError: not a number or a `datetime`.
            ValueError: NaN, infinite, before 2000, over 100 years ahead, or a naive datetime.
        """
        if isinstance(timestamp, _dt.datetime):
            if timestamp.tzinfo is None:
                raise ValueError(
                    "timestamp must be an aware datetime (with tzinfo), got a naive one"
                )
            wall = timestamp.timestamp()
        else:
            wall = check_number(timestamp, "timestamp", "epoch seconds or an aware datetime")
        clk = SYSTEM_CLOCK if clock is None else clock
        now = clk.time()
        if wall < MIN_TIMESTAMP:
            raise too_early(timestamp, "timestamp")
        if wall - now > MAX_SECONDS:
            raise ValueError(
                f"timestamp must be at most 100 years from now, got {show(timestamp)} "
                "(milliseconds passed as seconds?)"
            )
        return cls._of(clk.monotonic() + (wall - now), wall, clk)

    @classmethod
    def _after(cls, seconds: float, clock: Clock) -> Deadline:
        """`after` without argument checks, for values this library computed itself (hot path)."""
        return cls._of(clock.monotonic() + seconds, clock.time() + seconds, clock)

    @classmethod
    def _at(cls, wall: float, clock: Clock) -> Deadline:
        """`at` without argument checks, for epoch seconds read back from our own state field."""
        return cls._of(clock.monotonic() + (wall - clock.time()), wall, clock)

    def _moved(self, seconds: float) -> Deadline:
        """This deadline moved by `seconds` (negative: earlier), for budgets computed here."""
        return Deadline._of(self._mono + seconds, self._wall + seconds, self._clock)

    # -- readings -------------------------------------------------------------------------------

    @property
    def timestamp(self) -> float:
        """The deadline as wall-clock epoch seconds (for checkpoints, logs and the wire)."""
        return self._wall

    @property
    def clock(self) -> Clock:
        """The clock this deadline reads."""
        return self._clock

    def remaining(self) -> float:
        """Seconds left, on the monotonic clock; never negative."""
        left = self._mono - self._clock.monotonic()
        return left if left > 0.0 else 0.0

    @property
    def expired(self) -> bool:
        """True once no time is left."""
        return self._clock.monotonic() >= self._mono

    def budget(self, cap: float | None = None, reserve: float = 0.0) -> float:
        """A step's budget: `min(cap, remaining - reserve)`, never negative.

        Raises:
            TypeError, ValueError: `cap` or `reserve` is not a finite number >= 0.
        """
        return self._budget(check_cap(cap, "cap"), check_seconds(reserve, "reserve"))

    def _budget(self, cap: float | None, reserve: float) -> float:
        left = self._mono - self._clock.monotonic() - reserve
        if cap is not None and cap < left:
            left = cap
        return left if left > 0.0 else 0.0

    # -- combining ------------------------------------------------------------------------------

    def earliest(self, other: Deadline | None) -> Deadline:
        """The earlier of the two (`None` is no deadline). Combining never extends a deadline.

        Raises:
            TypeError: `other` is neither a `Deadline` nor None.
        """
        if other is None or other is self:
            return self
        if not isinstance(other, Deadline):
            raise TypeError(f"other must be a Deadline or None, got {type(other).__name__}")
        return self if self <= other else other

    def _key(self, other: Deadline) -> tuple[float, float]:
        if other._clock is self._clock:
            return self._mono, other._mono
        return self._wall, other._wall

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Deadline):
            return NotImplemented
        a, b = self._key(other)
        return a < b

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Deadline):
            return NotImplemented
        a, b = self._key(other)
        return a <= b

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Deadline):
            return NotImplemented
        a, b = self._key(other)
        return a > b

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Deadline):
            return NotImplemented
        a, b = self._key(other)
        return a >= b

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Deadline):
            return NotImplemented
        a, b = self._key(other)
        return a == b

    def __hash__(self) -> int:
        return hash((id(self._clock), self._mono))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Deadline is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Deadline is immutable")

    def __reduce__(self) -> tuple[object, tuple[float]]:
        # Pickles as its wall-clock instant: a monotonic reading means nothing in another process.
        return (Deadline.at, (self._wall,))

    def __repr__(self) -> str:
        left = self._mono - self._clock.monotonic()
        try:
            when = _dt.datetime.fromtimestamp(self._wall, _dt.UTC).isoformat(
                timespec="milliseconds"
            )
        except (OverflowError, ValueError, OSError):  # outside datetime's years 1 to 9999
            when = f"{self._wall:.6g} (epoch s)"
        return f"Deadline(at={when}, remaining={left:.3f}s)"


def earliest(*deadlines: Deadline | None) -> Deadline | None:
    """The earliest of the given deadlines, ignoring `None`; `None` when there are none.

    Raises:
        TypeError: an argument is neither a `Deadline` nor None.
    """
    best: Deadline | None = None
    for d in deadlines:
        if d is None:
            continue
        if not isinstance(d, Deadline):
            raise TypeError(
                f"earliest() takes Deadlines or None, got {type(d).__name__}: {show(d)}"
            )
        if best is None or d < best:
            best = d
    return best
