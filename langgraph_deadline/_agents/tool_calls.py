"""The tool-call part of `DeadlineMiddleware`: a call's budget, and what a call that completed
or ran out turns into (its records in `deadline_trace`; a timeout message for the model)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from .._core.plan import Plan, Step
from .._core.records import StepRecord, StepStatus
from .._core.step import StepResult, record_child
from .._graph.answers import cut_answer
from .._graph.seams import task_writer
from .._graph.state import deadline_from_state, with_trace
from .._tools.tool import DeadlineTool
from .run import entry_keeps_trace
from .settings import MiddlewareSettings

__all__ = ["ToolResult", "ran_out", "tool_plan", "tool_result"]

ToolResult = ToolMessage | Command[Any]


def tool_plan(settings: MiddlewareSettings, request: ToolCallRequest, *, sync: bool) -> Plan:
    """The call's budget: `min(cap, remaining - reserve)`; a `deadline_tool` has its own cap."""
    name = request.tool_call["name"]
    cap = None if isinstance(request.tool, DeadlineTool) else settings.tool_cap(name)
    step = Step(name, "tool", cap, reserve=settings.reserve)
    return step.plan(deadline=deadline_from_state(request.state), sync=sync)


def tool_result(
    request: ToolCallRequest,
    plan: Plan,
    result: StepResult[ToolResult],
    inner: list[StepRecord],
    *,
    own: bool,
) -> ToolResult:
    """The tool's answer with its records (its own only when `own`: a `deadline_tool` records
    itself); past its budget or refused, a timeout message; errors raise."""
    if result.status is StepStatus.COMPLETED:
        assert result.value is not None
        return _with_records(request, result.value, [*inner, result.record] if own else inner)
    if result.status.ran_out:
        if not own:
            record_child(result.record, None)
        return ran_out(request, plan, result.record, inner)
    assert result.error is not None
    raise result.error


def ran_out(
    request: ToolCallRequest, plan: Plan, record: StepRecord, inner: Sequence[StepRecord]
) -> ToolResult:
    """The answer of a call that ran out: `timeout_message` for the model, with the facts."""
    call = request.tool_call
    # ToolNode runs tool calls that have an id
    message = cut_answer(cast(str, call["id"]), call["name"], plan, record)
    return _with_records(request, message, [*inner, record])


def _with_records(
    request: ToolCallRequest, value: ToolResult, records: list[StepRecord]
) -> ToolResult:
    """A tool's answer, with its step records written to `deadline_trace` beside it: the
    answer stays the tool's own (`ToolMessage` or `Command`), so middleware listed before this
    one sees what it would see without it. Outside a LangGraph task (a `ToolNode` called
    directly), and in a handoff to the parent graph (which this agent's state does not reach),
    the records ride in the answer: a `Command` updating `deadline_trace` too."""
    if not records or entry_keeps_trace():
        return value
    handoff = isinstance(value, Command) and value.graph == Command.PARENT
    writer = task_writer(getattr(request.runtime, "config", None))
    if writer is not None and not handoff:
        writer([("deadline_trace", records)])
        return value
    if isinstance(value, ToolMessage):
        return Command(update={"messages": [value], "deadline_trace": records})
    if isinstance(value, Command) and isinstance(value.update, dict):
        return cast(ToolResult, with_trace(value, records))
    return value
