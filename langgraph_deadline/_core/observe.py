"""Where step records and run outcomes go besides graph state: observers, stamina-style.

An observer is any object with `on_step(event)` and `on_run(event)`, and optionally
`on_tokens_after_deadline(event)` for the tokens a model step streamed after its deadline
(a `TokensEvent`; observers without it are skipped). `set_observers(None)`
restores the defaults, `set_observers([])` switches instrumentation off. Observers must be
quick and must not raise: an error in one is logged and dropped, never the run's problem.

The defaults are LangChain callbacks (custom events) plus the backends named in the
`LANGGRAPH_DEADLINE_INSTRUMENT` environment variable (`otel`, `prometheus`, or `off`).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Final, Protocol, runtime_checkable

from .records import Outcome, StepRecord

__all__ = [
    "INSTRUMENT_ENV",
    "Observer",
    "RunEvent",
    "StepEvent",
    "TokensEvent",
    "emit_tokens",
    "get_observers",
    "listen",
    "run_fields",
    "set_observers",
    "step_fields",
    "unlisten",
]

log = logging.getLogger("langgraph_deadline")


@dataclasses.dataclass(frozen=True, slots=True)
class StepEvent:
    """A step ended. `run_id` groups the steps of one run (None outside `with_deadlines`)."""

    record: StepRecord
    run_id: str | None
    deadline_at: float | None  # the run's deadline, epoch seconds


@dataclasses.dataclass(frozen=True, slots=True)
class RunEvent:
    """A run ended (with `with_deadlines`, or under `DeadlineMiddleware` alone): its outcome, when
    it started, its deadline."""

    outcome: Outcome
    run_id: str
    started_at: float  # epoch seconds
    deadline_at: float | None
    reserve_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class TokensEvent:
    """A model step streamed `tokens` after its deadline had passed: paid for, never read."""

    step: str
    tokens: int
    run_id: str | None = None


@runtime_checkable
class Observer(Protocol):
    """Receives every step record and run outcome. Keep it fast; never raise.

    An observer may also define `on_tokens_after_deadline(event: TokensEvent) -> None`: called
    when a streamed model call is cut by its deadline, with the tokens that arrived after it
    (paid for, never read). Optional, so it is not part of this protocol's required methods;
    the built-in backends (callbacks, OpenTelemetry, Prometheus, JSON lines) all define it.
    """

    def on_step(self, event: StepEvent) -> None: ...

    def on_run(self, event: RunEvent) -> None: ...


_observers: tuple[Observer, ...] = ()
_defaults_loaded = False


INSTRUMENT_ENV: Final = "LANGGRAPH_DEADLINE_INSTRUMENT"
"""Environment variable naming the default backends besides LangChain callbacks, comma-separated:
`otel`, `prometheus`; `off` switches every default off (callbacks included)."""

Field = str | int | float | bool | None


def step_fields(event: StepEvent) -> dict[str, Field]:
    """The only step data that leaves the process (callbacks, spans, metrics, trace files).

    A whitelist, not `to_dict()`: a field added to `StepRecord` reaches no backend until it is
    named here. Names and numbers only: no arguments, messages, results or error texts.
    """
    r = event.record
    return {
        "run_id": event.run_id,
        "deadline_at": event.deadline_at,
        "name": r.name,
        "kind": r.kind,
        "attempt": r.attempt,
        "status": r.status.value,
        "remaining_ms": r.remaining_ms,
        "requested_ms": r.requested_ms,
        "allocated_ms": r.allocated_ms,
        "clamped": r.clamped,
        "elapsed_ms": r.elapsed_ms,
        "side_effect_started": r.side_effect_started,
        "cancel_source": r.cancel_source,
        "started_at": r.started_at,
        "note": r.note,  # a learned refusal, in numbers
        "hedges": r.hedges,
        "winner": r.winner,
        "hedge_held": r.hedge_held,  # why a wanted copy was not started: a fixed word
        "parent": r.parent,  # another step's name and start time
        "held_ms": r.held_ms,  # kept back for the steps that follow
        "gap_ms": r.gap_ms,  # the longest gap with no progress (a step with an idle cap)
    }


def run_fields(event: RunEvent) -> dict[str, Field]:
    """The only run data that leaves the process. The outcome's `reason` is left out: it may
    quote an error message from user code."""
    o = event.outcome
    budget_ms = (
        None
        if event.deadline_at is None
        else round((event.deadline_at - event.started_at) * 1000.0, 3)
    )
    return {
        "run_id": event.run_id,
        "terminal": o.terminal.value,
        "step": o.step,
        "elapsed_ms": o.elapsed_ms,
        "started_at": event.started_at,
        "deadline_at": event.deadline_at,
        "budget_ms": budget_ms,
        "reserve_ms": round(event.reserve_s * 1000.0, 3),
    }


def _no_defaults() -> tuple[Observer, ...]:
    return ()


_default_factory: Callable[[], tuple[Observer, ...]] = _no_defaults


def set_default_factory(factory: Callable[[], tuple[Observer, ...]]) -> None:
    """Name what `set_observers(None)` and the first event load: the package's `__init__` sets
    the backends of `langgraph_deadline._instrument` here, so the core imports none of them."""
    global _default_factory, _defaults_loaded
    _default_factory = factory
    _defaults_loaded = False


def set_observers(observers: Sequence[Observer] | None) -> None:
    """Replace the observers: a list (empty switches instrumentation off), or None for defaults.

    Raises:
        TypeError: an item has no `on_step`/`on_run`.
    """
    global _observers, _defaults_loaded
    if observers is None:
        _observers = _default_factory()
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
        _observers = _default_factory()
        _defaults_loaded = True
    return _observers


_listeners: tuple[weakref.ref[Observer], ...] = ()


def listen(observer: Observer) -> None:
    """Give `observer` every step and run event, apart from the instrumentation: it stays when
    `set_observers` replaces the backends. Held weakly: a listener nobody keeps stops hearing.
    For what learns from the steps (a latency book), not for what reports them."""
    global _listeners
    if not isinstance(observer, Observer):
        raise TypeError(f"a listener needs on_step() and on_run(), got {type(observer).__name__}")
    if any(ref() is observer for ref in _listeners):
        return
    _listeners = (*_listeners, weakref.ref(observer, _forget))


def unlisten(observer: Observer) -> None:
    """Stop giving `observer` the events `listen` gave it (no error if it was not listening)."""
    global _listeners
    _listeners = tuple(ref for ref in _listeners if ref() not in (observer, None))


def _forget(dead: weakref.ref[Observer]) -> None:
    global _listeners
    _listeners = tuple(ref for ref in _listeners if ref is not dead)


def emit_step(record: StepRecord, run_id: str | None, deadline_at: float | None) -> None:
    observers = _observers if _defaults_loaded else get_observers()
    listeners = _listeners
    if not observers and not listeners:
        return
    event = StepEvent(record, run_id, deadline_at)
    for obs in observers:
        try:
            obs.on_step(event)
        except Exception:
            log.warning("observer %r failed on a step event", obs, exc_info=True)
    for ref in listeners:
        listener = ref()
        if listener is None:
            continue
        try:
            listener.on_step(event)
        except Exception:
            log.warning("listener %r failed on a step event", listener, exc_info=True)


def emit_tokens(event: TokensEvent) -> None:
    """Tell the observers that have an `on_tokens_after_deadline(event)` hook (it is optional)."""
    for obs in get_observers():
        hook = getattr(obs, "on_tokens_after_deadline", None)
        if hook is None:
            continue
        try:
            hook(event)
        except Exception:
            log.warning("observer %r failed on a tokens event", obs, exc_info=True)


def emit_run(event: RunEvent) -> None:
    listening = [obs for ref in _listeners if (obs := ref()) is not None]
    for obs in (*get_observers(), *listening):
        try:
            obs.on_run(event)
        except Exception:
            log.warning("observer %r failed on a run event", obs, exc_info=True)
