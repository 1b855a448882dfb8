"""Time for what must follow: a step keeps back what the steps after it on the way to the end need,
and never at the cost of the step itself when cutting it would end the run.

The paths come from the graph, read once when it is wrapped (`_graph/following.py`); this module
only prices them, from a latency book, when a step is planned. A path is the steps that can run one
after another after this one (parallel branches are separate paths, so they count as their longest);
what is kept back is the costliest path: each step at its learned `quantile`, at most three times
its median (`_STRAGGLER`; twice its median from a few samples; its `min_viable` when that is more),
plus the hand-off between two steps (`HANDOFF_BETWEEN`) for each step of the path. A later step the
book has not heard yet (and with no `min_viable`) is priced, for a step that is cut for it (a tool
call, an optional node, the tool calls inside a node), at a share of the time: what the priced steps
leave is shared evenly between that step and the unheard ones, so the first runs keep time back too,
from a prior that needs no configuration; for the other steps inside a node, at its hand-off only
(they may be calls whose cut ends the run, and the unheard step may take no time at all).

The rule, never worse than keeping nothing back: a step whose cut would end the run (a node that is
not `optional`) is never cut for what follows: cut there, the run would end at that step anyway,
only earlier, and with it any chance of an answer. The steps inside it keep the time back instead
(`keep_back_inside`: a tool call cut there answers with a timeout message, and the node returns in
time; its tool calls see a deadline of their own for it, `Plan.for_tools`). A step whose cut does
not end the run (an `optional` node: cut at its own budget, it is dropped and the run goes on; a
tool call: it answers with its timeout message) is cut for what follows as needed.
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
_STRAGGLER: Final = 3.0
"""A later step is kept back at most at this many times its median: beyond that a sample is a
straggler (a lognormal step with sigma 0.67 has its p95 here). With a few per cent of
stragglers, the p95 of a few dozen samples can be a straggler's time, and keeping that back
cut this step's tool calls in most runs for an answer that, straggling, the deadline would not
have held anyway (docs/benchmarks.md, "Learned budgets": 1.4 tools answered of 3)."""
HANDOFF_BETWEEN: Final = 0.025
"""Seconds from one step's end to the next one's start in the same run (LangGraph's superstep,
the checkpoint write, the event loop's queue): measured from the step records of
`python -m benchmarks --only learned` (next step's `started_at` minus the previous one's end,
10 runs at a time on 2 cores: p50 3 ms, p95 16 ms, p99 24 ms)."""
_REFRESH: Final = 16  # price the paths again when their samples grew by a sixteenth


@dataclasses.dataclass(slots=True)
class _Priced:
    count: int  # the samples the price was worked out from
    paths: tuple[tuple[float, int, tuple[str, ...]], ...]  # each path: (the time of its priced
    # steps with their hand-offs, how many of its steps are not heard yet, its steps)

    def after(self, budget: float, *, share: bool = True) -> tuple[float, tuple[str, ...]]:
        """The costliest path's time for a step with `budget`, and that path: its unheard
        steps each get an even share, with this step, of what its priced steps leave (only
        their hand-offs without `share`)."""
        seconds = 0.0
        worst: tuple[str, ...] = ()
        for fixed, cold, path in self.paths:
            total = (
                fixed + cold * max(0.0, budget - fixed) / (cold + 1) if cold and share else fixed
            )
            if total > seconds:
                seconds, worst = total, path
        return seconds, worst


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Following(StepRule):
    """A step's own cap (`inner`: a number, a rule or None), keeping back the time of the
    costliest of `paths` (node names) by the rule in the module's docstring: the steps inside
    it keep it back when its own cut would end the run; an `optional` step or a tool call keeps
    it back itself. `inner` gives the cap only (a
    `learned(..., then=[...])` cap is never wrapped: its steps are the user's word)."""

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
        """The costliest path's time, for a step whose cut does not end the run (an optional
        node, a tool call), when what stays leaves it a hand-off; else 0 (see the module: the
        steps inside it keep it back instead)."""
        if not (self.optional or kind == "tool"):
            return 0.0
        after = self._price().after(budget)[0]
        return after if after > 0.0 and budget - after > self.handoff else 0.0

    def keep_back_inside(self, kind: str, name: str, budget: float) -> tuple[float, float]:
        """The costliest path's time, kept back by the steps inside this one when it keeps none
        back itself (`keep_back`), when it leaves them some: (for every step inside, for its
        tool calls). A tool call cut there answers with a timeout message and the node returns
        in time, so the tool calls price later steps not heard yet at a share of the time;
        every other step inside counts only their hand-offs (it may be a call whose cut ends
        the run, its model call, and a share for a step that may take no time would starve
        it)."""
        priced = self._price()
        every = priced.after(budget, share=self.optional or kind == "tool")[0]
        tools = priced.after(budget)[0]
        room = budget - self.handoff
        return (every if 0.0 < every < room else 0.0, tools if 0.0 < tools < room else 0.0)

    def held_for(self, held: float) -> str:
        """The note of a step that kept back `held` s: for which path, and what each step of it
        was priced at (its learned quantile, twice its median, its `min_viable`, or not heard
        yet)."""
        path = self._price().after(held)[1]
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
        learned, label = 0.0, "not heard yet"
        if count >= max(_FIRST, self.min_samples):
            learned = book.seconds_at(name, "node", self.quantile) or 0.0
            label = f"p{self.quantile * 100:g}"
            bound = (book.seconds_at(name, "node", 0.5) or 0.0) * _STRAGGLER
            if bound < learned:
                learned, label = bound, f"{_STRAGGLER:g} x median"
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
        paths = []
        for path in self.paths:
            fixed, cold = 0.0, 0
            for step in path:
                seconds = self._step(step)
                if seconds is None:
                    cold += 1
                    fixed += self.handoff
                else:
                    fixed += seconds
            paths.append((fixed, cold, path))
        priced = _Priced(count, tuple(paths))
        self._priced[:] = [priced]
        return priced

    def _step(self, name: str) -> float | None:
        """One later step's time with the hand-off to it: its learned quantile once warm (twice
        its median while it has a few samples), never below its min_viable; None when the book
        has not heard it yet and it has no min_viable (it gets a share of the time)."""
        book = self.book
        count = book.count(name, "node")
        if count >= max(_FIRST, self.min_samples):
            seconds = book.seconds_at(name, "node", self.quantile)
            median = book.seconds_at(name, "node", 0.5)
            if seconds is not None and median is not None:
                seconds = min(seconds, median * _STRAGGLER)
        elif count >= _FIRST:
            median = book.seconds_at(name, "node", 0.5)
            seconds = None if median is None else median * _COLD_FACTOR
        else:
            seconds = None
        floor = self.floors.get(name, 0.0)
        if seconds is None and floor <= 0.0:
            return None
        return max(floor, seconds or 0.0) + self.handoff
