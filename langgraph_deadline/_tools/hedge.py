"""Hedged calls for read-only tools ("The Tail at Scale", Dean and Barroso): when a call has
not answered after its learned p95, one more identical call starts; the first answer wins and
every other copy is cancelled at once (its connection closes).

`Hedge` is the setting (a frozen value, checked when built); `HedgeBudget` is the load it may
add, per tool, Finagle-style: over the last 10 s, at most `max_extra` x the calls extra copies,
or `floor_per_s` x 10 when that is more (a quiet tool); `race` runs one call's copies inside
the step's budget, which bounds them all (the step's cut cancels every copy).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import math
import threading
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, ParamSpec, TypeVar

import anyio

from .._core.context import remaining
from .._core.cut import Cut
from .._core.validate import check_cap, check_number, show
from .._learn.book import LatencyBook

__all__ = ["Copies", "Hedge", "HedgeBudget", "HeldBy", "answering", "race"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

HeldBy = Literal["budget", "outage", "time"]
"""Why a hedged call's next copy was not started: its tool's hedge budget was spent, its
backend is slow for everyone (an outage), or the step's time left does not fit a typical call."""

WINDOW_S: Final = 10
"""Seconds over which `HedgeBudget` counts calls and hedges (Finagle's retry budget's TTL)."""
CLOSE_GRACE_S: Final = 0.05
"""The longest a call waits for its losing copies to close (they take a few ms)."""
OUTAGE_CALLS: Final = 10
"""About how many recent calls `HedgeBudget` tells a slow backend (an outage) from stragglers
by: a moving average over them (and none is told before it has seen that many)."""
_ANSWERED: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "langgraph_deadline_hedge_answered", default=None
)
"""In a copy's context (and the tasks it starts, LangChain's tool task among them): what to
call the moment that copy's tool coroutine has answered."""
USEFUL: Final = 0.5
"""The share of recent hedged calls (a moving average over about the last `OUTAGE_CALLS`) whose
copy answered first, below which hedging backs off: when every copy is slow (an outage), a copy
started a delay after the first request seldom overtakes it (about a third of the time on the
hedge benchmark's latencies), where a straggler's copy nearly always does. Only copies that had
a chance count: one the first request beat before the copy had run a typical call (a call just
past its delay, the usual case at a p90 trigger) says nothing of whether copies help."""
PROBE_S: Final = 1.0
"""While hedges do not help (`USEFUL`), one copy is still allowed this often, to tell when they
do again."""
_RETRY: Final = 0.25  # a call the hedge budget held asks again after this share of its delay
_FIT: Final = 1.5  # under a deadline, the first copy starts by when this many typical calls fit
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
    typical call and the tool's `HedgeBudget` allows it. Under a deadline the first copy starts
    sooner when waiting for `delay` would leave less than 1.5 typical calls (but never before
    one typical call has passed); a call the budget held back asks again every quarter `delay`
    (the budget refills as calls come in), and is served before calls that have only just run
    past their delay (the longer a call has run past it, the likelier it is a straggler).
    `delay` is the `book`'s learned `quantile` of the tool's latency once it has `min_samples`
    samples, else `after`; with neither, the call is not hedged. Extra copies are at most
    `max_extra` x the calls over the last 10 s, or `floor_per_s` per second when that is more (so
    a quiet tool, whose share is less than one copy, can still hedge; a busy one adds no more
    than its `max_extra`). While more than `outage_share` of the tool's recent calls (a moving
    average over about the last 10) ran past their delay, or while fewer than half of its
    recent hedged calls were answered by a copy (every copy is slow: copies add load and win
    nothing; a copy the first request beat before it had run a typical call is not counted),
    the backend is slow for everyone and hedging backs off: no copy starts (while copies did
    not help, one a second still does, to tell when they would again; None: never). The run's
    deadline bounds every copy.

    ```python
    book = LatencyBook()
    hedge = Hedge(book=book, after=0.2)  # the book's p95 once it knows, 0.2 s until then
    ```

    Raises:
        ValueError: neither `after` nor `book`; a `quantile` or `max_extra` outside (0, 1); an
            `outage_share` outside (0, 1]; a negative `floor_per_s`; `min_samples` below 1;
            `max_copies` below 2; a bad `after`.
        TypeError: `book` is not a `LatencyBook`, a number of the wrong type.
    """

    after: float | None = None
    book: LatencyBook | None = None
    quantile: float = 0.95
    min_samples: int = 50
    max_extra: float = 0.05
    floor_per_s: float = 1.0
    max_copies: int = 2
    outage_share: float | None = 0.5
    _memo: dict[str, _Learned] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Numbers are kept as the floats they were checked as (a frozen value: set once here).
        object.__setattr__(self, "after", check_cap(self.after, "after"))
        if self.book is not None and not isinstance(self.book, LatencyBook):
            raise TypeError(
                f"book must be a LatencyBook, got {type(self.book).__name__}: {show(self.book)}"
            )
        if self.after is None and self.book is None:
            raise ValueError("Hedge needs after= (seconds) or book= (a LatencyBook), or both")
        for name in ("quantile", "max_extra"):
            p = check_number(getattr(self, name), name, "a number in (0, 1)")
            if not 0.0 < p < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {show(getattr(self, name))}")
            object.__setattr__(self, name, p)
        if self.outage_share is not None:
            share = check_number(self.outage_share, "outage_share", "a number in (0, 1]")
            if not 0.0 < share <= 1.0:
                raise ValueError(f"outage_share must be in (0, 1], got {show(self.outage_share)}")
            object.__setattr__(self, "outage_share", share)
        floor = check_number(self.floor_per_s, "floor_per_s", "hedges per second")
        if floor < 0.0:
            raise ValueError(f"floor_per_s must be >= 0, got {show(self.floor_per_s)}")
        object.__setattr__(self, "floor_per_s", floor)
        for name, least in (("min_samples", 1), ("max_copies", 2)):
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
    """The extra load one tool's hedges may add (after Finagle's retry budget, whose floor
    adds to the share; here it is a floor under it, so a busy tool adds at most `max_extra`): over
    the last `WINDOW_S` seconds, hedges <= max(`max_extra` x calls, `floor_per_s` x `WINDOW_S`);
    and whether its backend is down (slow for everyone): more than `outage_share` of its
    recent calls, a moving average over about the last `OUTAGE_CALLS` (once it has seen that
    many), ran past their hedge delay, or fewer than `USEFUL` of its recent hedged calls were
    answered by a copy (then one copy every `PROBE_S` still starts, to tell when hedges help
    again). Counted under a lock; `clock` is monotonic seconds."""

    __slots__ = (
        "_calls",
        "_clock",
        "_floor",
        "_hedged",
        "_hedges",
        "_late",
        "_lock",
        "_outage",
        "_probe_at",
        "_queued",
        "_ratio",
        "_seen",
        "_slots",
        "_won",
    )

    def __init__(
        self,
        *,
        max_extra: float,
        floor_per_s: float,
        outage_share: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ratio = max_extra
        self._floor = floor_per_s * WINDOW_S
        self._outage = outage_share
        self._clock = clock
        self._slots = [-1] * WINDOW_S  # the second each slot counts
        self._calls = [0] * WINDOW_S
        self._hedges = [0] * WINDOW_S
        self._late = 0.0  # the recent calls' share that ran past their delay (moving average)
        self._seen = 0  # calls that told on time from late, up to OUTAGE_CALLS
        self._won = 0.0  # the recent hedged calls' share that a copy answered (moving average)
        self._hedged = 0  # hedged calls that told who answered, up to OUTAGE_CALLS
        self._probe_at = 0.0  # while hedges do not help: when the next copy may start
        self._queued = 0  # calls the budget held that still ask (first served as it refills)
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
        """A call started: it earns `max_extra` of a hedge."""
        with self._lock:
            _, i = self._slot()
            self._calls[i] += 1

    def tell(self, *, late: bool) -> None:
        """A call answered before its hedge delay (`late` False), or ran past it."""
        with self._lock:
            self._tell(1.0 if late else 0.0)

    def answered(self, *, by_copy: bool) -> None:
        """A call that started a copy was answered: by a copy (`by_copy`), or by its first
        request all the same (told only when the copy had run a typical call by then)."""
        with self._lock:
            self._won, self._hedged = _averaged(self._won, self._hedged, 1.0 if by_copy else 0.0)

    def withdraw(self, *, first: bool = True, queued: bool = False) -> HeldBy | None:
        """A call ran past its delay and wants one more copy: None if it may start one (and
        the copy is counted), else why not (`"outage"`, `"budget"`). Only a call's `first`
        wish tells it was late. A call held for `"budget"` is counted as waiting until it asks
        again with `queued` and gets its copy, or `leave`s: the copies the budget refills with
        go to the calls waiting before any call asking for the first time."""
        with self._lock:
            if first:
                self._tell(1.0)
            down = self._outage is not None and self._late > self._outage
            if down and self._seen >= OUTAGE_CALLS:
                return "outage"
            if self._outage is not None and self._hedged >= OUTAGE_CALLS and self._won < USEFUL:
                now = self._clock()
                if now < self._probe_at:
                    return "outage"
                self._probe_at = now + PROBE_S  # (if the budget allows it, this copy probes)
            second, i = self._slot()
            allowed = max(self._ratio * self._live(self._calls, second), self._floor)
            # Calls the budget already held go first: the longer a call has run past its delay,
            # the likelier it is a straggler (a call just past it mostly answers soon anyway).
            ahead = 0 if queued else self._queued
            if self._live(self._hedges, second) + 1 + ahead > allowed:
                self._queued += not queued
                return "budget"
            self._queued -= queued
            self._hedges[i] += 1
            return None

    def leave(self) -> None:
        """A call the budget held stopped asking (it was answered, or no copy will start)."""
        with self._lock:
            self._queued -= 1

    def _tell(self, late: float) -> None:
        self._late, self._seen = _averaged(self._late, self._seen, late)


def _averaged(mean: float, seen: int, value: float) -> tuple[float, int]:
    """`mean` of the last `seen` values with `value` added: their plain mean up to
    `OUTAGE_CALLS` values, a moving average over about that many after."""
    seen = min(OUTAGE_CALLS, seen + 1)
    return mean + (value - mean) / seen, seen


@dataclasses.dataclass(slots=True)
class Copies:
    """How one call was hedged: copies started (over its attempts), which one answered, and
    why a copy it wanted was not started: `held`, the first reason (None when none was held
    back), so that a straggler the budget held many times before its time ran out says
    "budget", not "time"; `times_held`, how often each reason held it, in that order."""

    started: int = 0
    winner: int | None = None
    held: HeldBy | None = None
    times_held: dict[HeldBy, int] = dataclasses.field(default_factory=dict)

    def hold(self, why: HeldBy) -> None:
        """A copy the call wanted was not started, for `why`."""
        if self.held is None:
            self.held = why
        self.times_held[why] = self.times_held.get(why, 0) + 1


async def race(
    call: Callable[[], Awaitable[Any]],
    *,
    name: str,
    hedge: Hedge,
    budget: HedgeBudget,
    copies: Copies,
) -> Any:
    """`call()` hedged: copy 0 now, one more after each `hedge.delay(name)` while none has
    answered (the first sooner when the step's time left would then be under `_FIT` typical
    calls; up to `max_copies`, while `budget` allows and the step's time left fits a typical
    call; one the budget held is asked for again every `_RETRY` x the delay). The first copy
    to answer wins; the others are cancelled the moment it answers and have closed before this
    returns. "Answers": the tool's coroutine returns, when `call` runs one made by `answering`
    (from inside LangChain's tool task, before the answer travels back through it); else
    `call()` returns (from the winning copy itself, before its answer travels back here). A
    copy that raises leaves the others running; when every copy raised, the first error is
    raised. Runs inside the step's guard: when it is cut, every copy is cancelled.

    Each copy is a task under a `Cut` of its own, cancelled once: an anyio task group would
    cancel a copy again and again, and so cancel the clean-up of the task LangChain runs a
    tool's coroutine in (httpcore closing the request), leaving the loser's connection open.
    Off asyncio (trio), the call runs alone."""
    budget.deposit()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        copies.started += 1
        return await call()
    delay = hedge.delay(name)
    field = _Field(loop)

    def start() -> asyncio.Task[Any]:
        copies.started += 1
        return field.start(call)

    error: BaseException | None = None
    told = False  # whether the call told the budget it ran past its delay, or not
    copied_at = 0.0  # when its first copy started (before `first_due`: the deadline's, early)
    queued = False  # the budget held it and it still asks (it is counted among those waiting)
    try:
        pending = {start()}
        started_at = loop.time()
        due = first_due = None if delay is None else started_at + delay
        # Under a deadline, the first copy starts no later than when the time left is
        # `_FIT` typical calls (once a typical call's time has passed: a copy sent sooner is no
        # better than the first): later, it would likely answer after the deadline, and below
        # one typical call it is not sent at all. A library that knows nothing of the time left
        # waits for its delay all the same.
        typical = hedge.typical(name)
        next_at = due if due is None or not typical else min(due, started_at + _latest(typical))
        while pending:
            wait = None if next_at is None else max(0.0, next_at - loop.time())
            done, pending = await asyncio.wait(pending, timeout=wait, return_when=FIRST_COMPLETED)
            if field.winner is not None:
                winning = field.tasks[field.winner]
                if not winning.done():  # it answered; a loser ended first: wait for its answer
                    pending, next_at = {winning}, None
                    continue
                if first_due is not None and not told:
                    budget.tell(late=loop.time() >= first_due)
                # Told whether its copy won, unless the copy started early (under a deadline: it
                # wins less) or the first request beat it before it had run a typical call: it
                # had no chance, which tells nothing of whether copies help (a call just past
                # its delay, most of those a p90 trigger hedges), only its cost, which the
                # budget bounds.
                if (
                    len(field.tasks) > 1
                    and first_due is not None
                    and copied_at >= first_due
                    and (field.winner or field.answered_at - copied_at >= typical)
                ):
                    budget.answered(by_copy=field.winner > 0)
                copies.winner = field.winner
                return winning.result()
            for task in sorted(done, key=field.tasks.index):
                if not task.cancelled():  # cancelled: by the loop shutting down
                    error = error or task.exception()
            if done or next_at is None or due is None or first_due is None:
                continue
            first = not told and loop.time() >= first_due  # it ran past its delay: it tells so
            told = told or first
            if len(field.tasks) >= hedge.max_copies:
                next_at = None
            elif (held := _held(hedge, name, budget, first=first, queued=queued)) is not None:
                copies.hold(held)
                if queued and held != "budget":  # it stops asking
                    budget.leave()
                queued = held == "budget"
                # The budget refills as calls come in: a call it held asks again a little later
                # (a straggler still has most of its time to run). Time only runs out, and an
                # outage tells itself over.
                next_at = None
                if held == "budget" and delay is not None:
                    next_at = loop.time() + _RETRY * delay
            else:
                queued = False
                if len(field.tasks) == 1:
                    copied_at = loop.time()
                pending.add(start())
                due = max(due, loop.time()) + (delay if delay is not None else 0.0)
                next_at = due
        assert error is not None
        raise error
    finally:
        if queued:
            budget.leave()
        await field.stop()


def _latest(typical: float) -> float:
    """Seconds from now until the step's time left is `_FIT` x `typical`, but at least
    `typical` (inf without a deadline)."""
    return max(typical, remaining() - _FIT * typical)


def _held(
    hedge: Hedge, name: str, budget: HedgeBudget, *, first: bool, queued: bool
) -> HeldBy | None:
    """Why the call's next copy may not start (None: it may, and it is counted); `first`: the
    call has just run past its delay (it tells the budget it was late); `queued`: the budget
    held it before."""
    if remaining() < hedge.typical(name):
        return "time"
    return budget.withdraw(first=first, queued=queued)


def answering(coroutine: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """`coroutine` (a tool's), telling the hedged race it runs in the moment it has answered:
    the first copy's answer cancels the others there and then, rather than once the answer has
    travelled back up through the tasks around it (LangChain runs a tool's coroutine in a task
    of its own: one loop iteration more, and each iteration runs whatever else is ready). Same
    signature (LangChain reads it for `config` and `callbacks`); outside a race, it only calls
    `coroutine`."""

    @functools.wraps(coroutine)
    async def answered(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        value = await coroutine(*args, **kwargs)
        won = _ANSWERED.get()
        if won is not None:
            won()
        return value

    return answered


class _Lost(Exception):
    """A copy cancelled because another answered (or the step ended)."""


class _Field:
    """One call's copies: each a task under a `Cut` of its own (cancellable once); the first
    to return cancels the others at once."""

    __slots__ = ("answered_at", "cuts", "loop", "tasks", "winner")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.tasks: list[asyncio.Task[Any]] = []
        self.cuts: dict[int, Cut] = {}
        self.winner: int | None = None
        self.answered_at = 0.0  # the loop's time when the winner answered

    def start(self, call: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
        task = self.loop.create_task(self._copy(call, len(self.tasks)))
        task.add_done_callback(_retrieve)  # a loser's error is never "never retrieved"
        self.tasks.append(task)
        return task

    async def _copy(self, call: Callable[[], Awaitable[Any]], i: int) -> Any:
        task = asyncio.current_task(self.loop)
        assert task is not None
        with Cut(self.loop, task) as cut:
            self.cuts[i] = cut
            _ANSWERED.set(functools.partial(self.won, i))  # this task's context (a copy's own)
            value = await call()
            self.won(i)  # a call that did not tell (not made by `answering`) wins here
            return value
        raise _Lost  # reached only when the cut swallowed its own cancellation

    def won(self, i: int) -> None:
        """Copy `i` has answered: the first to do so wins, and the others are cancelled now
        (their sockets start closing in this loop iteration)."""
        if self.winner is None:
            self.winner, self.answered_at = i, self.loop.time()
            self.cancel(but=i)

    def cancel(self, *, but: int | None = None) -> list[asyncio.Task[Any]]:
        """Cancel every copy still running but `but` (each once); a copy that has not started
        yet is cancelled before it runs (it has sent nothing). Returns those cancelled."""
        running = []
        for i, task in enumerate(self.tasks):
            if i == but or task.done():
                continue
            running.append(task)
            cut = self.cuts.get(i)
            if cut is None:
                task.cancel()
            else:
                cut.cancel()
        return running

    async def stop(self) -> None:
        """Cancel the copies still running and wait, shielded, for them to close (at most
        `CLOSE_GRACE_S`: a copy that ignores its cancellation is left to end alone)."""
        running = self.cancel()
        if running:
            with anyio.move_on_after(CLOSE_GRACE_S, shield=True):
                await asyncio.wait(running)


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
