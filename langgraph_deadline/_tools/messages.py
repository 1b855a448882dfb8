"""What a tool that ran out of time says: the facts (`ToolTimeout`, the artifact) and the words
the model reads, so that it can act on a timeout instead of mistaking it for an empty result."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.messages import ToolMessage

from .._core.plan import Plan
from .._core.records import StepRecord, StepStatus

__all__ = [
    "Message",
    "ToolTimeout",
    "answer",
    "render",
    "timeout_message",
    "timeout_of",
    "tool_facts",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolTimeout:
    """What happened to a tool call that ran out of time: the facts behind its message."""

    tool: str
    status: StepStatus  # TIMED_OUT (cut), ABANDONED (sync, still running) or SKIPPED (not called)
    budget_s: float | None
    elapsed_s: float
    remaining_s: float | None
    min_viable_s: float


Message = Callable[[ToolTimeout], str] | str | None
"""A tool's own timeout text: a format string, a function of `ToolTimeout`, or None (default)."""


def timeout_of(
    tool: str, plan: Plan, record: StepRecord, *, status: StepStatus | None = None
) -> ToolTimeout:
    """The facts of a planned call that ran out: its budget and what was left from `plan`, its
    time from `record`, its status from `record` unless given."""
    return ToolTimeout(
        tool=tool,
        status=record.status if status is None else status,
        budget_s=plan.budget,
        elapsed_s=record.elapsed_ms / 1000.0,
        remaining_s=plan.remaining,
        min_viable_s=plan.min_viable,
    )


def timeout_message(info: ToolTimeout) -> str:
    """The default text the model reads when a tool ran out of time (override per tool)."""
    if info.status is StepStatus.SKIPPED:
        left = 0.0 if info.remaining_s is None else info.remaining_s
        return (
            f"Tool '{info.tool}' was skipped: the run's time budget is exhausted "
            f"({left:.1f} s left, the tool needs at least {info.min_viable_s:.1f} s). "
            "It was not called, so nothing is known about its data. Do not call it again in "
            "this run; continue without it and tell the user which part of the answer is missing."
        )
    budget = info.budget_s or info.elapsed_s
    return (
        f"Tool '{info.tool}' did not answer within {budget:.1f} s and was stopped. "
        "This is a timeout, not an empty result: the data may exist. "
        f"Do not call '{info.tool}' again with the same arguments. Instead, narrow the request, "
        "use another tool, or continue without it and tell the user which part of the answer "
        "is missing."
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
            remaining=info.remaining_s,
        )
    return str(message(info))


def tool_facts(
    status: StepStatus,
    *,
    record: StepRecord | None = None,
    error: BaseException | None = None,
    age_s: float | None = None,
) -> dict[str, Any]:
    """The artifact of a tool call that ran out (`artifact["langgraph_deadline"]`): its status,
    its budget and time when it was planned (`record`), the error that stopped it when it was
    not the deadline, and the age of the stale answer served instead, if any."""
    facts: dict[str, Any] = {"status": str(status)}
    if record is not None:
        facts["budget_ms"] = record.allocated_ms
        facts["elapsed_ms"] = round(record.elapsed_ms, 3)
    facts["stale"] = age_s is not None
    if error is not None:
        facts["error"] = type(error).__name__
    if age_s is not None:
        facts["age_s"] = round(age_s, 3)
    return facts


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
