"""What a tool that ran out of time says: the facts (`ToolTimeout`, the artifact) and the words
the model reads, so that it can act on a timeout instead of mistaking it for an empty result."""

from __future__ import annotations

import math
from collections.abc import Callable

from .._core.plan import Plan
from .._core.records import StepRecord, StepStatus
from .._core.timeouts import ToolTimeout, timeout_message, tool_facts
from .._graph.messages import answer

__all__ = [
    "Message",
    "ToolTimeout",
    "answer",
    "render",
    "timeout_message",
    "timeout_of",
    "tool_facts",
]


Message = Callable[[ToolTimeout], str] | str | None
"""A tool's own timeout text: a format string, a function of `ToolTimeout`, or None (default)."""


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
        stalled_s=None if not record.stalled or record.gap_ms is None else record.gap_ms / 1000,
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
