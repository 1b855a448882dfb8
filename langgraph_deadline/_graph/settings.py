"""The options of the LangGraph layer as values: one frozen type per concern, checked once."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from .._core.rules import StepRule, Timings

__all__ = ["CLOSING", "Closing", "GraphSettings", "NodeSettings"]


@dataclasses.dataclass(frozen=True, slots=True)
class Closing:
    """How a run of a messages state that ran out of time ends: with a short assistant reply
    saying the answer is incomplete (`message`; with a `reserve`, the time to write it),
    starting with what a node cut mid-answer had streamed, marked as cut short
    (`partial_answer`). `with_deadlines(graph, closing=Closing(partial_answer=False))`.

    Raises:
        TypeError: a flag that is not a bool.
    """

    message: bool = True
    partial_answer: bool = True

    def __post_init__(self) -> None:
        for flag in ("message", "partial_answer"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"Closing's {flag} must be a bool, got {getattr(self, flag)!r}")


CLOSING: Final = Closing()
"""The default: a closing reply, with the partial answer."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeSettings:
    """One node's budget: `min(cap, remaining - reserve)`, not started below `min_viable`.

    `cap` and `min_viable` may be learned (`StepRule`s, asked when each run is planned).
    `reserve` None holds back the run's reserve; `retry` is the node's LangGraph `RetryPolicy`
    (one, a sequence, or None), so that a retry whose backoff cannot fit is not waited for;
    `optional`: cut at its own budget, the node writes no update and the run goes on.
    """

    cap: float | StepRule | None = None
    min_viable: float | StepRule = 0.0
    reserve: float | None = None
    retry: Any = None  # RetryPolicy | Sequence[RetryPolicy] | None
    optional: bool = False
    idle_cap: float | StepRule | None = None  # the longest gap between two heartbeats


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GraphSettings:
    """A `with_deadlines` graph's run options; `has_fields` when its state has the deadline
    fields (the outcome is returned in state, not raised); `closing_message` adds a short reply
    to a messages state that ran out of time (with a `reserve`, the time to give it), starting
    with what a node cut mid-answer had streamed when `partial_answer`; `has_state` False for an
    entrypoint (Functional API), whose runs return a value: one that ends early raises
    `DeadlineExceeded` with `.state` None, and no state is read for it; `queue_time`, for a
    graph LangGraph Server runs, the most queue time taken from a run's budget (None: the budget
    counts from when the run starts; see `_graph/inputs.py`)."""

    timeout: float | None = None
    reserve: float = 0.0
    has_fields: bool = False
    closing_message: bool = True
    partial_answer: bool = True
    has_state: bool = True
    queue_time: float | None = None
    guarded_retries: bool = False  # a node has a RetryPolicy: runs put themselves in context
    book: Timings | None = None  # attached to each run: its model calls' learned output rate
