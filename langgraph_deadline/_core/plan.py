"""A run and its steps' budgets: each decided once, when the step starts, as
`min(cap, remaining - reserve)`.

- `RunTracker`: the run's bookkeeping, shared by every step of one run and carried in its config
  (`run_from_config`): its deadline and reserve, its records, the plans of the steps in flight.
- `Step`, `Plan`: a step by its name and limits, and its budget against every
  deadline it knows (the one in state, the one in context, the run's).
- `RunTracker.steps_end`, `RunAlarm`: the one instant the run's clamped steps end at, and the
  one timer for it (below).

A step is planned against its run, and the run holds the plans of its steps in flight, the
instant they end at and the timer for that instant.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final, NamedTuple, overload

from .context import CancelSignal, current_deadline, current_signal, tools_deadline
from .cut import GRACE, Cut, Due
from .deadline import SYSTEM_CLOCK, Deadline
from .follow import HANDOFF_BETWEEN
from .observe import emit_step
from .records import StepKind, StepRecord, StepStatus, step_link
from .rules import StepRule, Timings

__all__ = [
    "HANDOFF",
    "RUN_KEY",
    "Plan",
    "RunAlarm",
    "RunTracker",
    "Step",
    "current_parent",
    "new_run_id",
    "run_from_config",
    "step_budget",
]

HANDOFF: Final = 0.01
"""Seconds a step clamped by an enclosing deadline ends before it, so that the step's own
graceful answer (a timeout message, an outcome in state) is delivered before the enclosing
scope cancels its caller. Steps limited by their own cap are not shortened."""


PARENT: Final[ContextVar[str | None]] = ContextVar("langgraph_deadline.parent", default=None)
"""The `link` of the step whose body runs here: a step planned here ran inside it (its record's
`parent`). Set by `record.child_records`."""


def current_parent() -> str | None:
    """The `link` of the step whose body runs here, or None."""
    return PARENT.get()


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
    parent: str | None = None  # the `link` of the step it runs inside
    inside: Deadline | None = None  # the deadline its own steps see, when before `ends`: with
    # time kept back, they end a hand-off before it, so that it returns what they gave in time
    within: float = 0.0  # seconds kept back by its steps only (the step itself is not cut
    # for them: `StepRule.keep_back_inside`)
    idle: float | None = None  # its idle cap: cut after this long with no progress (inf: its
    # gaps are watched, to be learned, but it is not cut; None: not watched)
    for_tools: Deadline | None = None  # the deadline its own tool calls see, when before
    # `inside`: the time they keep back for what follows it (a tool call's cut does not end the
    # run: `StepRule.keep_back_inside`)

    @property
    def link(self) -> str:
        """How the steps run inside this one name it (its record's `link`)."""
        return step_link(self.name, self.started_at)

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
        step cut at either is cut at its own budget: `cut_source`)."""
        if self.budget is None or self.deadline is None or self.held > 0.0:
            return False
        return self.cap is None or self.budget < self.cap

    @property
    def cut_source(self) -> str:
        """The `cancel_source` of the step cut at its budget: `run_deadline` when the deadline
        set it, `kept_back` when the time kept back for the steps after it did, else
        `step_cap` (its own cap)."""
        if self.clamped:
            return "run_deadline"
        if self.held > 0.0:  # (0 when its cap set the budget)
            return "kept_back"
        return "step_cap"

    def step_deadline(self) -> Deadline | None:
        """The instant the step's budget runs out (None: no budget)."""
        return self.ends

    def record(
        self,
        status: StepStatus,
        *,
        side_effect_started: bool = False,
        cancel_source: str | None = None,
        note: str | None = None,
        gap: float | None = None,
    ) -> StepRecord:
        held = self.held or self.within
        return StepRecord._of(  # the fields in their order (`StepRecord`)
            (
                self.name,
                self.kind,
                self.attempt,
                None if self.remaining is None else round(self.remaining * 1000.0, 3),
                None if self.cap is None else round(self.cap * 1000.0, 3),
                None if self.budget is None else round(self.budget * 1000.0, 3),
                self.clamped,
                (time.monotonic() - self.started) * 1000.0,
                status,
                side_effect_started,
                cancel_source,
                self.started_at,
                note or self.note,
                0,
                None,
                None,
                self.parent,
                _held_ms(held),
                None if gap is None else round(gap * 1000.0, 3),
            )
        )


# -- the run --------------------------------------------------------------------------------------


def _held_ms(seconds: float | None) -> float | None:
    """The time a step kept back for what follows it, in ms; None when it kept none back."""
    if not seconds:
        return None
    return round(seconds * 1000.0, 3) or None


def new_run_id() -> str:
    """A random 128-bit id, as hex: unique per run (a forked child reseeds `random`) and made
    without `uuid.uuid4()`, which code under test mocks to count LangGraph's own ids."""
    return f"{random.getrandbits(128):032x}"


@dataclasses.dataclass(slots=True, eq=False)
class RunTracker:
    """Mutable, run-scoped bookkeeping shared by every step of one run (carried in its config):
    what the engine needs (its deadline and reserve, its records, the steps in flight, its cancel
    signal, its one timer). What the graph layer keeps of a run beside it is `GraphRun`'s
    (`_graph/chunks.py`)."""

    deadline: Deadline | None
    reserve: float = 0.0
    started: float = dataclasses.field(default_factory=time.monotonic)
    records: list[StepRecord] = dataclasses.field(default_factory=list)
    in_flight: dict[int, Plan] = dataclasses.field(default_factory=dict)
    backstop_fired: bool = False
    run_id: str = dataclasses.field(default_factory=new_run_id)
    signal: CancelSignal = dataclasses.field(default_factory=lambda: CancelSignal(current_signal()))
    started_at: float = dataclasses.field(default_factory=time.time)
    # The instant the run's nodes end at (its deadline less reserve and hand-off, for the
    # deadline it was computed from), and the one timer for it (`RunAlarm`).
    step_end: tuple[Deadline, Deadline] | None = None
    alarm: RunAlarm | None = None
    book: Timings | None = None  # the latency book attached to the run (`with_deadlines(book=)`)

    def steps_end(self) -> Deadline:
        """The instant every step clamped by the run's own deadline ends at: the same `Deadline`
        object for all of them, so that they can share one timer (`RunAlarm`)."""
        assert self.deadline is not None
        kept = self.step_end
        if kept is not None and kept[0] is self.deadline:
            return kept[1]
        end = self.deadline._moved(-(self.reserve + HANDOFF))
        self.step_end = (self.deadline, end)
        return end

    def close_alarm(self) -> None:
        """The run is over: its nodes' shared timer goes."""
        if self.alarm is not None:
            self.alarm.close()
            self.alarm = None

    def clock_now(self) -> float:
        return time.monotonic()

    def close(self, key: int, record: StepRecord) -> bool:
        """Record a step once: after the backstop has closed a step, its late record is dropped."""
        if self.in_flight.pop(key, None) is None and self.backstop_fired:
            return False
        self.records.append(record)
        return True

    def fire_backstop(self) -> list[StepRecord]:
        """The run's own deadline hit: close every step still in flight; return their records."""
        self.backstop_fired = True
        closed = []
        for plan in self.in_flight.values():
            status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
            closed.append(plan.record(status, cancel_source="run_deadline"))
        self.in_flight.clear()
        self.records.extend(closed)
        deadline_at = self.deadline.timestamp if self.deadline else None
        for record in closed:
            emit_step(record, self.run_id, deadline_at)
        return closed


RUN_KEY: Final = "__pregel_langgraph_deadline_run"
"""Where a run's tracker rides in `config["configurable"]`. LangGraph leaves its `__pregel_` keys
out of what users see of a config (checkpoints' metadata and debug events), and so this one."""


def run_from_config(config: Mapping[str, Any] | None) -> RunTracker | None:
    """The run's tracker, carried in `config["configurable"]` (a dunder key: never checkpointed)."""
    if not config:
        return None
    run = config.get("configurable", {}).get(RUN_KEY)
    return run if isinstance(run, RunTracker) else None


# -- planning a step ------------------------------------------------------------------------------


@overload
def step_budget(cap: float | None, left: float) -> float: ...
@overload
def step_budget(cap: float | None, left: None) -> float | None: ...
def step_budget(cap: float | None, left: float | None) -> float | None:
    """The one rule under every budget: `min(cap, left)`, where `left` is what the deadlines
    in force leave once the reserve and the time for what follows are kept back (None: no
    deadline). Set by them, the step ends a hand-off early, so that its answer is delivered
    before they pass; set by its own cap, it is not shortened. Never negative, never more
    than `cap`, nor than `left` when any is left: a step's deadline is never later than one
    in force, and a deadline only ever gets earlier as steps nest."""
    if left is None:
        return cap
    if cap is not None and cap <= left:
        return cap
    return max(0.0, left - HANDOFF)


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """A step by its name and limits, as a face runs it: a node, a `@task`, a tool call, a
    model call. Every face follows the one sequence: `plan` decides its budget now, the engine
    runs the plan (`step.run_async`/`run_sync`: refused below what it needs, else cut at its
    budget), and the face answers how it ended (`StepResult`)."""

    name: str
    kind: StepKind
    cap: float | StepRule | None = None
    min_viable: float | StepRule = 0.0
    reserve: float | None = None
    idle_cap: float | StepRule | None = None

    def plan(
        self,
        *,
        run: RunTracker | None = None,
        deadline: Deadline | None = None,
        attempt: int = 1,
        sync: bool = False,
        started: float | None = None,
    ) -> Plan:
        """Its budget now: `min(cap, remaining - reserve)` against every known deadline.

        The deadline is the earliest of the one given (from state), the one in context and the
        run's. The run's reserve is held back from the run's own deadline (state or tracker)
        only: a deadline in context inside a step is that step's budget, from which it was
        already held back, and is not cut twice. An explicit `reserve` is held back from all of
        them. `started` (a `time.monotonic()` reading) dates a plan made after the step began.

        A `StepRule` (a learned cap or min_viable, `_learn/`) is asked for its numbers here, once:
        the cap (at most the user's), the min_viable (at most the cap: a step given its whole cap
        always starts), and the time to keep back for the steps named to follow it.

        `idle_cap` (seconds, or a rule) is the longest gap with no progress before the step is cut
        as stalled; a learned one is never above the step's cap, and while cold the step is only
        watched (`Plan.idle` inf) so that its gaps are learned.
        """
        name, kind, cap, min_viable = self.name, self.kind, self.cap, self.min_viable
        rule = viable = None
        if isinstance(cap, StepRule) or isinstance(min_viable, StepRule):
            cap, min_viable, rule, viable = _asked(cap, min_viable, kind, name)
        own, ctx, kept = _deadlines(kind, run, deadline)
        d = ctx if own is None else own.earliest(ctx)
        now = time.monotonic()
        if started is None:
            started = now
        started_at = time.time() - (now - started)
        if d is None:
            left = inside = tools_end = None
            held = within = for_tools = 0.0
            budget = step_budget(cap, None)
            ends = None if cap is None else Deadline._after(cap, SYSTEM_CLOCK)
        else:
            left, budget, ends, held, within, for_tools, inside, tools_end = self._against(
                d, own, ctx, kept, run, cap, rule, now
            )
        note = None
        if viable is not None or rule is not None:
            note = _note(viable, rule, budget, min_viable, held, within, for_tools, kind, name)
        idle = None if self.idle_cap is None else _idle(self.idle_cap, cap, kind, name)
        return tuple.__new__(  # `Plan`'s fields in their order (keywords cost more than the rest)
            Plan,
            (
                name,
                kind,
                attempt,
                d,
                left,
                cap,
                budget,
                min_viable,
                started,
                sync,
                started_at,
                ends,
                note,
                held,
                current_parent(),
                inside,
                max(within, for_tools),
                idle,
                tools_end,
            ),
        )

    def _against(
        self,
        d: Deadline,
        own: Deadline | None,
        ctx: Deadline | None,
        kept: Deadline | None,
        run: RunTracker | None,
        cap: float | None,
        rule: StepRule | None,
        now: float,
    ) -> tuple[float, float, Deadline, float, float, float, Deadline | None, Deadline | None]:
        """The step's budget against the deadline `d` (the earliest of the run's own, `own`,
        and the one in context, `ctx`): (time left, budget, when the budget ends, time kept
        back by the step, by the steps inside it, by its tool calls, when its steps and its
        tool calls must end). The run's reserve is held back from `own` only."""
        name, kind, reserve = self.name, self.kind, self.reserve
        held = within = for_tools = passed = 0.0
        inside = tools_end = None
        clock = d.clock
        if clock is not SYSTEM_CLOCK:
            now = clock.monotonic()
        left = max(0.0, d._mono - now)
        shared = False  # the run's own deadline sets this budget (see `RunTracker.steps_end`)
        if reserve is not None:
            budget = left - reserve
        else:
            budget = None
            if own is not None:
                budget = own._mono - now - (run.reserve if run else 0.0)
            shared = run is not None and own is run.deadline
            if ctx is not None:
                from_ctx = ctx._mono - now
                if budget is None or from_ctx < budget:
                    budget, shared = from_ctx, False
                    if kept is not None:  # its node's tool calls keep time back: it set this
                        held = passed = kept._mono - ctx._mono
        assert budget is not None
        if rule is not None and (own_held := rule.keep_back(kind, name, budget)) > 0.0:
            budget, shared, held = budget - own_held, False, held + own_held
        elif rule is not None:  # what the step does not keep back, the steps inside it do
            within, for_tools = rule.keep_back_inside(kind, name, budget)
        if cap is not None and cap <= budget:  # its cap sets it: nothing is kept back for later
            shared, held, within, for_tools = False, 0.0, 0.0, 0.0
        budget = step_budget(cap, budget)
        if shared and budget > 0.0:
            assert run is not None
            ends = run.steps_end()
        else:
            ends = d._moved(now + budget - d._mono) if now + budget < d._mono else d
        if held > passed and budget > HANDOFF_BETWEEN:  # (what it keeps back itself)
            inside = ends._moved(-HANDOFF_BETWEEN)
        elif within > 0.0:
            inside = ends._moved(-(within + HANDOFF_BETWEEN))
        if for_tools > within:
            tools_end = ends._moved(-(for_tools + HANDOFF_BETWEEN))
        return left, budget, ends, held, within, for_tools, inside, tools_end


def _asked(
    cap: float | StepRule | None, min_viable: float | StepRule, kind: str, name: str
) -> tuple[float | None, float, StepRule | None, StepRule | None]:
    """A learned cap and min_viable asked for their numbers (the min_viable never above the
    cap: a step given its whole cap always starts), with the rules that gave them."""
    rule = viable = None
    if isinstance(cap, StepRule):
        rule = cap
        cap = rule.cap(kind, name)
    if isinstance(min_viable, StepRule):
        viable = min_viable
        min_viable = viable.min_viable(kind, name)
        if cap is not None and min_viable > cap:
            min_viable = cap
    return cap, min_viable, rule, viable


def _deadlines(
    kind: str, run: RunTracker | None, deadline: Deadline | None
) -> tuple[Deadline | None, Deadline | None, Deadline | None]:
    """The deadlines a step is planned against: the run's own (the one given, from state, and
    the tracker's, earliest first), the one in context (for a tool call, its node's tool-call
    deadline when that is earlier), and the context's own when that one took its place (the
    time its node keeps back for what follows it)."""
    ctx = current_deadline()
    kept = None
    tools = tools_deadline() if kind == "tool" else None
    if tools is not None and (ctx is None or tools._mono < ctx._mono):
        kept, ctx = ctx, tools
    run_deadline = run.deadline if run is not None else None
    own = run_deadline if deadline is None else deadline.earliest(run_deadline)
    return own, ctx, kept


def _note(
    viable: StepRule | None,
    rule: StepRule | None,
    budget: float | None,
    min_viable: float,
    held: float,
    within: float,
    for_tools: float,
    kind: str,
    name: str,
) -> str | None:
    """What a learned rule says of this plan: why a learned min_viable refuses it, or what
    time it keeps back (by the step, by its steps, by its tool calls)."""
    if viable is not None and budget is not None and 0.0 < budget < min_viable:
        return viable.refusal(kind, name, budget)
    if rule is None or not (held > 0.0 or within > 0.0 or for_tools > 0.0):
        return None
    if held > 0.0:
        return rule.held_for(held)
    if within > 0.0:
        note = rule.held_for(within) + ", by its steps"
        if for_tools > within:
            note += f"; {for_tools:.2f} s by its tool calls"
        return note
    return rule.held_for(for_tools) + ", by its tool calls"


def _idle(idle_cap: float | StepRule, cap: float | None, kind: str, name: str) -> float:
    """The step's stall limit: its `idle_cap`, or the learned one (inf while cold: the step is
    only watched), never above its cap."""
    if isinstance(idle_cap, StepRule):
        learned = idle_cap.idle_cap(kind, name)
        idle = math.inf if learned is None else learned
    else:
        idle = idle_cap
    return cap if cap is not None and idle > cap else idle


# -- the run's one timer --------------------------------------------------------------------------
_POLL = 0.005  # seconds between looks at the steps winding down, before the backstop


class RunAlarm:
    """One timer per run for the instant its clamped steps end at.

    Every node of a run whose budget is the run's own deadline (less its reserve and the
    hand-off) ends at the same instant (`RunTracker.steps_end`). Rather than one event-loop timer
    per node, the run keeps this one, armed on first use; the nodes' cuts join it while they run.
    They are registered with the run's cancel signal anyway, so the alarm finds them there and
    keeps no set of its own. A run that `ainvoke` started arms it at once, and it goes on to the
    run's backstop: one timer for both instants. The backstop waits, up to the cuts' `GRACE`,
    while a step already cut is still winding down: its cancellation would be that step's
    second one.

    Cancels the cuts registered with `signal` that joined it (`Cut.joined`), once its deadline
    has passed; then, given `then` (a later deadline, a callback and its arguments: the run's
    backstop), calls the callback at that deadline. `close()` when the run ends."""

    __slots__ = ("_backstop_at", "_due", "_then", "fired", "loop", "signal")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: Deadline,
        signal: CancelSignal,
        then: tuple[Deadline, Callable[..., object], *tuple[object, ...]] | None = None,
    ) -> None:
        self.loop = loop
        self.signal = signal
        self.fired = False
        self._then = then
        self._backstop_at: float | None = None
        # In an empty context (`Due`): armed inside the run's first node, that node's context
        # would otherwise stay alive with the timer for the whole run.
        self._due: Due | asyncio.TimerHandle | None = Due(loop, deadline, self._fire)

    def _fire(self) -> None:
        self.fired = True
        then = self._then
        cuts = self.joined()
        if then is None:
            self._due = None
        else:
            # The steps cut now get the hand-off to deliver their answers before the backstop,
            # also when the loop stalled past both instants and this timer comes late: the run
            # ends the same way whichever timer the stall let through first.
            at = then[0]
            if cuts:
                at = max(at, Deadline._after(HANDOFF, at.clock))
            self._due = Due(self.loop, at, self._backstop)
        for cut in cuts:
            cut.cancel()

    def _backstop(self) -> None:
        """The run's own deadline: call the backstop, once no step of the run that was cut is
        still winding down (cancelled again in its clean-up, psycopg closes the connection of
        a query it is cancelling in the server), or once `GRACE` has passed."""
        now = self.loop.time()
        if self._backstop_at is None:
            self._backstop_at = now
        if now - self._backstop_at < GRACE and any(
            isinstance(s, Cut) and s.fired for s in self.signal.registered()
        ):
            self._due = self.loop.call_later(_POLL, self._backstop)
            return
        then, self._then, self._due = self._then, None, None
        if then is not None:
            then[1](*then[2:])

    def joined(self) -> list[Cut]:
        """The cuts on this timer now."""
        return [s for s in self.signal.registered() if isinstance(s, Cut) and s.joined]

    def close(self) -> None:
        """Drop the timer (the run is over): it no longer keeps the run alive until then."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
