"""What the model reads when a tool call ran out of time: the facts, and the default words."""

from __future__ import annotations

import dataclasses
from typing import Any

from .records import StepRecord, StepStatus

__all__ = ["ToolTimeout", "timeout_message", "tool_facts"]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolTimeout:
    """What happened to a tool call that ran out of time: the facts behind its message.

    `side_effect_started` is True when the call was a write whose request may already have
    reached the other side before it was cut: the action may have happened.
    """

    tool: str
    status: StepStatus  # TIMED_OUT (cut), ABANDONED (sync, still running), SKIPPED (not called),
    # or FAILED (a write whose connection broke after its request was sent)
    budget_s: float | None
    elapsed_s: float
    remaining_s: float | None
    min_viable_s: float
    side_effect_started: bool = False
    stalled_s: float | None = None  # cut at its idle cap: no progress for this long


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
    if info.side_effect_started and info.status is StepStatus.FAILED:
        return (
            f"Tool '{info.tool}' failed after its request had been sent (the connection broke "
            "before an answer came back): the action may already have happened. Do not call "
            f"'{info.tool}' again until you have checked whether it took effect (look it up, or "
            "ask the user); tell the user the outcome is unknown."
        )
    if info.stalled_s is not None and not info.side_effect_started:
        return (
            f"Tool '{info.tool}' stopped making progress (no progress for "
            f"{info.stalled_s:.1f} s) and was stopped. This is a stall, not an empty result: "
            f"the data may exist. Do not call '{info.tool}' again with the same arguments. "
            "Instead, narrow the request, use another tool, or continue without it and tell "
            "the user which part of the answer is missing."
        )
    if info.side_effect_started:
        return (
            f"Tool '{info.tool}' did not finish within {budget:.1f} s and was stopped after its "
            "request had been sent: the action may already have happened. Do not call "
            f"'{info.tool}' again until you have checked whether it took effect (look it up, or "
            "ask the user); tell the user the outcome is unknown."
        )
    return (
        f"Tool '{info.tool}' did not answer within {budget:.1f} s and was stopped. "
        "This is a timeout, not an empty result: the data may exist. "
        f"Do not call '{info.tool}' again with the same arguments. Instead, narrow the request, "
        "use another tool, or continue without it and tell the user which part of the answer "
        "is missing."
    )


def tool_facts(
    status: StepStatus,
    *,
    record: StepRecord | None = None,
    error: BaseException | None = None,
    age_s: float | None = None,
    side_effect_started: bool = False,
) -> dict[str, Any]:
    """The artifact of a tool call that ran out (`artifact["langgraph_deadline"]`): its status,
    its budget and time when it was planned (`record`), the error that stopped it when it was
    not the deadline, the age of the stale answer served instead, if any, and whether a write
    may already have happened."""
    facts: dict[str, Any] = {"status": str(status)}
    if record is not None:
        facts["budget_ms"] = record.allocated_ms
        facts["elapsed_ms"] = round(record.elapsed_ms, 3)
        if record.stalled:
            facts["stalled"] = True
            facts["gap_ms"] = record.gap_ms
    facts["stale"] = age_s is not None
    facts["side_effect_started"] = side_effect_started
    if error is not None:
        facts["error"] = type(error).__name__
    if age_s is not None:
        facts["age_s"] = round(age_s, 3)
    return facts
