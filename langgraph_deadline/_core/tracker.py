"""The run's bookkeeping, shared by every step of one run and carried in its config."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .cancel import CancelSignal, current_signal
from .deadline import Deadline
from .observe import emit_step
from .records import Outcome, StepRecord, StepStatus

if TYPE_CHECKING:
    from .alarm import RunAlarm
    from .plan import Plan

__all__ = ["RUN_KEY", "RunTracker", "run_from_config"]


def _run_id() -> str:
    """A random 128-bit id, as hex: unique per run (a forked child reseeds `random`) and made
    without `uuid.uuid4()`, which code under test mocks to count LangGraph's own ids."""
    return f"{random.getrandbits(128):032x}"


@dataclasses.dataclass(slots=True, eq=False)
class RunTracker:
    """Mutable, run-scoped bookkeeping shared by every step of one run (carried in its config)."""

    deadline: Deadline | None
    reserve: float = 0.0
    started: float = dataclasses.field(default_factory=time.monotonic)
    records: list[StepRecord] = dataclasses.field(default_factory=list)
    in_flight: dict[int, Plan] = dataclasses.field(default_factory=dict)
    backstop_fired: bool = False
    latest: Any = None
    run_id: str = dataclasses.field(default_factory=_run_id)
    interrupted: bool = False
    emitted: bool = False
    outcome: Outcome | None = None  # set by the step that ended the run early
    signal: CancelSignal = dataclasses.field(default_factory=lambda: CancelSignal(current_signal()))
    started_at: float = dataclasses.field(default_factory=time.time)
    entry: object = None  # the graph whose ainvoke prepared this run, until its astream starts
    resumable: bool = False  # checkpointed: a step cut mid-superstep can stay pending there
    final: Any = None  # the state a run that ended early returns
    final_news: bool = False  # that state says more than the stream did
    keep_partial: bool = False  # a node cut mid-answer keeps the text it had streamed ...
    partial: str = ""  # ... here, for the closing reply
    owed: tuple[Any, ...] = ()  # answers (ToolMessages) a cut step owes the tool calls it was
    # running, written with the outcome (a tuple: most runs owe none, and keep no list for it)
    # The instant the run's nodes end at (its deadline less reserve and hand-off, for the
    # deadline it was computed from), and the one timer for it (`alarm.py`).
    step_end: tuple[Deadline, Deadline] | None = None
    alarm: RunAlarm | None = None
    # Failed attempts so far per task of the framework's that retries them (made on first use).
    failures: dict[str, int] | None = None

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
