"""Hedged calls for read-only tools ("The Tail at Scale", Dean and Barroso): when a call has
not answered after its learned p95, one more identical call starts; the first answer wins and
every other copy is cancelled at once (its connection closes).

`Hedge` is the setting (a frozen value, checked when built); `HedgeBudget` is the load it may
add, per tool, Finagle-style: over the last 10 s, at most `budget` x the calls plus
`floor_per_s` x 10 extra copies; `race` runs one call's copies inside the step's budget, which
bounds them all (the step's cut cancels every copy).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from .._core.context import remaining
from .._core.validate import check_cap, check_number, show
from .._learn.book import LatencyBook

__all__ = ["Copies", "Hedge", "HedgeBudget", "race"]

WINDOW_S: Final = 10
"""Seconds over which `HedgeBudget` counts calls and hedges (Finagle's retry budget's TTL)."""
_REFRESH: Final = 16  # work the learned delay out again when the samples grew by 1/16


@dataclasses.dataclass(frozen=True, slots=True)
class _Learned:
    count: int
    delay: float
    typical: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Hedge:
    """When and how much a read-only tool's calls are hedged (`deadline_tool(hedge=...)`).

    A call that has not answered after `delay` seconds gets one more identical copy (up to
    `max_copies` in all, one per further `delay`), if the step's budget left still fits a
    typical call and the tool's `HedgeBudget` allows it. `delay` is the `book`'s learned
    `quantile` of the tool's latency once it has `min_samples` samples, else `after`; with
    neither, the call is not hedged. Extra copies are at most `budget` x the calls plus
    `floor_per_s` per second, over the last 10 s. The run's deadline bounds every copy.

    ```python
    book = LatencyBook()
    hedge = Hedge(book=book, after=0.2)  # the book's p95 once it knows, 0.2 s until then
    ```

    Raises:
        ValueError: neither `after` nor `book`; a `quantile` or `budget` outside (0, 1); a
            negative `floor_per_s` or `min_samples`; `max_copies` below 2; a bad `after`.
        TypeError: `book` is not a `LatencyBook`, a number of the wrong type.
    """

    after: float | None = None
    book: LatencyBook | None = None
    quantile: float = 0.95
    min_samples: int = 50
    budget: float = 0.05
    floor_per_s: float = 1.0
    max_copies: int = 2
    _memo: dict[str, _Learned] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_cap(self.after, "after")
        if self.book is not None and not isinstance(self.book, LatencyBook):
            raise TypeError(
                f"book must be a LatencyBook, got {type(self.book).__name__}: {show(self.book)}"
            )
        if self.after is None and self.book is None:
            raise ValueError("Hedge needs after= (seconds) or book= (a LatencyBook), or both")
        for name in ("quantile", "budget"):
            p = check_number(getattr(self, name), name, "a number in (0, 1)")
            if not 0.0 < p < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {show(getattr(self, name))}")
        floor = check_number(self.floor_per_s, "floor_per_s", "hedges per second")
        if floor < 0.0:
            raise ValueError(f"floor_per_s must be >= 0, got {show(self.floor_per_s)}")
        for name, least in (("min_samples", 0), ("max_copies", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}: {show(value)}")
            if value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")

    def delay(self, name: str) -> float | None:
        """Seconds tool `name`'s call waits before its next copy (None: it is not hedged)."""
        known = self._learned(name)
        return self.after if known is None else known.delay

    def typical(self, name: str) -> float:
        """What a call of tool `name` usually takes (its learned median; 0 while cold): a copy
        starts only when the budget left is at least that."""
        known = self._learned(name)
        return 0.0 if known is None else known.typical

    def _learned(self, name: str) -> _Learned | None:
        book = self.book
        if book is None:
            return None
        count = book.count(name, "tool")
        if count < max(1, self.min_samples):
            return None
        memo = self._memo.get(name)
        if memo is not None and count < memo.count + max(1, memo.count // _REFRESH):
            return memo
        sketch = book.sketch(name, "tool")
        high, mid = sketch.quantile(self.quantile), sketch.quantile(0.5)
        assert high is not None and mid is not None
        memo = _Learned(count, high.seconds, mid.seconds)
        self._memo[name] = memo
        return memo


class HedgeBudget:
    """The extra load one tool's hedges may add (Finagle's retry budget): over the last
    `WINDOW_S` seconds, hedges <= `budget` x calls + `floor_per_s` x `WINDOW_S`. Counted in
    one-second slots under a lock; `clock` is monotonic seconds."""

    __slots__ = ("_calls", "_clock", "_floor", "_hedges", "_lock", "_ratio", "_slots")

    def __init__(
        self, *, budget: float, floor_per_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ratio = budget
        self._floor = floor_per_s * WINDOW_S
        self._clock = clock
        self._slots = [-1] * WINDOW_S  # the second each slot counts
        self._calls = [0] * WINDOW_S
        self._hedges = [0] * WINDOW_S
        self._lock = threading.Lock()

    def _slot(self) -> tuple[int, int]:
        second = math.floor(self._clock())
        i = second % WINDOW_S
        if self._slots[i] != second:
            self._slots[i], self._calls[i], self._hedges[i] = second, 0, 0
        return second, i

    def _live(self, counts: list[int], second: int) -> int:
        return sum(n for s, n in zip(self._slots, counts, strict=True) if s > second - WINDOW_S)

    def deposit(self) -> None:
        """A call started: it earns `budget` of a hedge."""
        with self._lock:
            _, i = self._slot()
            self._calls[i] += 1

    def withdraw(self) -> bool:
        """A hedge wants to start: True (and counted) if the window allows one more."""
        with self._lock:
            second, i = self._slot()
            allowed = self._ratio * self._live(self._calls, second) + self._floor
            if self._live(self._hedges, second) + 1 > allowed:
                return False
            self._hedges[i] += 1
            return True


@dataclasses.dataclass(slots=True)
class Copies:
    """How one call was hedged: copies started (over its attempts), which one answered."""

    started: int = 0
    winner: int | None = None


async def race(
    call: Callable[[], Awaitable[Any]],
    *,
    name: str,
    hedge: Hedge,
    budget: HedgeBudget,
    copies: Copies,
) -> Any:
    """`call()` hedged: copy 0 now, one more after each `hedge.delay(name)` while none has
    answered (up to `max_copies`, while `budget` allows and the step's time left fits a typical
    call). The first copy to return wins and the others are cancelled before this returns; a
    copy that raises leaves the others running, and when every copy raised the first error is
    raised. Runs inside the step's guard: its cut cancels every copy."""
    budget.deposit()
    delay = hedge.delay(name)
    state: dict[str, Any] = {"value": None, "error": None, "running": 0}
    settled = anyio.Event()  # a copy won, or every copy started so far raised

    async with anyio.create_task_group() as tg:

        async def copy(i: int) -> None:
            try:
                value = await call()
            except Exception as exc:
                if state["error"] is None:
                    state["error"] = exc
                state["running"] -= 1
                if state["running"] == 0:
                    settled.set()
                return
            if copies.winner is None:
                copies.winner = i
                state["value"] = value
                settled.set()
                tg.cancel_scope.cancel()

        def start(i: int) -> None:
            copies.started += 1
            state["running"] += 1
            tg.start_soon(copy, i)

        start(0)
        for i in range(1, hedge.max_copies if delay is not None else 1):
            assert delay is not None
            with anyio.move_on_after(delay):
                await settled.wait()
            if settled.is_set() or remaining() < hedge.typical(name) or not budget.withdraw():
                break
            start(i)
    if copies.winner is None:
        assert state["error"] is not None
        raise state["error"]
    return state["value"]
