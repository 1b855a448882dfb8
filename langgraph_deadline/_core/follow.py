"""Time for what must follow: a step keeps back what the steps after it on the way to the end
need, at their learned high quantile.

The paths come from the graph, read once when it is wrapped (`_graph/following.py`); this
module only prices them, from a latency book, when a step is planned. A path is the steps that
can run one after another after this one (parallel branches are separate paths, so they count
as their longest); what is kept back is the costliest path: each step at its learned `quantile`
(the user's `min_viable` for it while the book holds fewer than `min_samples` of it), plus the
hand-off between two steps (`HANDOFF_BETWEEN`) for each step of the path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from .rules import StepRule, Timings

__all__ = ["FOLLOW_MIN_SAMPLES", "FOLLOW_QUANTILE", "HANDOFF_BETWEEN", "Following"]

FOLLOW_QUANTILE: Final = 0.95
"""The quantile a later step is kept back at: what it usually needs at most. Not its p99: with
a few per cent of stragglers the p99 is a straggler, and keeping that back starves this step
(docs/benchmarks.md, "Learned budgets")."""
FOLLOW_MIN_SAMPLES: Final = 20
"""Below this many samples of a later step, its learned quantile is not trusted: one straggler
among a few samples is their p95. From `_FIRST` samples on, twice their median is kept back
instead (one straggler does not move a median); below that, the step's `min_viable` (0 unless
given)."""
_FIRST: Final = 3
_COLD_FACTOR: Final = 2.0  # a lognormal step with sigma 0.4 has its p95 at 1.9 x its median
HANDOFF_BETWEEN: Final = 0.025
"""Seconds from one step's end to the next one's start in the same run (LangGraph's superstep,
the checkpoint write, the event loop's queue): measured from the step records of
`python -m benchmarks --only learned` (next step's `started_at` minus the previous one's end,
10 runs at a time on 2 cores: p50 3 ms, p95 16 ms, p99 24 ms)."""
_REFRESH: Final = 16  # price the paths again when their samples grew by a sixteenth


@dataclasses.dataclass(slots=True)
class _Priced:
    count: int  # the samples the price was worked out from
    seconds: float  # the costliest path's time
    path: tuple[str, ...]  # that path
    own: dict[tuple[str, str], tuple[int, float]]  # (kind, name): (count, its own time)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Following(StepRule):
    """A step's own cap (`inner`: a number, a rule or None), keeping back the time of the
    costliest of `paths` (node names) when its budget leaves room for it.

    Room: what stays leaves the step its own learned high quantile. Else the step itself is
    not cut for what follows (cut there, most of its runs would end the run), but the steps
    inside it are (`keep_back_inside`: a tool call answers with a timeout message, and the
    node returns in time). An `optional` step (cut at its own budget, it is dropped and the
    run goes on) needs no such room: it keeps back what follows whenever a hand-off is left to
    it. `inner` gives
    the cap only (a `learned(..., then=[...])` cap is never wrapped: its steps are the user's
    word)."""

    inner: float | StepRule | None
    paths: tuple[tuple[str, ...], ...]
    book: Timings
    floors: Mapping[str, float] = dataclasses.field(default_factory=dict)
    quantile: float = FOLLOW_QUANTILE
    min_samples: int = FOLLOW_MIN_SAMPLES
    handoff: float = HANDOFF_BETWEEN
    optional: bool = False
    _priced: list[_Priced] = dataclasses.field(default_factory=list, repr=False, compare=False)

    @property
    def ceiling(self) -> float | None:
        inner = self.inner
        return inner.ceiling if isinstance(inner, StepRule) else inner

    @property
    def floor(self) -> float:
        return 0.0

    def cap(self, kind: str, name: str) -> float | None:
        inner = self.inner
        return inner.cap(kind, name) if isinstance(inner, StepRule) else inner

    def min_viable(self, kind: str, name: str) -> float:
        inner = self.inner
        return inner.min_viable(kind, name) if isinstance(inner, StepRule) else 0.0

    def keep_back(self, kind: str, name: str, budget: float) -> float:
        """The costliest path's time, when what stays leaves this step its own learned high
        quantile (else 0: cut for what follows, it would end the run in its own usual time);
        an optional step's, when what stays leaves it a hand-off (cut, it is only dropped)."""
        priced = self._price()
        after = priced.seconds
        if after <= 0.0:
            return 0.0
        if self.optional:
            return after if budget - after > self.handoff else 0.0
        if budget - after < self._own(priced, kind, name):
            return 0.0
        return after

    def keep_back_inside(self, kind: str, name: str, budget: float) -> float:
        """The costliest path's time, for the steps inside this one, when it leaves them some:
        a tool call cut there answers with a timeout message, and the node returns in time."""
        after = self._price().seconds
        return after if 0.0 < after < budget - self.handoff else 0.0

    def held_for(self, held: float) -> str:
        """The note of a step that kept back `held` s: for which path, and what each step of it
        was priced at (its learned quantile, twice its median, its `min_viable`, or nothing yet
        but the hand-off)."""
        path = self._price().path
        bases = [self._basis(step) for step in path]
        if len(set(bases)) == 1:
            basis = bases[0]
        else:
            basis = "; ".join(f"{step}: {b}" for step, b in zip(path, bases, strict=True))
        return f"kept back {held:.2f} s for {' -> '.join(path)} ({basis}, with hand-offs)"

    def _basis(self, name: str) -> str:
        """What `_step` priced a later step at, in words."""
        book = self.book
        count = book.count(name, "node")
        learned, label = 0.0, "no samples yet"
        if count >= max(_FIRST, self.min_samples):
            learned = book.seconds_at(name, "node", self.quantile) or 0.0
            label = f"p{self.quantile * 100:g}"
        elif count >= _FIRST:
            learned = (book.seconds_at(name, "node", 0.5) or 0.0) * _COLD_FACTOR
            label = f"{_COLD_FACTOR:g} x median"
        floor = self.floors.get(name, 0.0)
        return "min_viable" if floor > 0.0 and floor >= learned else label

    def refusal(self, kind: str, name: str, budget: float) -> str:
        inner = self.inner
        return inner.refusal(kind, name, budget) if isinstance(inner, StepRule) else ""

    def bounded(self, ceiling: float | None) -> Following:
        inner = self.inner
        if not isinstance(inner, StepRule):
            return self
        return dataclasses.replace(self, inner=inner.bounded(ceiling), _priced=[])

    # -- pricing ------------------------------------------------------------------------------

    def _price(self) -> _Priced:
        """The costliest path now, worked out again when its steps' samples grew by 1/16 (a
        planning reads a few counts: one dict look-up per later step)."""
        book = self.book
        count = 0
        for path in self.paths:
            for step in path:
                count += book.count(step, "node")
        kept = self._priced
        if kept and count < kept[0].count + max(1, kept[0].count // _REFRESH):
            return kept[0]
        seconds = 0.0
        worst: tuple[str, ...] = ()
        for path in self.paths:
            total = sum(self._step(step) for step in path)
            if total > seconds:
                seconds, worst = total, path
        priced = _Priced(count, seconds, worst, {} if not kept else kept[0].own)
        self._priced[:] = [priced]
        return priced

    def _step(self, name: str) -> float:
        """One later step's time: its learned quantile once warm (twice its median while it has
        a few samples), never below its min_viable; and the hand-off to it."""
        book = self.book
        count = book.count(name, "node")
        if count >= max(_FIRST, self.min_samples):
            seconds = book.seconds_at(name, "node", self.quantile)
        elif count >= _FIRST:
            median = book.seconds_at(name, "node", 0.5)
            seconds = None if median is None else median * _COLD_FACTOR
        else:
            seconds = None
        floor = self.floors.get(name, 0.0)
        return max(floor, seconds or 0.0) + self.handoff

    def _own(self, priced: _Priced, kind: str, name: str) -> float:
        """This step's own learned `quantile` (twice its median from a few samples; 0 below),
        kept until its samples grow by 1/16."""
        book = self.book
        count = book.count(name, kind)
        if count < _FIRST:
            return 0.0
        kept = priced.own.get((kind, name))
        if kept is not None and count < kept[0] + max(1, kept[0] // _REFRESH):
            return kept[1]
        if count >= self.min_samples:
            seconds = book.seconds_at(name, kind, self.quantile) or 0.0
        else:
            seconds = (book.seconds_at(name, kind, 0.5) or 0.0) * _COLD_FACTOR
        priced.own[(kind, name)] = (count, seconds)
        return seconds
