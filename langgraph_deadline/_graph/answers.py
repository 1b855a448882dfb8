"""Every answer a tool call gets when it did not run to its end: this module builds them all.

- the model-readable timeout of a call cut at its budget, or never started (`cut_answer`): the
  words are `timeout_message`'s (`_core/timeouts.py`) or the tool's own (`Message`);
- the stale answer of a read-only tool served from its cache when it ran out (`stale_answer`);
- the answers a step that ran out owes the tool calls it left open, so that the history stays
  valid for the next turn (`close_pending`, `answer_open_calls`).

Each is a `ToolMessage` made by `answer`: the call's id and tool name, `status="error"` (a stale
answer: `"success"`), the facts under `artifact["langgraph_deadline"]`. Nothing else in the
package builds one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import BaseMessage, ToolCall, ToolMessage

from .._core.plan import Plan
from .._core.records import StepRecord, StepStatus
from .._core.timeouts import ToolTimeout, timeout_message, tool_facts
from .messages import unanswered_tool_calls

__all__ = [
    "Message",
    "answer",
    "answer_open_calls",
    "close_pending",
    "cut_answer",
    "cut_text",
    "render",
    "stale_answer",
    "timeout_of",
]

Message = Callable[[ToolTimeout], str] | str | None
"""A tool's own timeout text: a format string, a function of `ToolTimeout`, or None (default)."""


def answer(
    content: Any,
    *,
    call_id: str,
    tool: str,
    facts: dict[str, Any],
    status: Literal["success", "error"] = "error",
) -> ToolMessage:
    """The `ToolMessage` answering tool call `call_id` in place of the tool, `facts` attached."""
    return ToolMessage(
        content=content,
        tool_call_id=call_id,
        name=tool,
        status=status,
        artifact={"langgraph_deadline": facts},
    )


def timeout_of(
    tool: str, plan: Plan, record: StepRecord, *, status: StepStatus | None = None
) -> ToolTimeout:
    """The facts of a planned call that ran out: its budget and what was left from `plan`, its
    time and whether a write may have happened from `record`, its status from `record` unless
    given."""
    return ToolTimeout(
        tool=tool,
        status=record.status if status is None else status,
        budget_s=plan.budget,
        elapsed_s=record.elapsed_ms / 1000.0,
        remaining_s=plan.remaining,
        min_viable_s=plan.min_viable,
        side_effect_started=record.side_effect_started,
    )


def render(message: Message, info: ToolTimeout) -> str:
    """The text for `info`: `timeout_message`, a tool's format string (`{tool}`, `{seconds}`,
    `{status}`, `{remaining}`) or a tool's function of `ToolTimeout`."""
    if message is None:
        return timeout_message(info)
    if isinstance(message, str):
        return message.format(
            tool=info.tool,
            seconds=info.budget_s or info.elapsed_s,
            status=str(info.status),
            remaining=math.inf if info.remaining_s is None else info.remaining_s,
        )
    return str(message(info))


def cut_text(
    tool: str,
    plan: Plan,
    record: StepRecord,
    *,
    status: StepStatus | None = None,
    message: Message = None,
) -> str:
    """What the model reads of a planned call that ran out (cut, abandoned, skipped; `status`
    when not `record`'s): `message`, or `timeout_message` by default."""
    return render(message, timeout_of(tool, plan, record, status=status))


def cut_answer(
    call_id: str,
    tool: str,
    plan: Plan,
    record: StepRecord,
    *,
    status: StepStatus | None = None,
    error: BaseException | None = None,
    message: Message = None,
) -> ToolMessage:
    """The answer of tool call `call_id`, planned as `plan`, that ran out (`record`; `status`
    when not its own, the `error` that stopped it when that was not the deadline): its
    model-readable text, `status="error"`, and the facts."""
    how = record.status if status is None else status
    facts = tool_facts(
        how, record=record, error=error, side_effect_started=record.side_effect_started
    )
    text = cut_text(tool, plan, record, status=how, message=message)
    return answer(text, call_id=call_id, tool=tool, facts=facts)


def stale_answer(
    content: Any,
    *,
    call_id: str,
    tool: str,
    status: StepStatus,
    record: StepRecord,
    error: BaseException | None,
    age_s: float,
) -> ToolMessage:
    """The answer of a read-only call that ran out (`status`), served from its cache instead:
    the cached `content` (marked stale by the caller), `status="success"`, its age in the
    facts."""
    facts = tool_facts(status, record=record, error=error, age_s=age_s)
    return answer(content, call_id=call_id, tool=tool, facts=facts, status="success")


def close_pending(
    calls: Sequence[ToolCall],
    record: StepRecord,
    finished: Mapping[str, ToolMessage] | None = None,
    *,
    status: StepStatus | None = None,
) -> list[ToolMessage]:
    """An answer for each open tool call: the result it finished with, or the model-readable
    timeout with `status="error"` for the calls the step `record` ended: cut in flight (its
    status), or never started (`status=SKIPPED`, also the default for a step that was not cut).
    """
    left = record.remaining_ms / 1000.0 if record.remaining_ms is not None else None
    how = status or (record.status if record.status.cut else StepStatus.SKIPPED)
    started = how is not StepStatus.SKIPPED
    answers: list[ToolMessage] = []
    for call in calls:
        done = (finished or {}).get(call["id"] or "")
        if done is not None:
            answers.append(done)
            continue
        info = ToolTimeout(
            tool=call["name"],
            status=how,
            budget_s=record.allocated_ms / 1000.0 if started and record.allocated_ms else 0.0,
            elapsed_s=record.elapsed_ms / 1000.0 if started else 0.0,
            remaining_s=left,
            min_viable_s=0.0,
        )
        answers.append(
            answer(
                timeout_message(info),
                call_id=str(call["id"]),
                tool=call["name"],
                facts=tool_facts(how, record=record if started else None),
            )
        )
    return answers


def answer_open_calls(
    messages: Sequence[BaseMessage], records: Sequence[StepRecord]
) -> list[ToolMessage]:
    """Answers for the tool calls a run left open when it was cancelled as a whole (the run's
    backstop fired while the step answering them was still ending): the model-readable
    timeout, as the step would have given it, from the last record of the run that ran out."""
    calls = unanswered_tool_calls(messages)
    if not calls:
        return []
    record = next((r for r in reversed(records) if r.status.ran_out), None)
    if record is None:
        record = StepRecord(
            name="tools",
            kind="node",
            attempt=1,
            remaining_ms=0.0,
            requested_ms=None,
            allocated_ms=0.0,
            clamped=True,
            elapsed_ms=0.0,
            status=StepStatus.SKIPPED,
        )
    return close_pending(calls, record)
