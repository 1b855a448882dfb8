"""What enters a run from outside: the `deadline` its input, a resume or a state update may
carry, the request behind a served run, and how late either may make it.

- **Inputs.** A run's input, a resume `Command` and a state update may set the deadline: a
  `Deadline`, epoch seconds or None, stored as plain epoch seconds; anything else is refused at
  the entry, naming the field. What a caller sets is never later than the graph allows
  (`ceiling`: its `timeout` from now, and the deadline in context), an explicit grant
  (`deadline_input`, an `Overwrite`) included: a client of a served graph can shorten its
  budget, never lengthen it.
- **The deadline headers of a served run.** With `"http": {"configurable_headers":
  {"includes": ["x-request-*"]}}` in `langgraph.json`, LangGraph Server puts the request's
  headers, lower-cased and as strings, in `config["configurable"]`. A run honours the deadline
  they carry (the wire format's parser, `_core/headers.py`): never later than its own
  `timeout`; a malformed value is ignored, logged.
- **When the request arrived.** The server records it (`__request_start_time_ms__`, epoch ms, a
  key clients cannot set) and runs the request when a worker picks it up, up to seconds later.
  With `queue_time` set, the run's `timeout` and a relative header count from the arrival: the
  time the run waited is taken from its budget, up to `queue_time` seconds (what a wrong clock
  can cost at worst). A delay the caller asked for (`after_seconds`) is not queue time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any, Final

from langgraph.types import Command, Overwrite

from .._core.context import current_deadline
from .._core.deadline import SYSTEM_CLOCK, Deadline
from .._core.headers import WIRE, read
from .._core.validate import check_timestamp
from .forms import DeadlineDataclass, DeadlineModel

__all__ = [
    "ARRIVAL_KEY",
    "DELAY_KEY",
    "a_result",
    "as_update",
    "ceiling",
    "entry_input",
    "plain_input",
    "plain_steps",
    "queued_for",
    "request_limit",
    "sets_deadline",
    "without_fields",
]


def ceiling(timeout: float | None, *, queued: float = 0.0) -> Deadline | None:
    """The latest deadline anything entering a run now may set: `timeout` (checked by
    `with_deadlines`) from now (less the `queued` seconds the run waited since its request
    arrived), and no later than the deadline in context; None for no limit."""
    ctx = current_deadline()
    if timeout is None:
        return ctx
    return Deadline._after(max(timeout - queued, 0.0), SYSTEM_CLOCK).earliest(ctx)


def _checked(value: Any, not_after: float | None, limit: float | None) -> Any:
    if isinstance(value, Overwrite):  # a grant: it may replace the thread's, within `limit`
        return Overwrite(_checked(value.value, None, limit))
    if value is None:
        return limit  # no deadline is later than any: with a limit, it is the limit
    if isinstance(value, Deadline):
        value = value.timestamp
    seconds = check_timestamp(value, "the state field 'deadline'")
    for bound in (not_after, limit):
        if bound is not None and bound < seconds:
            seconds = bound
    return seconds


def _sets_deadline(item: Any) -> bool:
    """True for a `("deadline", value)` pair of a `Command`'s list of updates."""
    return type(item) is tuple and len(item) == 2 and item[0] == "deadline"


def as_update(value: Any) -> Any:
    """A state instance of ours (`DeadlineModel`, `DeadlineDataclass`) as the dict of the fields
    LangGraph writes for it (a dataclass's every field; a model's set, or not None, or
    defaulting to not None), so that it is read, checked and started like the same input given
    as a dict. Other values (a message for a messages-list state, a user's own model) are
    returned as they are: LangGraph reads them its own way."""
    if type(value) is dict:  # the usual input, without asking pydantic's metaclass
        return value
    if isinstance(value, DeadlineModel):
        fields = type(value).model_fields
        kept = value.model_fields_set
        return {
            k: v
            for k, info in fields.items()
            if (v := getattr(value, k)) is not None or info.default is not None or k in kept
        }
    if isinstance(value, DeadlineDataclass):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


def plain_input(
    value: Any, *, not_after: float | None = None, limit: Deadline | float | None = None
) -> Any:
    """`value` (a run's input, a `Command`, or a state update) with its `deadline` as plain
    epoch seconds, so that LangGraph can checkpoint it as it is (it does so before any reducer
    runs). Other values are returned as they are.

    A deadline later than `limit` (the latest the graph allows, see `ceiling`) is brought back
    to it, an explicit grant (`Overwrite`) too, and None (no deadline) becomes it; one later
    than `not_after` (the thread's own, which an update may only bring forward) is brought
    back to that, except a grant.

    Raises:
        TypeError, ValueError: the `deadline` is not a `Deadline`, None or finite epoch seconds.
    """
    top = limit.timestamp if isinstance(limit, Deadline) else limit
    if type(value) is dict:  # a node's update, the usual case
        if "deadline" not in value:
            return value
        return {**value, "deadline": _checked(value["deadline"], not_after, top)}
    if isinstance(value, Command):
        update = as_update(value.update)
        if isinstance(update, Mapping):
            update = plain_input(update, not_after=not_after, limit=top)
        elif isinstance(update, list | tuple) and any(_sets_deadline(u) for u in update):
            update = [
                (u[0], _checked(u[1], not_after, top)) if _sets_deadline(u) else u for u in update
            ]
        else:  # no deadline in it: a list state's own value, or an update of another kind
            return value
        return Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)
    if isinstance(value, Mapping) and "deadline" in value:
        return {**value, "deadline": _checked(value["deadline"], not_after, top)}
    return value


def entry_input(value: Any, limit: Deadline | None, *, fields: bool) -> Any:
    """A run's input (a state, a `Command`) as the run starts from it: a state instance as
    a dict (so that a new run clears the last one's outcome, whatever form its input takes),
    every deadline in it plain epoch seconds and none later than `limit`.

    With the deadline `fields`, a `Command` that sets no deadline sets `limit` (earliest wins:
    a paused run keeps its own), so that a thread a `Command` started records the deadline its
    run has, and a later resume does not take `timeout` afresh."""
    value = plain_input(as_update(value), limit=limit)
    if not (fields and limit is not None and isinstance(value, Command)):
        return value
    update = {} if value.update is None else value.update
    if isinstance(update, Mapping) and "deadline" not in update:
        update = {**update, "deadline": limit.timestamp}
    elif isinstance(update, list | tuple) and not any(_sets_deadline(u) for u in update):
        update = [*update, ("deadline", limit.timestamp)]
    else:
        return value
    return Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)


_FIELDS: Final = frozenset({"deadline", "deadline_outcome", "deadline_trace"})


def without_fields(value: Any, channels: Container[str]) -> Any:
    """`value` (a run's input, a `Command`) without the deadline fields its graph has no
    `channels` for: LangGraph would log that it ignored each such write, which reads as a failed
    grant (the run has already read its deadline from them). A grant that leaves nothing to
    send is None: the run goes on where it stopped (LangGraph refuses an empty `Command`)."""
    lacking = frozenset(k for k in _FIELDS if k not in channels)
    if isinstance(value, Command):
        update = value.update
        if isinstance(update, Mapping) and not lacking.isdisjoint(update):
            update = {k: v for k, v in update.items() if k not in lacking}
        elif isinstance(update, list | tuple) and any(_in(u, lacking) for u in update):
            update = [u for u in update if not _in(u, lacking)]
        else:
            return value
        if not update and value.resume is None and not value.goto:
            return None  # a grant alone: go on with the run where it stopped
        return Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)
    if isinstance(value, Mapping) and not lacking.isdisjoint(value):
        return {k: v for k, v in value.items() if k not in lacking}
    return value


def _in(item: Any, names: frozenset[str]) -> bool:
    """True for a `(name, value)` pair of a `Command`'s list of updates that writes `names`."""
    return type(item) is tuple and len(item) == 2 and item[0] in names


def sets_deadline(supersteps: Iterable[Sequence[Any]]) -> bool:
    """True when a `StateUpdate` in `supersteps` writes the `deadline` field."""
    for step in supersteps:
        for u in step:
            values = as_update(u.values)
            if isinstance(values, Command):
                values = as_update(values.update)
            if isinstance(values, Mapping) and "deadline" in values:
                return True
            if isinstance(values, list | tuple) and any(_sets_deadline(u) for u in values):
                return True
    return False


def plain_steps(
    supersteps: Iterable[Sequence[Any]], *, not_after: float | None, limit: Deadline | None
) -> list[list[Any]]:
    """`bulk_update_state`'s supersteps (of `StateUpdate`s) with state instances as dicts and
    every deadline as plain data, none later than `limit`, nor (unless a grant) `not_after`."""
    return [
        [
            u._replace(values=plain_input(as_update(u.values), not_after=not_after, limit=limit))
            for u in step
        ]
        for step in supersteps
    ]


def a_result(input: Any) -> bool:
    """True for an input that is a finished run's result (`state = graph.invoke(state)`): its
    `deadline` is that run's, spent, and not the new run's."""
    return isinstance(input, Mapping) and input.get("deadline_outcome") is not None


log = logging.getLogger("langgraph_deadline")

ARRIVAL_KEY: Final = "__request_start_time_ms__"
DELAY_KEY: Final = "__after_seconds__"
"""LangGraph Server's keys in a run's `configurable`: when the request arrived (epoch ms), and
the delay the caller asked for before the run starts (s)."""

_NAMES: Final = tuple(
    n.lower() for n in (WIRE.timeout_header, WIRE.deadline_header, WIRE.grpc_timeout_header) if n
)
_ABSOLUTE: Final = (WIRE.deadline_header or "").lower()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def queued_for(configurable: Mapping[str, Any], queue_time: float | None) -> float:
    """Seconds the run waited between the request's arrival and now (the caller's own delay
    left out), at most `queue_time`; 0 when `queue_time` is None or the server said nothing."""
    if queue_time is None:
        return 0.0
    arrived = _number(configurable.get(ARRIVAL_KEY))
    if arrived is None:
        return 0.0
    delay = _number(configurable.get(DELAY_KEY)) or 0.0
    waited = time.time() - arrived / 1000.0 - max(delay, 0.0)
    if waited > queue_time:
        log.warning(
            "the run waited %.3f s since its request arrived, more than queue_time=%s: "
            "%s s of it counted (a clock off, or a long queue)",
            waited,
            queue_time,
            queue_time,
        )
    return min(max(waited, 0.0), queue_time)


def _header_deadline(configurable: Mapping[str, Any], queued: float) -> Deadline | None:
    pairs = [(n, configurable[n]) for n in _NAMES if n in configurable]
    if not pairs:
        return None
    headers = [(n, v) for n, v in pairs if isinstance(v, str)]
    received = read(headers)
    errors = [*received.errors, *(f"{n}: not a string" for n, v in pairs if not isinstance(v, str))]
    if errors:
        log.warning("malformed deadline headers in the run's config ignored: %s", "; ".join(errors))
    d = received.deadline
    if d is None or not queued or received.source == _ABSOLUTE:
        return d
    return d._moved(-queued)  # a relative value counts from the request's arrival


def request_limit(
    configurable: Mapping[str, Any], timeout: float | None, queue_time: float | None
) -> Deadline | None:
    """The latest deadline a run started now may have: `timeout` (from the request's arrival,
    with `queue_time`), the deadline in context, and the deadline headers in `configurable`."""
    queued = queued_for(configurable, queue_time)
    limit, sent = ceiling(timeout, queued=queued), _header_deadline(configurable, queued)
    return sent if limit is None else limit.earliest(sent)
