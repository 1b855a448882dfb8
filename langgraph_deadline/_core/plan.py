"""A step's budget, decided once when it starts: `min(cap, remaining - reserve)`."""

from __future__ import annotations

import dataclasses
import time
from typing import Final

from .clock import SYSTEM_CLOCK
from .context import current_deadline
from .deadline import Deadline, earliest
from .records import StepKind, StepRecord, StepStatus
from .tracker import RunTracker

__all__ = ["HANDOFF", "Plan", "plan_step"]

HANDOFF: Final = 0.01
"""Seconds a step clamped by an enclosing deadline ends before it, so that the step's own
graceful answer (a timeout message, an outcome in state) is delivered before the enclosing
scope cancels its caller. Steps limited by their own cap are not shortened."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A step's budget, decided once when it starts. `budget` None: no deadline and no cap."""

    name: str
    kind: StepKind
    attempt: int
    deadline: Deadline | None
    remaining: float | None
    cap: float | None
    budget: float | None
    min_viable: float
    started: float
    sync: bool = False
    started_at: float = 0.0

    @property
    def skip(self) -> bool:
        """True when the step must not start: a deadline is in force and the budget is too small."""
        if self.budget is None:
            return False
        return self.budget <= 0.0 or self.budget < self.min_viable

    @property
    def clamped(self) -> bool:
        """True when the run's deadline (not the step's cap) set the budget."""
        if self.budget is None or self.deadline is None:
            return False
        return self.cap is None or self.budget < self.cap

    def step_deadline(self) -> Deadline | None:
        if self.budget is None:
            return None
        clock = self.deadline.clock if self.deadline else SYSTEM_CLOCK
        return Deadline._after(self.budget, clock).earliest(self.deadline)

    def record(
        self,
        status: StepStatus,
        *,
        side_effect_started: bool = False,
        cancel_source: str | None = None,
    ) -> StepRecord:
        return StepRecord(
            name=self.name,
            kind=self.kind,
            attempt=self.attempt,
            remaining_ms=_ms(self.remaining),
            requested_ms=_ms(self.cap),
            allocated_ms=_ms(self.budget),
            clamped=self.clamped,
            elapsed_ms=(time.monotonic() - self.started) * 1000.0,
            status=status,
            side_effect_started=side_effect_started,
            cancel_source=cancel_source,
            started_at=self.started_at,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def plan_step(
    name: str,
    kind: StepKind,
    *,
    cap: float | None,
    min_viable: float,
    reserve: float | None = None,
    deadline: Deadline | None = None,
    attempt: int = 1,
    run: RunTracker | None = None,
    sync: bool = False,
) -> Plan:
    """Decide a step's budget now: `min(cap, remaining - reserve)` against every known deadline.

    The deadline is the earliest of the one given (from state), the one in context and the run's.
    The run's reserve is held back from the run's own deadline (state or tracker) only: a
    deadline in context inside a step is that step's budget, from which it was already held
    back, and is not cut twice. An explicit `reserve` is held back from all of them.
    """
    ctx = current_deadline()
    own = earliest(deadline, run.deadline if run else None)
    d = earliest(own, ctx)
    if d is None:
        left = None
        budget = cap
    else:
        left = d.remaining()
        if reserve is not None:
            budget = d._budget(cap, reserve)
        else:
            budget = own._budget(cap, run.reserve if run else 0.0) if own is not None else cap
            if ctx is not None:
                from_ctx = ctx._budget(None, 0.0)
                budget = from_ctx if budget is None or from_ctx < budget else budget
        assert budget is not None
        if cap is None or budget < cap:
            budget = max(0.0, budget - HANDOFF)
    return Plan(
        name=name,
        kind=kind,
        attempt=attempt,
        deadline=d,
        remaining=left,
        cap=cap,
        budget=budget,
        min_viable=min_viable,
        started=time.monotonic(),
        sync=sync,
        started_at=time.time(),
    )
