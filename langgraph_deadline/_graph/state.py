"""Graph state fields for the deadline, the run's outcome and its step records.

Each field has its own channel so that checkpoints hold plain data (floats, dicts, lists): they
load under `LANGGRAPH_STRICT_MSGPACK=true` and without LangGraph's "unregistered type" warning,
and they travel as JSON to `RemoteGraph` and LangGraph Server. In memory the fields are typed.

Each field's reducer, channel and declaration sit together: they are one contract (what a
write does, what the checkpoint holds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Final, Generic, TypeVar, cast

from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.types import Command, Overwrite
from typing_extensions import TypedDict

from .._core.deadline import SYSTEM_CLOCK, Clock, Deadline
from .._core.records import Outcome, StepRecord
from .._core.validate import check_seconds, check_timestamp

__all__ = [
    "DeadlineChannel",
    "DeadlineState",
    "RUN_OVER",
    "OutcomeChannel",
    "TRACE_WINDOW",
    "TraceChannel",
    "state_fields",
    "deadline_from_state",
    "deadline_input",
    "fresh_run_input",
    "fresh_run_update",
    "with_trace",
    "merge_deadline",
    "merge_outcome",
    "merge_trace",
    "missing_records",
    "traced",
]

T = TypeVar("T")


def _as_timestamp(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, Deadline):
        return value.timestamp
    return check_timestamp(value, "deadline")


def merge_deadline(current: float | None, update: Deadline | float | None) -> float | None:
    """Reducer for `deadline`: epoch seconds, earliest wins, `None` (no deadline) never wins."""
    new = _as_timestamp(update)
    if current is None:
        return new
    if new is None:
        return current
    return new if new < current else current


def merge_outcome(
    current: Outcome | None, update: Outcome | Mapping[str, Any] | None
) -> Outcome | None:
    """Reducer for `deadline_outcome`: the first terminal that ended a run early is kept; a
    `completed` (one a subgraph or a remote graph finished with) is replaced by what comes
    next; `None` clears it."""
    if update is None:
        return None
    new = update if isinstance(update, Outcome) else Outcome.from_dict(update)
    return new if current is None or current.ok else current


TRACE_WINDOW: Final = 16
"""How many step records `deadline_trace` keeps: the most recent. A checkpoint stores the state
whole at every step, so a trace that kept every record would be stored again at every step:
storage and time growing with the square of the run's length. The full stream of records goes
to the observers (`JsonlTraceWriter` for the report) and to the `updates` stream, where each
node's update carries its own records."""


def merge_trace(
    current: list[StepRecord], update: Iterable[StepRecord | Mapping[str, Any]] | None
) -> list[StepRecord]:
    """Reducer for `deadline_trace`: records are appended, and the most recent `TRACE_WINDOW`
    are kept."""
    if not update:
        return current
    new = update if type(update) is list else list(update)
    for r in new:
        if type(r) is not StepRecord:
            new = [_as_record(r) for r in new]
            break
    merged = [*current, *new]
    return merged if len(merged) <= TRACE_WINDOW else merged[-TRACE_WINDOW:]


def missing_records(values: Mapping[str, Any], records: Sequence[StepRecord]) -> list[StepRecord]:
    """The `records` (a run's, in order) that a state's trace (`values`) does not show. A trace
    that holds its whole window left out the records before its first: only those after it
    count."""
    known = list(values.get("deadline_trace") or [])
    if len(known) >= TRACE_WINDOW:
        first = known[0]
        at = next((i for i in range(len(records) - 1, -1, -1) if records[i] == first), 0)
        records = records[at:]
    return [r for r in records if r not in known]


def traced(values: Mapping[str, Any], records: Sequence[StepRecord]) -> list[StepRecord]:
    """The trace a run's last state shows: the run's `records` in their order (the nodes leave
    them out of their updates under `with_deadlines`: `GraphRun.trace_at_end`), after those
    of the state's trace that are not the run's (an earlier part of it, before an interrupt)."""
    own = records[-TRACE_WINDOW:]
    known = values.get("deadline_trace") or ()
    return _window([*(r for r in known if r not in own), *own])


def _window(records: list[StepRecord]) -> list[StepRecord]:
    return records if len(records) <= TRACE_WINDOW else records[-TRACE_WINDOW:]


def _as_record(value: StepRecord | Mapping[str, Any]) -> StepRecord:
    return value if isinstance(value, StepRecord) else StepRecord.from_dict(value)


class _PlainChannel(BinaryOperatorAggregate[T], Generic[T]):
    """A reducer channel that checkpoints plain data and rebuilds typed values on load."""

    def _decode(self, value: Any) -> T:
        return value  # type: ignore[no-any-return]

    def _encode(self, value: T) -> Any:
        return value

    def update(self, values: Sequence[T]) -> bool:
        if not values:
            return False  # LangGraph asks every channel, each superstep
        for v in values:
            if isinstance(v, Overwrite | dict):
                break
        else:
            return super().update(values)
        # Normalize Overwrite payloads too: they bypass the reducer.
        fixed: list[Any] = []
        for v in values:
            if isinstance(v, Overwrite):
                fixed.append(Overwrite(self._decode(v.value)))
            elif isinstance(v, dict) and len(v) == 1 and "__overwrite__" in v:
                fixed.append(Overwrite(self._decode(v["__overwrite__"])))
            else:
                fixed.append(v)
        return super().update(fixed)

    def checkpoint(self) -> Any:
        value = super().checkpoint()
        return self._encode(value)

    def from_checkpoint(self, checkpoint: Any) -> _PlainChannel[T]:
        channel = super().from_checkpoint(checkpoint)
        if channel.is_available():
            channel.value = self._decode(channel.value)
        return channel


class DeadlineChannel(_PlainChannel[float | None]):
    """The deadline's channel: earliest wins within a run; a finished run's deadline is over.

    LangGraph calls `finish()` when a run reaches its end (not when it pauses on an interrupt):
    the deadline stays visible, marked as over, and the next deadline written (the next run's
    input) replaces it instead of losing to it. A resume never finished, so it keeps the
    earliest. Checkpointed as epoch seconds, or `{"at": seconds, "over": true}` once over.
    """

    over: bool = False

    def _decode(self, value: Any) -> float | None:
        if isinstance(value, Mapping) and "over" in value:
            return _as_timestamp(value.get("at"))
        return _as_timestamp(value)

    def _encode(self, value: float | None) -> Any:
        return {"at": value, "over": True} if self.over else value

    def update(self, values: Sequence[Any]) -> bool:
        ends = any(v == RUN_OVER for v in values)
        values = [v for v in values if v != RUN_OVER]
        if self.over and values:
            first, *rest = values
            if not isinstance(first, Overwrite | dict):
                first = Overwrite(first)
            self.over = False
            values = [first, *rest]
        updated = super().update(values) if values else False
        if ends and not self.over and self.is_available():
            self.over = updated = True
        return updated

    def finish(self) -> bool:
        if self.over or not self.is_available():
            return False
        self.over = True
        return True

    def copy(self) -> DeadlineChannel:
        channel = super().copy()
        channel.over = self.over
        return channel

    def from_checkpoint(self, checkpoint: Any) -> DeadlineChannel:
        channel = cast(DeadlineChannel, super().from_checkpoint(checkpoint))
        channel.over = isinstance(checkpoint, Mapping) and bool(checkpoint.get("over"))
        return channel


class OutcomeChannel(_PlainChannel[Outcome | None]):
    def _decode(self, value: Any) -> Outcome | None:
        if value is None or isinstance(value, Outcome):
            return value
        return Outcome.from_dict(value)

    def _encode(self, value: Outcome | None) -> Any:
        return value.to_dict() if isinstance(value, Outcome) else value


class TraceChannel(_PlainChannel[list[StepRecord]]):
    """The trace's channel: the most recent `TRACE_WINDOW` records (an `Overwrite` too), each
    checkpointed as its plain data without the fields that hold their defaults."""

    _plain: dict[int, tuple[StepRecord, dict[str, Any]]] | None = None
    """The plain data of the records in the window, by `id`: a record is encoded once, not
    at every checkpoint of its window."""

    def _decode(self, value: Any) -> list[StepRecord]:
        return _window([_as_record(r) for r in value or ()])

    def _encode(self, value: list[StepRecord]) -> Any:
        known = self._plain or {}
        kept: dict[int, tuple[StepRecord, dict[str, Any]]] = {}
        for r in value:
            hit = known.get(id(r))
            kept[id(r)] = hit if hit is not None and hit[0] is r else (r, r.to_sparse_dict())
        self._plain = kept
        return [kept[id(r)][1] for r in value]

    def copy(self) -> TraceChannel:
        channel = super().copy()
        channel._plain = self._plain
        return channel


RUN_OVER: Final[Mapping[str, bool]] = {"over": True}
"""The update to `deadline` that says the run ended early (a budgeted node ran out): like a run
that finished, its deadline is over, and the next run's replaces it."""


def _none_type() -> type[None]:
    return type(None)


class DeadlineState(TypedDict, total=False):
    """Mix into your graph state to carry the run's deadline, outcome and step records.

    - `deadline`: epoch seconds (absolute: survives checkpoints and processes). Give a run its
      deadline in its input (a `Deadline` or epoch seconds): within the run, and on resume,
      earliest wins, so updates can only bring it forward; once the run finished, the next
      run's deadline replaces it. `deadline_input` replaces it explicitly (within `timeout`).
    - `deadline_outcome`: the run's `Outcome`, once it has one (`with_deadlines` writes
      `completed` at the end of a run that finished). The first early end is kept.
    - `deadline_trace`: the `StepRecord`s of the run's most recent budgeted steps (the last
      `TRACE_WINDOW`, 16), appended (a node that nothing bounded, in a run with no deadline,
      adds one only when it does not complete). Every record of a longer run goes to the
      observers (`JsonlTraceWriter`, for the report) and to the `updates` stream.

    ```python
    class State(DeadlineState):
        question: str
    ```
    """

    deadline: Annotated[float | None, DeadlineChannel(_none_type(), merge_deadline)]
    deadline_outcome: Annotated[Outcome | None, OutcomeChannel(_none_type(), merge_outcome)]
    deadline_trace: Annotated[list[StepRecord], TraceChannel(list, merge_trace)]


_CLEARED: Final = ("deadline_outcome", "deadline_trace")
"""The fields a new run clears: the previous run's outcome and trace."""


def fresh_run_update(timestamp: float | None) -> dict[str, Any]:
    """The one state update that starts a run: its deadline (epoch seconds, or None for none)
    replaces the thread's previous one, and the previous run's outcome and trace are cleared."""
    return {
        "deadline": Overwrite(timestamp),
        "deadline_outcome": None,
        "deadline_trace": Overwrite([]),
    }


def fresh_run_input(input: Mapping[str, Any], timestamp: float | None, *, empty: bool) -> Any:
    """A new run's input with `fresh_run_update` applied. On `empty` channels (no thread, not
    inside another run: nothing before this run) the fields' defaults are already what it
    writes, so only the deadline is written (two channel writes fewer per run), and the
    input's own outcome and trace (a finished run's result given again) are left out."""
    if not empty:
        return {**input, **fresh_run_update(timestamp)}
    if not input.keys().isdisjoint(_CLEARED):
        input = {k: v for k, v in input.items() if k not in _CLEARED}
    return {**input, "deadline": timestamp}


def with_trace(value: Any, records: Sequence[StepRecord]) -> Any:
    """A node's or tool's return value with `records` appended to `deadline_trace`: a dict
    update, a `Command` (its update), or None. Other values (a `ToolMessage`, a list) are
    returned as they are; callers that can wrap them do so first."""
    if not records:
        return value
    if value is None:
        return {"deadline_trace": list(records)}
    if isinstance(value, dict):
        return {**value, "deadline_trace": _appended(value.get("deadline_trace"), records)}
    if isinstance(value, Command) and isinstance(value.update, dict | None):
        update = dict(value.update or {})
        update["deadline_trace"] = _appended(update.get("deadline_trace"), records)
        return Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)
    return value


def _appended(written: Any, records: Sequence[StepRecord]) -> Any:
    """A `deadline_trace` write with `records` after it: an `Overwrite` (a run's start,
    `fresh_run_update`) stays one, so the trace is still replaced, now ending with them."""
    if isinstance(written, Overwrite):
        return Overwrite([*(written.value or ()), *records])
    return [*(written or ()), *records]


def deadline_input(deadline: Deadline | float) -> dict[str, Any]:
    """The state update that starts a new run with `deadline` (a `Deadline` or seconds from now).

    It replaces the thread's previous deadline and clears its outcome and trace, so a second run
    on the same thread gets a fresh budget: `graph.invoke({**deadline_input(5), "question": q},
    config)`. `with_deadlines` graphs do this themselves, and hold a grant to their `timeout`.

    Raises:
        TypeError, ValueError: not a `Deadline` or a finite number of seconds >= 0.
    """
    d = (
        deadline
        if isinstance(deadline, Deadline)
        else Deadline.after(check_seconds(deadline, "deadline"))
    )
    return fresh_run_update(d.timestamp)


def state_fields(state: object) -> Mapping[str, Any] | None:
    """The deadline fields of a state: a mapping (TypedDict) as it is; a pydantic or dataclass
    state (`DeadlineModel`, `DeadlineDataclass`) as a mapping of those that it has."""
    if type(state) is dict or isinstance(state, Mapping):
        return state
    names = ("deadline", "deadline_outcome", "deadline_trace")
    if state is None or not any(hasattr(state, n) for n in names):
        return None
    return {n: getattr(state, n) for n in names if hasattr(state, n)}


def deadline_from_state(
    state: object, *, clock: Clock | None = None, known: Deadline | None = None
) -> Deadline | None:
    """The `Deadline` recorded in a state, or None (no field, or no deadline set). `known` is
    returned when it is that deadline (the run's, on the hot path: no new value is made)."""
    state = state_fields(state)
    if state is None:
        return None
    ts = state.get("deadline")
    if ts is None:
        return None
    if isinstance(ts, Deadline):
        return ts
    if known is not None and ts == known.timestamp:
        return known
    if type(ts) is float:  # our own channel's plain data: already checked
        return Deadline._at(ts, SYSTEM_CLOCK if clock is None else clock)
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        return Deadline.at(ts, clock=clock)
    return None
