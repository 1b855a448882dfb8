"""The messages of a run that ran out of time: which tool calls are still open, the short reply
to the user, and how both are marked and written (the answers the open calls get are built in
`answers.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar, cast
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage

from .._core.records import Outcome

__all__ = [
    "CUT_SHORT",
    "ENDING",
    "ToolResults",
    "answered",
    "as_ending",
    "closing_reply",
    "closing_text",
    "ending_messages",
    "is_ending",
    "messages_of",
    "open_tool_calls",
    "unanswered_tool_calls",
]

_EXCERPT: Final = 160
_MAX_LISTED: Final = 5

ENDING: Final = "langgraph_deadline_ending"
"""The `response_metadata` key that marks a message written to end a run that ran out (the
answers owed by a cut step, the closing reply): a grant of more time removes these messages,
and the cut step runs again on the state it would have seen."""

M = TypeVar("M", bound=BaseMessage)


def as_ending(message: M) -> M:
    """`message` marked `ENDING`, with an id of its own (so that a grant can remove it)."""
    meta = {**message.response_metadata, ENDING: True}
    return message.model_copy(update={"id": message.id or str(uuid4()), "response_metadata": meta})


def is_ending(message: BaseMessage) -> bool:
    """True for a message written to end a run that ran out (`as_ending`)."""
    return bool(message.response_metadata.get(ENDING))


def messages_of(state: Any) -> list[BaseMessage] | None:
    """The state's `messages` list (LangGraph's `MessagesState` convention), or None."""
    if type(state) is not dict and not isinstance(state, Mapping):
        return None
    messages = state.get("messages")
    if isinstance(messages, list) and all(isinstance(m, BaseMessage) for m in messages[-3:]):
        return messages
    return None


def answered(messages: Sequence[BaseMessage]) -> bool:
    """True when the user has a reply: the last message is the assistant's, asking no tool."""
    last = messages[-1] if messages else None
    return isinstance(last, AIMessage) and not last.tool_calls


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


def open_tool_calls(state: Any) -> list[ToolCall]:
    """The tool calls a node given `state` is there to answer and that have no answer yet: the
    last assistant turn's, or the calls a `Send` gave it (`ToolNode` inputs: `create_agent` sends
    each tool call on its own, as `[call]`; a `ToolCallWithContext` carries one)."""
    is_map = type(state) is dict or isinstance(state, Mapping)
    if is_map and state.get("messages") is None and state.get("__type") is None:
        return []  # no conversation: a plain state (the hot path: every node asks)
    if is_map and state.get("__type") == "tool_call_with_context":
        state = [state.get("tool_call")]
    if isinstance(state, list) and state and all(_is_call(c) for c in state):
        return [cast(ToolCall, c) for c in state]
    return unanswered_tool_calls(messages_of(state))


def _is_call(value: object) -> bool:
    return isinstance(value, dict) and bool(value.get("id")) and isinstance(value.get("name"), str)


class ToolResults(BaseCallbackHandler):
    """Collects the `ToolMessage` of each tool call that finished, so a node cut while others
    were still running keeps the answers it already had."""

    run_inline = True

    def __init__(self) -> None:
        self.by_call: dict[str, ToolMessage] = {}

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if isinstance(output, ToolMessage) and output.tool_call_id:
            self.by_call[output.tool_call_id] = output


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


CUT_SHORT: Final = "[cut short: the time for this answer ran out]"
"""What follows a partial answer in the closing reply, so that no reader takes it as whole."""


def closing_reply(
    messages: Sequence[BaseMessage], outcome: Outcome, *, partial: str = ""
) -> AIMessage:
    """The assistant's last message of a run that ran out of time. With `partial` (what the
    model had streamed when it was cut) the message starts with it, marked `CUT_SHORT`, and
    its metadata says so (`response_metadata["langgraph_deadline"]["cut_short"]`)."""
    facts: dict[str, Any] = outcome.to_dict()
    text = closing_text(messages)
    if partial:
        text = f"{partial} {CUT_SHORT}\n\n{text}"
        facts["cut_short"] = {"partial_chars": len(partial)}
    return AIMessage(content=text, response_metadata={"langgraph_deadline": facts})


def _excerpt(message: ToolMessage) -> str:
    text = " ".join(message.text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


def ending_messages(
    messages: list[BaseMessage],
    owed: Sequence[ToolMessage],
    outcome: Outcome,
    *,
    closing: bool,
    partial: str = "",
) -> tuple[list[BaseMessage], list[BaseMessage]]:
    """The messages a run that ran out ends with (its returned state's), and what its checkpoint
    gets: the answers a cut step `owed` its open tool calls, then (when `closing`) the closing
    reply, all marked `ENDING`. When a step was cut while answering tool calls, the answers its
    siblings finished are written again as they are (same ids): until the cut step runs again
    they are only pending writes of the checkpoint, which a new run on the thread would drop."""
    done = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    due: list[BaseMessage] = []
    for m in owed:
        if m.tool_call_id not in done:
            done.add(m.tool_call_id)
            due.append(as_ending(m))
    kept = [m for m in _turn_answers(messages) if m.id and not is_ending(m)] if due else []
    shown = [*messages, *due]
    written = [*kept, *due]
    if closing and not answered(shown):
        reply = as_ending(closing_reply(shown, outcome, partial=partial))
        shown.append(reply)
        written.append(reply)
    return shown, written


def _turn_answers(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    """The tool answers after the last assistant message that asked for tools."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, AIMessage) and m.tool_calls:
            return [t for t in messages[i + 1 :] if isinstance(t, ToolMessage)]
    return []
