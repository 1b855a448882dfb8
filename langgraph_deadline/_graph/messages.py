"""The messages a run that ran out of time leaves behind: an answer for every tool call still
open (so the history stays valid for the next turn), and a short reply to the user."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage

from .._core.records import Outcome, StepRecord, StepStatus
from .._core.timeouts import ToolTimeout, timeout_message

__all__ = [
    "ToolResults",
    "close_pending",
    "closing_reply",
    "closing_text",
    "messages_of",
    "unanswered_tool_calls",
]

_EXCERPT: Final = 160
_MAX_LISTED: Final = 5


def messages_of(state: Any) -> list[BaseMessage] | None:
    """The state's `messages` list (LangGraph's `MessagesState` convention), or None."""
    if not isinstance(state, Mapping):
        return None
    messages = state.get("messages")
    if isinstance(messages, list) and all(isinstance(m, BaseMessage) for m in messages[-3:]):
        return messages
    return None


def unanswered_tool_calls(messages: Sequence[BaseMessage] | None) -> list[ToolCall]:
    """The tool calls of the last assistant turn that no `ToolMessage` answers yet."""
    if not messages:
        return []
    for i in range(len(messages) - 1, -1, -1):
        last = messages[i]
        if isinstance(last, AIMessage):
            answered = {m.tool_call_id for m in messages[i + 1 :] if isinstance(m, ToolMessage)}
            return [c for c in last.tool_calls if c["id"] is not None and c["id"] not in answered]
        if isinstance(last, HumanMessage):
            break
    return []


class ToolResults(BaseCallbackHandler):
    """Collects the `ToolMessage` of each tool call that finished, so a node cut while others
    were still running keeps the answers it already had."""

    run_inline = True

    def __init__(self) -> None:
        self.by_call: dict[str, ToolMessage] = {}

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if isinstance(output, ToolMessage) and output.tool_call_id:
            self.by_call[output.tool_call_id] = output


def close_pending(
    calls: Sequence[ToolCall],
    record: StepRecord,
    finished: Mapping[str, ToolMessage] | None = None,
) -> list[ToolMessage]:
    """An answer for each open tool call: the result it finished with, or, for the calls the
    deadline cut (or never started), the model-readable timeout text with `status="error"`."""
    left = record.remaining_ms / 1000.0 if record.remaining_ms is not None else None
    cut = record.status if record.status.cut else StepStatus.SKIPPED
    answers: list[ToolMessage] = []
    for call in calls:
        done = (finished or {}).get(call["id"] or "")
        if done is not None:
            answers.append(done)
            continue
        info = ToolTimeout(
            tool=call["name"],
            status=cut,
            budget_s=None if record.allocated_ms is None else record.allocated_ms / 1000.0,
            elapsed_s=record.elapsed_ms / 1000.0 if cut is not StepStatus.SKIPPED else 0.0,
            remaining_s=left,
            min_viable_s=0.0,
        )
        answers.append(
            ToolMessage(
                content=timeout_message(info),
                tool_call_id=call["id"],
                name=call["name"],
                status="error",
                artifact={"langgraph_deadline": {"status": str(cut), "stale": False}},
            )
        )
    return answers


def closing_text(messages: Sequence[BaseMessage]) -> str:
    """The reply when time ran out: say so, and what the tools had found this turn."""
    results: list[ToolMessage] = []
    for m in reversed(messages):
        if isinstance(m, HumanMessage):
            break
        if isinstance(m, ToolMessage):
            results.append(m)
    results.reverse()
    found = [m for m in results if m.status != "error"]
    missing = sorted({m.name or "a tool" for m in results if m.status == "error"})
    parts = ["I ran out of time for this request and had to stop before finishing my answer."]
    if found:
        lines = [f"- {m.name or 'a tool'}: {_excerpt(m)}" for m in found[:_MAX_LISTED]]
        if len(found) > _MAX_LISTED:
            lines.append(f"- and {len(found) - _MAX_LISTED} more results")
        parts.append("What I found so far:\n" + "\n".join(lines))
    if missing:
        parts.append(f"No result in time from: {', '.join(missing)}.")
    if not results:
        parts.append("I had not gathered any results yet.")
    parts.append("Ask again, perhaps with a narrower question, and I will continue.")
    return "\n\n".join(parts)


def closing_reply(messages: Sequence[BaseMessage], outcome: Outcome) -> AIMessage:
    """The assistant's last message of a run that ran out of time."""
    return AIMessage(
        content=closing_text(messages),
        response_metadata={"langgraph_deadline": outcome.to_dict()},
    )


def _excerpt(message: ToolMessage) -> str:
    text = " ".join(message.text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"
