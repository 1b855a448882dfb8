"""Frozen records of how steps and runs ended; plain data, safe to checkpoint and to log."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import operator
from collections.abc import Mapping
from typing import Any, Final, Literal

__all__ = [
    "STALLED",
    "CutShort",
    "Outcome",
    "StepKind",
    "StepRecord",
    "StepStatus",
    "Terminal",
    "ended_short",
    "step_link",
]

StepKind = Literal["node", "tool", "model", "http"]

STALLED: Final = "stalled"
"""The `cancel_source` of a step cut at its idle cap: no progress for that long."""


class _PlainData(dict[str, Any]):
    """A record that is also its own plain data: a read-only `dict` of what `to_dict` returns,
    beside its typed fields. `json.dumps` of a graph's or an agent's output (which holds the
    run's `Outcome` and `StepRecord`s) works as it is, and `record.status` stays typed."""

    __slots__ = ()

    def _fill(self, data: Mapping[str, Any]) -> None:
        dict.update(self, data)

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{type(self).__name__} is read-only: dataclasses.replace makes another")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def __reduce__(self) -> Any:  # copy, deepcopy, pickle: rebuilt from its plain data
        return (type(self).from_dict, (dict(self),))  # type: ignore[attr-defined]


class Terminal(enum.StrEnum):
    """How a run ended. `CANCELLED` (a caller or parent gave up) is never `DEADLINE_EXCEEDED`."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    STEP_LIMIT = "step_limit"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class StepStatus(enum.StrEnum):
    """How one step (node attempt, tool call, model call, HTTP request) ended."""

    COMPLETED = "completed"
    SKIPPED = "skipped"  # not started: its budget was below its min_viable
    TIMED_OUT = "timed_out"  # cancelled in flight when its budget ran out
    ABANDONED = "abandoned"  # sync work past its budget: could not be stopped, may still run
    CANCELLED = "cancelled"  # a caller or parent cancelled it
    FAILED = "failed"
    STALE = "stale"  # a read-only tool answered from its cache

    def __str__(self) -> str:
        return self.value

    @property
    def cut(self) -> bool:
        """Started and then stopped by its budget (`timed_out`, or `abandoned` sync work)."""
        return self in _CUT

    @property
    def ran_out(self) -> bool:
        """Ended by the deadline: cut in flight, or `skipped` for lack of budget."""
        return self in _RAN_OUT


_CUT: frozenset[StepStatus] = frozenset({StepStatus.TIMED_OUT, StepStatus.ABANDONED})
_RAN_OUT: frozenset[StepStatus] = _CUT | {StepStatus.SKIPPED}
_SHORT: Final = _RAN_OUT | {StepStatus.STALE}


def ended_short(status: StepStatus) -> bool:
    """Whether a step that ended so was cut short by the deadline (ran out, or answered stale
    after a cut): its time, and the time of a step it ran inside, is a bound below what it
    takes, not a sample of it."""
    return status in _SHORT


class CutShort:
    """Tells, record by record as steps end (the steps inside a step before it), whether each
    step was cut short: itself (`ended_short`) or in a step it ran (its `parent`: a tool call
    cut inside its `tools` node). `keep`: how many steps with a step cut short inside them are
    remembered until their own record (None: all; a step nothing bounded sends none)."""

    __slots__ = ("_inside", "_keep")

    def __init__(self, keep: int | None = None) -> None:
        self._inside: dict[str, None] = {}  # the links of the steps a step cut short ran inside
        self._keep = keep

    def short(self, record: StepRecord) -> bool:
        short = ended_short(record.status)
        if not short and self._inside and (link := record.link) in self._inside:
            del self._inside[link]
            short = True
        if short and record.parent is not None:
            self._inside[record.parent] = None
            if self._keep is not None and len(self._inside) > self._keep:
                del self._inside[next(iter(self._inside))]
        return short


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord(_PlainData):
    """One step's account of its budget: what it was given, what it used, how it ended.

    Times are milliseconds. `requested_ms` is the step's own cap (None when it has none);
    `allocated_ms` is what it got, `clamped` tells whether the run's deadline cut it below the cap.
    `parent` names the step it ran inside (a tool call's `tools` node, a node's enclosing node)
    by that step's `link`; None at the top, and in records made before it existed.
    """

    name: str
    kind: StepKind
    attempt: int
    remaining_ms: float | None
    requested_ms: float | None
    allocated_ms: float | None
    clamped: bool
    elapsed_ms: float
    status: StepStatus
    side_effect_started: bool = False
    cancel_source: str | None = None
    started_at: float | None = None  # epoch seconds when the step started
    note: str | None = None  # why, in numbers (no user data): a skipped step's learned reason,
    # which model a fallback model call stood in for, or what an abandoned step's end closed
    hedges: int = 0  # extra identical copies started (a hedged read-only tool call)
    winner: int | None = None  # which copy answered a hedged call (0: the first); None: none
    hedge_held: str | None = None  # why a hedged call's next copy was not started, the first
    # reason that held it: "budget", "outage" (its backend slow for everyone: hedging backed
    # off) or "time"; None: none held (`note` counts each reason)
    parent: str | None = None  # the `link` of the step this one ran inside
    held_ms: float | None = None  # kept back from its budget for the steps that follow (`note`
    # names them); None when nothing was
    gap_ms: float | None = None  # the longest gap with no progress it showed, for a step with
    # an idle cap (a stream's chunks, a body's bytes, a node's heartbeats); None: not watched

    @property
    def stalled(self) -> bool:
        """Cut at its idle cap: it made no progress for that long (`note` says how long)."""
        return self.cancel_source == STALLED

    @property
    def link(self) -> str | None:
        """How a step run inside this one names it in its `parent` (None: no start time)."""
        return None if self.started_at is None else step_link(self.name, self.started_at)

    def __post_init__(self) -> None:
        dict.update(self, zip(_RECORD_FIELDS, _record_values(self), strict=True))
        dict.__setitem__(self, "status", self.status.value)

    @classmethod
    def _of(cls, values: tuple[Any, ...]) -> StepRecord:
        """A record from the values of its fields, in their order: what `__init__` makes,
        without its keyword arguments and frozen-dataclass assignments (every step makes one,
        on the hot path). The values are trusted: callers pass each field's type."""
        self = dict.__new__(cls)
        any(map(operator.call, _RECORD_SLOTS, itertools.repeat(self), values))  # (a loop in C)
        dict.update(self, zip(_RECORD_FIELDS, values, strict=True))
        dict.__setitem__(self, "status", values[_STATUS_AT].value)
        return self

    def ran_out_reason(self) -> str:
        """Why this step ended the run, in words a caller or a log reader can act on."""
        if self.status is StepStatus.SKIPPED:
            if self.note:
                return f"{self.name} not started: {self.note}"
            if self.allocated_ms:
                return f"{self.name} not started: budget {self.allocated_ms} ms below min_viable"
            return f"{self.name} not started: no time left"
        if self.stalled:
            return f"{self.name} stalled: {self.note or 'no progress'}"
        if self.status is StepStatus.ABANDONED:
            closed = f", its thread still running; {self.note}" if self.note else ""
            return (
                f"{self.name} overran its budget of {self.allocated_ms} ms "
                f"(sync work abandoned{closed})"
            )
        return f"{self.name} cancelled at its budget of {self.allocated_ms} ms"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the form stored in checkpoints)."""
        return dict(self)

    def to_sparse_dict(self) -> dict[str, Any]:
        """`to_dict` without the fields that hold their defaults (the form a checkpoint's trace
        stores: a third of the bytes); `from_dict` reads both."""
        return {k: v for k, v in self.items() if not _at_default(k, v)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepRecord:
        """Inverse of `to_dict` and `to_sparse_dict`; unknown keys are ignored so old readers
        survive new fields."""
        kwargs = {k: v for k, v in data.items() if k in _RECORD_FIELDS}
        kwargs["status"] = StepStatus(kwargs["status"])
        return cls(**kwargs)


_RECORD_FIELDS: Final = tuple(f.name for f in dataclasses.fields(StepRecord))
_record_values: Final = operator.attrgetter(*_RECORD_FIELDS)
_RECORD_SLOTS: Final = tuple(getattr(StepRecord, name).__set__ for name in _RECORD_FIELDS)
_STATUS_AT: Final = _RECORD_FIELDS.index("status")
_RECORD_DEFAULTS: Final = {
    f.name: f.default
    for f in dataclasses.fields(StepRecord)
    if f.default is not dataclasses.MISSING
}


def _at_default(name: str, value: Any) -> bool:
    default = _RECORD_DEFAULTS.get(name, _RECORD_DEFAULTS)
    return value is default or (type(value) is type(default) and value == default)


def step_link(name: str, started_at: float) -> str:
    """A step's `link`: its name and start time (epoch seconds), as `"tools@1767225600.123456"`:
    plain text for checkpoints and traces, unique among the steps of a run."""
    return f"{name}@{started_at!r}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Outcome(_PlainData):
    """How a run ended: its `terminal`, the `step` where it ended (None when completed), why.

    `elapsed_ms` is the run's wall time from its entry to the outcome, when known.
    """

    terminal: Terminal
    step: str | None = None
    reason: str = ""
    elapsed_ms: float | None = None

    def __post_init__(self) -> None:
        self._fill(self.to_dict())

    @property
    def ok(self) -> bool:
        return self.terminal is Terminal.COMPLETED

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the form stored in checkpoints)."""
        return {
            "terminal": self.terminal.value,
            "step": self.step,
            "reason": self.reason,
            "elapsed_ms": self.elapsed_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        """Inverse of `to_dict`."""
        return cls(
            terminal=Terminal(data["terminal"]),
            step=data.get("step"),
            reason=data.get("reason", ""),
            elapsed_ms=data.get("elapsed_ms"),
        )
