"""A step's budget, decided once when it starts: `min(cap, remaining - reserve)`."""

from __future__ import annotations

import time
from typing import Final, NamedTuple

from .clock import SYSTEM_CLOCK
from .context import current_deadline
from .deadline import Deadline
from .records import StepKind, StepRecord, StepStatus
from .rules import StepRule
from .tracker import RunTracker

__all__ = ["HANDOFF", "Plan", "plan_step", "run_step_end"]

HANDOFF: Final = 0.01
"""Seconds a step clamped by an enclosing deadline ends before it, so that the step's own
graceful answer (a timeout message, an outcome in state) is delivered before the enclosing
scope cancels its caller. Steps limited by their own cap are not shortened."""


class Plan(NamedTuple):
    """A step's budget, decided once when it starts. `budget` None: no deadline and no cap.

    A named tuple: immutable, and made for every step at a third of a frozen dataclass's cost."""

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
    ends: Deadline | None = None  # the step's own deadline: `budget` from `started`
    note: str | None = None  # for its record: a learned refusal's numbers, a fallback's cause
    held: float = 0.0  # seconds kept back for the steps that follow, when that set the budget

    @property
    def skip(self) -> bool:
        """True when the step must not start: a deadline is in force and the budget is too small."""
        if self.budget is None:
            return False
        return self.budget <= 0.0 or self.budget < self.min_viable

    @property
    def clamped(self) -> bool:
        """True when the run's deadline set the budget: not the step's cap, nor the time kept
        back for the steps that must follow it (`held`), which are the step's own limits (a
        step cut at either is cut at its own budget, `cancel_source="step_cap"`)."""
        if self.budget is None or self.deadline is None or self.held > 0.0:
            return False
        return self.cap is None or self.budget < self.cap

    def step_deadline(self) -> Deadline | None:
        """The instant the step's budget runs out (None: no budget)."""
        return self.ends

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
            note=self.note,
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def run_step_end(run: RunTracker) -> Deadline:
    """The instant every step clamped by the run's own deadline ends at: the same `Deadline`
    object for all of them, so that they can share one timer (`alarm.py`)."""
    assert run.deadline is not None
    kept = run.step_end
    if kept is not None and kept[0] is run.deadline:
        return kept[1]
    end = run.deadline._moved(-(run.reserve + HANDOFF))
    run.step_end = (run.deadline, end)
    return end


def plan_step(
    name: str,
    kind: StepKind,
    *,
    cap: float | StepRule | None,
    min_viable: float | StepRule,
    reserve: float | None = None,
    deadline: Deadline | None = None,
    attempt: int = 1,
    run: RunTracker | None = None,
    sync: bool = False,
    started: float | None = None,
) -> Plan:
    """Decide a step's budget now: `min(cap, remaining - reserve)` against every known deadline.

    The deadline is the earliest of the one given (from state), the one in context and the run's.
    The run's reserve is held back from the run's own deadline (state or tracker) only: a
    deadline in context inside a step is that step's budget, from which it was already held
    back, and is not cut twice. An explicit `reserve` is held back from all of them.
    `started` (a `time.monotonic()` reading) dates a plan made after the step began.

    A `StepRule` (a learned cap or min_viable, `_learn/`) is asked for its numbers here, once:
    the cap (at most the user's), the min_viable (at most the cap: a step given its whole cap
    always starts), and the time to keep back for the steps named to follow it.
    """
    rule = viable = None
    held = 0.0
    if isinstance(cap, StepRule):
        rule = cap
        cap = rule.cap(kind, name)
    if isinstance(min_viable, StepRule):
        viable = min_viable
        min_viable = viable.min_viable(kind, name)
        if cap is not None and min_viable > cap:
            min_viable = cap
    ctx = current_deadline()
    run_deadline = run.deadline if run is not None else None
    own = run_deadline if deadline is None else deadline.earliest(run_deadline)
    d = ctx if own is None else own.earliest(ctx)
    now = time.monotonic()
    if started is None:
        started = now
    started_at = time.time() - (now - started)
    if d is None:
        left = None
        budget = cap
        ends = None if cap is None else Deadline._after(cap, SYSTEM_CLOCK)
    else:
        clock = d.clock
        if clock is not SYSTEM_CLOCK:
            now = clock.monotonic()
        left = max(0.0, d._mono - now)
        shared = False  # the run's own deadline sets this budget (see `run_step_end`)
        if reserve is not None:
            budget = left - reserve
        else:
            budget = (own._mono - now - (run.reserve if run else 0.0)) if own is not None else None
            shared = run is not None and own is run.deadline
            if ctx is not None:
                from_ctx = ctx._mono - now
                if budget is None or from_ctx < budget:
                    budget, shared = from_ctx, False
        assert budget is not None
        if rule is not None and (held := rule.keep_back(kind, name, budget)) > 0.0:
            budget, shared = budget - held, False
        # A clamped step ends HANDOFF before the enclosing deadline; one its cap set does not.
        if cap is not None and cap <= budget:
            budget, shared, held = cap, False, 0.0
        else:
            budget = max(0.0, budget - HANDOFF)
        if shared and budget > 0.0:
            assert run is not None
            ends = run_step_end(run)
        else:
            ends = d._moved(now + budget - d._mono) if now + budget < d._mono else d
    note = None
    if viable is not None and budget is not None and 0.0 < budget < min_viable:
        note = viable.refusal(kind, name, budget)
    elif held > 0.0:
        assert rule is not None
        note = rule.held_for(held)
    return Plan(
        name=name,
        kind=kind,
        attempt=attempt,
        deadline=d,
        remaining=left,
        cap=cap,
        budget=budget,
        min_viable=min_viable,
        started=started,
        sync=sync,
        started_at=started_at,
        ends=ends,
        note=note,
        held=held,
    )
