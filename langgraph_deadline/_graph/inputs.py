"""What a run's input or a state update may carry in `deadline`: a `Deadline`, epoch seconds or
None, stored as plain epoch seconds; anything else is refused at the entry, naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.types import Command, Overwrite

from .._core.deadline import Deadline
from .._core.validate import check_timestamp

__all__ = ["plain_input"]


def _checked(value: Any, not_after: float | None = None) -> Any:
    if isinstance(value, Overwrite):
        return Overwrite(_checked(value.value))
    if value is None:
        return None
    if isinstance(value, Deadline):
        value = value.timestamp
    seconds = check_timestamp(value, "the state field 'deadline'")
    return seconds if not_after is None else min(seconds, not_after)


def _sets_deadline(item: Any) -> bool:
    """True for a `("deadline", value)` pair of a `Command`'s list of updates."""
    return type(item) is tuple and len(item) == 2 and item[0] == "deadline"


def plain_input(value: Any, *, not_after: float | None = None) -> Any:
    """`value` (a run's input, a `Command`, or a state update) with its `deadline` as plain
    epoch seconds, so that LangGraph can checkpoint it as it is (it does so before any reducer
    runs). Other values are returned as they are. With `not_after`, a deadline (other than an
    explicit `Overwrite`) later than it is brought back to it.

    Raises:
        TypeError, ValueError: the `deadline` is not a `Deadline`, None or finite epoch seconds.
    """
    if type(value) is dict:  # a node's update, the usual case
        if "deadline" not in value:
            return value
        return {**value, "deadline": _checked(value["deadline"], not_after)}
    if isinstance(value, Command):
        update = value.update
        if isinstance(update, Mapping):
            update = plain_input(update, not_after=not_after)
        elif isinstance(update, list | tuple) and any(_sets_deadline(u) for u in update):
            update = [(u[0], _checked(u[1], not_after)) if _sets_deadline(u) else u for u in update]
        else:  # no deadline in it: a list state's own value, or a pydantic/dataclass update
            return value
        return Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)
    if isinstance(value, Mapping) and "deadline" in value:
        return {**value, "deadline": _checked(value["deadline"], not_after)}
    return value
