"""How an agent that ran out of time ends: every pending tool call answered (the history stays
valid for the next turn) and a final assistant message saying what the tools had found."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage

from .._core.records import Outcome, StepRecord, StepStatus, Terminal
from .._graph.answers import close_pending
from .._graph.messages import closing_reply, unanswered_tool_calls
from .run import elapsed_ms

__all__ = ["give_up"]


def give_up(state: Mapping[str, Any], record: StepRecord, *, partial: str = "") -> dict[str, Any]:
    """The state update that ends the agent for lack of time, in words the user can read;
    `partial` is what the cut model call had already said (kept, marked as cut short)."""
    messages: list[AnyMessage] = list(state.get("messages") or [])
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=record.name,
        reason=record.ran_out_reason(),
        elapsed_ms=elapsed_ms(state),
    )
    closing: list[BaseMessage] = [
        *close_pending(unanswered_tool_calls(messages), record, status=StepStatus.SKIPPED)
    ]
    closing.append(closing_reply([*messages, *closing], outcome, partial=partial))
    return {"messages": closing, "deadline_outcome": outcome, "deadline_trace": [record]}
