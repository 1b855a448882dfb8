"""`StepRule`: a cap or min_viable decided when a step is planned, not when it is configured.

The core knows only this shape; what decides the numbers (a latency book, `_learn/`) lives in a
layer of its own and is handed to the settings as a value. `Step.plan` asks a rule for the
step's cap, for its min_viable and for the time to keep back for the steps that must follow,
once per planning; a rule answers from numbers it keeps (cheap), never from the graph.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["StepRule", "Timings"]


class Timings(Protocol):
    """What a rule reads of a latency book (`_learn.LatencyBook` is one): per step kind and
    name, how many samples it holds and their learned quantiles."""

    def count(self, name: str, kind: str = "node") -> int:
        """Samples of `(kind, name)`."""
        ...

    def seconds_at(self, name: str, kind: str, quantile: float) -> float | None:
        """The learned `quantile` of `(kind, name)`, in seconds (None: no samples)."""
        ...


class StepRule:
    """A cap and min_viable learned while running; subclassed by `_learn.Learned`.

    A plain class (not a Protocol or an ABC): `Step.plan` tells a rule from a number with one
    `isinstance`, on every step.
    """

    __slots__ = ()

    @property
    def ceiling(self) -> float | None:
        """The user's own cap: the most the rule ever gives, and what it gives when cold."""
        raise NotImplementedError

    @property
    def book(self) -> Timings | None:
        """The latency book the rule learns from (None: it learns from none)."""
        return None

    @property
    def floor(self) -> float:
        """The user's own min_viable: what the rule asks for when cold."""
        raise NotImplementedError

    def cap(self, kind: str, name: str) -> float | None:
        """The step's cap now (never above `ceiling`; None: no cap)."""
        raise NotImplementedError

    def min_viable(self, kind: str, name: str) -> float:
        """The least budget worth starting the step with now."""
        raise NotImplementedError

    def keep_back(self, kind: str, name: str, budget: float) -> float:
        """Seconds of `budget` (what the deadline leaves the step) to keep for the steps that
        must still run after it; 0 when none are named or there is no room."""
        raise NotImplementedError

    def keep_back_inside(self, kind: str, name: str, budget: float) -> tuple[float, float]:
        """Seconds the steps inside this one keep back for the steps after it, when `keep_back`
        keeps none from the step itself: every step inside (its model calls, requests), and its
        tool calls (whose cut does not end the run: they may keep back more); 0: none."""
        return 0.0, 0.0

    def idle_cap(self, kind: str, name: str) -> float | None:
        """The step's idle cap now: the longest gap with no progress it may show (None: not
        known yet; the step is watched, not cut)."""
        return None

    def held_for(self, held: float) -> str:
        """What `held` seconds were kept back for (for the step's record): the steps named."""
        raise NotImplementedError

    def refusal(self, kind: str, name: str, budget: float) -> str:
        """Why the step is not started with `budget`, in numbers (for its record)."""
        raise NotImplementedError

    def bounded(self, ceiling: float | None) -> StepRule:
        """This rule with its ceiling at most `ceiling` (a graph's `default_cap`)."""
        raise NotImplementedError
