"""What the model reads when a tool call ran out of time: the facts, and the default words."""

from __future__ import annotations

import dataclasses

from .records import StepStatus

__all__ = ["ToolTimeout", "timeout_message"]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolTimeout:
    """What happened to a tool call that ran out of time: the facts behind its message.

    `side_effect_started` is True when the call was a write whose request may already have
    reached the other side before it was cut: the action may have happened.
    """

    tool: str
    status: StepStatus  # TIMED_OUT (cut), ABANDONED (sync, still running) or SKIPPED (not called)
    budget_s: float | None
    elapsed_s: float
    remaining_s: float | None
    min_viable_s: float
    side_effect_started: bool = False


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
