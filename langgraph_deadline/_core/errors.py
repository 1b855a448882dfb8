"""`DeadlineExceeded`: the one error this library raises when time runs out."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .records import Outcome, Terminal

if TYPE_CHECKING:
    from .deadline import Deadline

__all__ = ["DeadlineExceeded", "ScopeFrame", "Stalled"]


@dataclasses.dataclass(frozen=True, slots=True)
class ScopeFrame:
    """One open deadline scope: its name, the deadline it asked for, the one it got.

    `clamped` is True when an enclosing scope's earlier deadline won over the request.
    """

    name: str | None
    requested: Deadline
    effective: Deadline

    @property
    def clamped(self) -> bool:
        return self.effective < self.requested


class DeadlineExceeded(TimeoutError):
    """The deadline (or a step's budget) ran out. A `TimeoutError`, so LangGraph does not retry it.

    Attributes:
        deadline: the deadline that fired, when known.
        step: where it fired (a node, tool or scope name), when known.
        outcome: the run's `Outcome`, when a whole run ended with this error.
        scopes: the chain of open scopes, outermost first, when raised by `deadline_scope`.
        state: the partial state of the run, when a graph without deadline fields ended.
    """

    deadline: Deadline | None
    step: str | None
    outcome: Outcome
    scopes: tuple[ScopeFrame, ...]
    state: Any

    def __init__(
        self,
        message: str = "deadline exceeded",
        *,
        deadline: Deadline | None = None,
        step: str | None = None,
        outcome: Outcome | None = None,
        scopes: tuple[ScopeFrame, ...] = (),
        state: Any = None,
    ) -> None:
        super().__init__(message)
        self.deadline = deadline
        self.step = step
        self.outcome = outcome or Outcome(
            terminal=Terminal.DEADLINE_EXCEEDED, step=step, reason=message
        )
        self.scopes = scopes
        self.state = state

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (str(self), self.deadline, self.step, self.outcome, self.scopes, self.state),
        )


def _rebuild(
    message: str,
    deadline: Deadline | None,
    step: str | None,
    outcome: Outcome,
    scopes: tuple[ScopeFrame, ...],
    state: Any,
) -> DeadlineExceeded:
    return DeadlineExceeded(
        message, deadline=deadline, step=step, outcome=outcome, scopes=scopes, state=state
    )


class Stalled(DeadlineExceeded):
    """A step cut at its idle cap: no progress (a chunk, bytes, a heartbeat) for `gap` seconds.
    A `DeadlineExceeded`, so whatever handles a step cut at its budget handles it too; the
    time left is not spent, and a fallback, a retry or a hedge may take it."""

    gap: float

    def __init__(self, message: str, *, gap: float, step: str | None = None) -> None:
        super().__init__(message, step=step)
        self.gap = gap

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_stalled, (str(self), self.gap, self.step))


def _rebuild_stalled(message: str, gap: float, step: str | None) -> Stalled:
    return Stalled(message, gap=gap, step=step)
