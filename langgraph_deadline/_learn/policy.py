"""`learned(book, ...)`: a cap and a min_viable from what each step really takes.

Given where a cap is (`with_deadlines(caps=)`, `deadline_tools(caps=)`,
`deadline_tool(cap=)`, `budgeted(cap=)`), the cap is `headroom` times the step's learned
`quantile`, never above the user's `cap`; given where a min_viable is, the step is not started
when its chance to finish in its budget is below `p_viable`. Below `min_samples` samples the
user's `cap` and `min_viable` stand. The numbers are kept per step and worked out again only
when the book has grown by a sixteenth since (a planning reads them: a dict look-up).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Final

from .._core.rules import StepRule
from .._core.validate import check_number, check_seconds, check_step_cap, show
from .book import FIRST_TOKEN, GAP, KINDS, PER_TOKEN, LatencyBook
from .sketch import LatencySketch, empty_counts

__all__ = ["IDLE_HEADROOM", "STREAM_END", "Learned", "learned"]

_REFRESH: Final = 16  # work a step's numbers out again when its samples grew by 1/16
_THEN: Final = ("", "then")  # the memo's key for the steps named in `then`
IDLE_HEADROOM: Final = 2.0
"""An idle cap's headroom over a cap's (3x the learned quantile at the default 1.5): a stream's
longest gap is a maximum, and a loaded machine stretches the tail of maxima most (measured:
1.5x p99 of 25 ms streams cut 4 healthy ones in 200 under load, 3x none)."""
STREAM_END: Final = 0.05
"""Seconds a streamed answer needs after its last token (the closing chunks, the client's
work on them) within its budget: without it, an answer sized to end at the cut by its learned
rate ends just after it as often as not."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Numbers:
    count: int
    cap: float | None
    min_viable: float
    typical: float  # the learned median: what a step needs to be worth running at all
    high: float = 0.0  # the learned `quantile` itself


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Learned(StepRule):
    """A learned cap and min_viable (see `learned`); a value: its settings never change."""

    book: LatencyBook
    quantile: float = 0.99
    headroom: float = 1.5
    min_samples: int = 50
    ceiling: float | None = None
    floor: float = 0.0
    p_viable: float = 0.05
    then: tuple[str, ...] = ()
    _memo: dict[tuple[str, str], _Numbers] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    def _numbers(self, kind: str, name: str) -> _Numbers | None:
        """The step's learned numbers, None while the book holds too few samples."""
        count = self.book.count(name, kind)
        if count < self.min_samples or count == 0:
            return None
        memo = self._memo.get((kind, name))
        if memo is not None and count < memo.count + max(1, memo.count // _REFRESH):
            return memo
        sk = self.book.sketch(name, kind)
        high, low, mid = sk.quantile(self.quantile), sk.quantile(self.p_viable), sk.quantile(0.5)
        assert high is not None and low is not None and mid is not None
        cap = high.seconds * self.headroom
        if self.ceiling is not None:
            cap = min(cap, self.ceiling)
        numbers = _Numbers(count, cap, low.seconds, mid.seconds, high.seconds)
        self._memo[(kind, name)] = numbers
        return numbers

    def cap(self, kind: str, name: str) -> float | None:
        numbers = self._numbers(kind, name)
        return self.ceiling if numbers is None else numbers.cap

    def min_viable(self, kind: str, name: str) -> float:
        numbers = self._numbers(kind, name)
        return self.floor if numbers is None else numbers.min_viable

    def keep_back(self, kind: str, name: str, budget: float) -> float:
        """The learned `quantile` of each step in `then`, summed, when what stays leaves the
        step at least its own learned median (else the step takes it all: it runs now)."""
        if not self.then:
            return 0.0
        after = self._after()
        if after <= 0.0:
            return 0.0
        own = self._numbers(kind, name)
        need = own.typical if own is not None else 0.0
        return after if budget - after >= need else 0.0

    def held_for(self, held: float) -> str:
        return f"kept back {held:.2f} s for {', '.join(self.then)}"

    def _after(self) -> float:
        """The steps in `then`: their learned `quantile`s summed (the warm ones), kept until
        their samples grow by a sixteenth."""
        count = sum(_count_by_name(self.book, later) for later in self.then)
        memo = self._memo.get(_THEN)
        if memo is not None and count < memo.count + max(1, memo.count // _REFRESH):
            return memo.typical
        after = 0.0
        for later in self.then:
            sk = _by_name(self.book, later)
            if sk.count >= max(1, self.min_samples):
                est = sk.quantile(self.quantile)
                assert est is not None
                after += est.seconds
        self._memo[_THEN] = _Numbers(count, None, 0.0, after)
        return after

    def tokens_within(self, model: str, budget: float) -> int | None:
        """Output tokens model `model` (its id) can stream in `budget`: what is left after its
        learned `quantile` of time to first token and the stream's end (`STREAM_END`), at its
        learned `quantile` of seconds per token (a slow day's rate); at least 1. None while
        either is cold."""
        first = self._numbers(FIRST_TOKEN, model)
        per = self._numbers(PER_TOKEN, model)
        if first is None or per is None:
            return None
        return max(1, int((budget - first.high - STREAM_END) / per.high))

    def idle_cap(self, kind: str, name: str) -> float | None:
        """`headroom` x `IDLE_HEADROOM` x the learned `quantile` of the step's longest gaps
        with no progress,
        never above `ceiling`; None while the book holds fewer than `min_samples`. A quantile
        in the censored tail (more streams stalled than `1 - quantile`: their gaps are only
        known to be "at least" the cut) is not taken, or each stall would raise the cap it was
        cut at: the longest gap a stream that finished showed is, instead."""
        count = self.book.count(name, GAP)
        if count < self.min_samples or count == 0:
            return None
        memo = self._memo.get((GAP, name))
        if memo is None or count >= memo.count + max(1, memo.count // _REFRESH):
            sk = self.book.sketch(name, GAP)
            est = sk.quantile(self.quantile)
            assert est is not None
            high = est.seconds
            if est.at_least:
                finished = LatencySketch.of_counts(sk.counts()[0], empty_counts()).quantile(1.0)
                if finished is None:
                    return None  # only stalls seen: nothing to learn a healthy gap from
                high = finished.seconds
            cap = high * self.headroom * IDLE_HEADROOM
            if self.ceiling is not None:
                cap = min(cap, self.ceiling)
            memo = self._memo[(GAP, name)] = _Numbers(count, cap, 0.0, high, high)
        return memo.cap

    def refusal(self, kind: str, name: str, budget: float) -> str:
        sk = self.book.sketch(name, kind)
        p = sk.p_finish_within(budget)
        return (
            f"p(finish in {budget:.2f} s) = {p:.2f} < {self.p_viable:g}, "
            f"{sk.count} samples ({sk.censored} cut)"
        )

    def bounded(self, ceiling: float | None) -> Learned:
        if ceiling is None or (self.ceiling is not None and self.ceiling <= ceiling):
            return self
        return dataclasses.replace(self, ceiling=ceiling, _memo={})


def _count_by_name(book: LatencyBook, name: str) -> int:
    kind, sep, rest = name.partition(":")
    if sep and kind in KINDS:
        return book.count(rest, kind)
    return sum(book.count(name, k) for k in KINDS)


def _by_name(book: LatencyBook, name: str) -> LatencySketch:
    """A later step's sketch: `kind:name` for one kind, else every kind under `name`."""
    kind, sep, rest = name.partition(":")
    if sep and kind in KINDS:
        return book.sketch(rest, kind)
    return book.sketch(name)


def learned(
    book: LatencyBook,
    *,
    quantile: float = 0.99,
    headroom: float = 1.5,
    min_samples: int = 50,
    cap: float | None = None,
    min_viable: float = 0.0,
    p_viable: float = 0.05,
    then: Sequence[str] = (),
) -> Learned:
    """A cap and a min_viable learned by `book`, bounded by yours: give it wherever a cap or a
    min_viable goes.

    As a cap: `headroom` x the step's learned `quantile` (a step cut at its budget counts as
    "longer than that"), never above `cap`; with fewer than `min_samples` samples, `cap` (in
    `with_deadlines`, at most its `default_cap`). As a min_viable: the step is not started
    when its learned chance to finish in its budget is below `p_viable` (its record says so in
    numbers), and never refused when given its whole cap; when cold, `min_viable`. `then`
    names steps that must still run after this one (`"answer"`, `"node:answer"`): their learned
    `quantile`s are kept back from its budget, when that leaves it its learned median.

    ```python
    book = LatencyBook()
    search_cap = learned(book, quantile=0.99, headroom=1.5, min_samples=50, cap=5.0)
    ```

    Raises:
        TypeError: `book` is not a `LatencyBook`; a number or `then` of the wrong type.
        ValueError: `quantile` or `p_viable` outside (0, 1), `headroom` below 1,
            `min_samples` below 1, a bad `cap` (0 included) or `min_viable` (or one above
            the other).
    """
    if not isinstance(book, LatencyBook):
        raise TypeError(f"book must be a LatencyBook, got {type(book).__name__}: {show(book)}")
    q = _probability(quantile, "quantile")
    p = _probability(p_viable, "p_viable")
    room = check_number(headroom, "headroom", "a number >= 1")
    if room < 1.0:
        raise ValueError(f"headroom must be >= 1 (a cap below what steps take), got {show(room)}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int):
        raise TypeError(f"min_samples must be an int, got {type(min_samples).__name__}")
    if min_samples < 1:
        raise ValueError(
            f"min_samples must be >= 1, got {min_samples}: the samples a step needs before "
            "its cap is learned rather than yours"
        )
    ceiling = check_step_cap(cap, "cap")
    floor = check_seconds(min_viable, "min_viable")
    if ceiling is not None and floor > ceiling:
        raise ValueError(f"min_viable ({floor:g} s) is more than cap ({ceiling:g} s)")
    if isinstance(then, str) or not all(isinstance(n, str) for n in then):
        raise TypeError(f"then must be a list of step names, got {show(then)}")
    return Learned(book, q, room, min_samples, ceiling, floor, p, tuple(then))


def _probability(value: object, name: str) -> float:
    p = check_number(value, name, "a number in (0, 1)")
    if not 0.0 < p < 1.0 or math.isnan(p):
        raise ValueError(f"{name} must be in (0, 1), got {show(value)}")
    return p
