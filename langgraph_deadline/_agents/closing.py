"""How an agent that ran out of time ends: every pending tool call answered (the history stays
valid for the next turn) and a final assistant message saying what the tools had found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage

from .._core.records import Outcome, StepRecord, StepStatus, Terminal
from .._tools.messages import ToolTimeout, answer, timeout_message, tool_facts
from .run import elapsed_ms

__all__ = ["close_pending", "final_text", "give_up"]

_EXCERPT: Final = 160
_MAX_LISTED: Final = 5


def give_up(state: Mapping[str, Any], record: StepRecord) -> dict[str, Any]:
    """The state update that ends the agent for lack of time, in words the user can read."""
    messages: list[AnyMessage] = list(state.get("messages") or [])
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=record.name,
        reason=record.ran_out_reason(),
        elapsed_ms=elapsed_ms(state),
    )
    closing: list[BaseMessage] = [*close_pending(messages, record)]
    closing.append(
        AIMessage(
            content=final_text([*messages, *closing]),
            response_metadata={"langgraph_deadline": outcome.to_dict()},
        )
    )
    return {"messages": closing, "deadline_outcome": outcome, "deadline_trace": [record]}


def close_pending(messages: Sequence[BaseMessage], record: StepRecord) -> list[ToolMessage]:
    """An error `ToolMessage` for each tool call of the last assistant turn still unanswered."""
    for i in range(len(messages) - 1, -1, -1):
        last = messages[i]
        if isinstance(last, AIMessage):
            answered = {m.tool_call_id for m in messages[i + 1 :] if isinstance(m, ToolMessage)}
            left = record.remaining_ms / 1000.0 if record.remaining_ms is not None else None
            return [
                answer(
                    timeout_message(_not_called(call["name"], left)),
                    call_id=call["id"],
                    tool=call["name"],
                    facts=tool_facts(StepStatus.SKIPPED),
                )
                for call in last.tool_calls
                if call["id"] is not None and call["id"] not in answered
            ]
        if isinstance(last, HumanMessage):
            break
    return []


def _not_called(tool: str, left: float | None) -> ToolTimeout:
    return ToolTimeout(
        tool=tool,
        status=StepStatus.SKIPPED,
        budget_s=0.0,
        elapsed_s=0.0,
        remaining_s=left,
        min_viable_s=0.0,
    )


def final_text(messages: Sequence[BaseMessage]) -> str:
    """The final answer when time ran out: say so, and what the tools had found this turn."""
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


def _excerpt(message: ToolMessage) -> str:
    text = " ".join(message.text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"
