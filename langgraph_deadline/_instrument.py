"""Where step records and run outcomes go besides graph state: observers, stamina-style.

An observer is any object with `on_step(event)` and `on_run(event)`. `set_observers(None)`
restores the defaults, `set_observers([])` switches instrumentation off. Observers must be
quick and must not raise: an error in one is logged and dropped, never the run's problem.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ._records import Outcome, StepRecord

__all__ = ["Observer", "RunEvent", "StepEvent", "get_observers", "set_observers"]

log = logging.getLogger("langgraph_deadline")


@dataclasses.dataclass(frozen=True, slots=True)
class StepEvent:
    """A step ended. `run_id` groups the steps of one run (None outside `with_deadlines`)."""

    record: StepRecord
    run_id: str | None
    deadline_at: float | None  # the run's deadline, epoch seconds


@dataclasses.dataclass(frozen=True, slots=True)
class RunEvent:
    """A run ended (with `with_deadlines`): its outcome, when it started, its deadline."""

    outcome: Outcome
    run_id: str
    started_at: float  # epoch seconds
    deadline_at: float | None
    reserve_s: float


@runtime_checkable
class Observer(Protocol):
    """Receives every step record and run outcome. Keep it fast; never raise."""

    def on_step(self, event: StepEvent) -> None: ...

    def on_run(self, event: RunEvent) -> None: ...


_observers: tuple[Observer, ...] = ()
_defaults_loaded = False


def _default_observers() -> tuple[Observer, ...]:
    """The backends that are installed and wanted by default (none yet in the core)."""
    return ()


def set_observers(observers: Sequence[Observer] | None) -> None:
    """Replace the observers: a list (empty switches instrumentation off), or None for defaults.

    Raises:
        TypeError: an item has no `on_step`/`on_run`.
    """
    global _observers, _defaults_loaded
    if observers is None:
        _observers = _default_observers()
        _defaults_loaded = True
        return
    for obs in observers:
        if not isinstance(obs, Observer):
            raise TypeError(f"an observer needs on_step() and on_run(), got {type(obs).__name__}")
    _observers = tuple(observers)
    _defaults_loaded = True


def get_observers() -> tuple[Observer, ...]:
    global _observers, _defaults_loaded
    if not _defaults_loaded:
        _observers = _default_observers()
        _defaults_loaded = True
    return _observers


def emit_step(record: StepRecord, run_id: str | None, deadline_at: float | None) -> None:
    observers = _observers if _defaults_loaded else get_observers()
    if not observers:
        return
    event = StepEvent(record, run_id, deadline_at)
    for obs in observers:
        try:
            obs.on_step(event)
        except Exception:
            log.warning("observer %r failed on a step event", obs, exc_info=True)


def emit_run(event: RunEvent) -> None:
    for obs in get_observers():
        try:
            obs.on_run(event)
        except Exception:
            log.warning("observer %r failed on a run event", obs, exc_info=True)
