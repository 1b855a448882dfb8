"""A cap on a node that answers tool calls is a cap on each call.

LangGraph's `ToolNode` (and the "tools" node of `create_agent`, which is one) runs every tool
call of the model's turn. A cap on such a node means "no tool call gets more than this", not
"end the run when the node takes this long": each call gets `min(cap, what the node has left)`,
a call that reaches its cap is cancelled (its I/O closes) and answers the model with the
model-readable timeout (`timeout_message`, a `ToolMessage` with `status="error"`), the calls that
finish answer as usual, and the model goes on with the time left. A call that the run's deadline,
not the cap, would stop is left to the node's own budget: the node is cut and the run ends, as
for any node (docs/concepts.md, "When a step runs out").

The seam is `ToolNode`'s own `wrap_tool_call` / `awrap_tool_call` (the one `create_agent`'s
middleware uses): the node is copied with a wrapper around the ones it already has.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from .._core.context import pop_step, push_step
from .._core.deadline import Deadline
from .._core.plan import Plan, RunTracker, Step, run_from_config
from .._core.records import StepRecord, StepStatus
from .._core.rules import StepRule
from .._core.step import StepResult, run_async, run_sync
from .answers import cut_answer

__all__ = ["capped_per_call", "is_tool_node"]

Result = ToolMessage | Command[Any]
Execute = Callable[[ToolCallRequest], Result]
AExecute = Callable[[ToolCallRequest], Awaitable[Result]]


def is_tool_node(node: object) -> bool:
    """True for a node that answers tool calls: LangGraph's `ToolNode` (or a subclass)."""
    return isinstance(node, ToolNode)


def capped_per_call(node: ToolNode, cap: float | StepRule) -> ToolNode:
    """A copy of `node` whose every tool call gets at most `cap` seconds (the node is left as
    it was). Wrappers the node already had (`create_agent`'s middleware) run inside the cap."""
    own_sync = node._wrap_tool_call
    own_async = node._awrap_tool_call

    def wrap(request: ToolCallRequest, execute: Execute) -> Result:
        def inner(req: ToolCallRequest) -> Result:
            return execute(req) if own_sync is None else own_sync(req, execute)

        return _sync_call(request, inner, cap)

    async def awrap(request: ToolCallRequest, execute: AExecute) -> Result:
        async def inner(req: ToolCallRequest) -> Result:
            return await (execute(req) if own_async is None else own_async(req, execute))

        return await _async_call(request, inner, cap)

    clone = copy.copy(node)
    clone._wrap_tool_call = wrap
    # A node with only a sync wrapper of its own keeps LangGraph's fallback to it under ainvoke.
    clone._awrap_tool_call = awrap if own_async is not None or own_sync is None else None
    # `RunnableCallable` keeps its bodies as bound methods: bind them to the copy.
    clone.func = clone._func
    clone.afunc = clone._afunc
    return clone


def _plan(request: ToolCallRequest, cap: float | StepRule, *, sync: bool) -> Plan:
    """The call's budget: `min(cap, what the node has left)` (the node's deadline is in context,
    the run's reserve already held back from it)."""
    return Step(request.tool_call["name"], "tool", cap).plan(run=_run(request), sync=sync)


def _run(request: ToolCallRequest) -> RunTracker | None:
    return run_from_config(request.runtime.config) if request.runtime is not None else None


def _own_budget(request: ToolCallRequest) -> bool:
    """A `deadline_tool` plans, records and answers for itself: it is only given the cap."""
    return bool(getattr(request.tool, "__langgraph_deadline__", False))


def _sync_call(request: ToolCallRequest, inner: Execute, cap: float | StepRule) -> Result:
    plan = _plan(request, cap, sync=True)
    if plan.budget is None or plan.clamped or request.tool is None:
        return inner(request)  # the node's own budget stops it (and ends the run)
    if _own_budget(request):
        token = push_step(_cap_deadline(plan), plan.name)
        try:
            return inner(request)
        finally:
            pop_step(token)
    result = run_sync(plan, lambda: inner(request), run=_run(request))
    return _answer(request, plan, result)


async def _async_call(request: ToolCallRequest, inner: AExecute, cap: float | StepRule) -> Result:
    tool = request.tool
    plan = _plan(request, cap, sync=getattr(tool, "coroutine", True) is None)
    if plan.budget is None or plan.clamped or tool is None:
        return await inner(request)  # the node's own budget stops it (and ends the run)
    if _own_budget(request):
        token = push_step(_cap_deadline(plan), plan.name)
        try:
            return await inner(request)
        finally:
            pop_step(token)
    run = _run(request)
    result = await run_async(plan, lambda: inner(request), run=run)
    return _answer(request, plan, result)


def _cap_deadline(plan: Plan) -> Deadline:
    ends = plan.step_deadline()
    assert ends is not None  # a planned budget has an end
    return ends


def _answer(request: ToolCallRequest, plan: Plan, result: StepResult[Result]) -> Result:
    """What the call returns: its own answer, the timeout message past its cap (or when it
    could not start), or its error (raised: the node's `handle_tool_errors` decides, as
    without a cap)."""
    if result.status is StepStatus.COMPLETED:
        assert result.value is not None
        return result.value
    if result.status.ran_out:
        return _timed_out(request, plan, result.record)
    assert result.error is not None
    raise result.error


def _timed_out(request: ToolCallRequest, plan: Plan, record: StepRecord) -> ToolMessage:
    """The model-readable answer of a call stopped at its cap (or not started: no budget)."""
    call = request.tool_call
    return cut_answer(str(call["id"]), call["name"], plan, record)
