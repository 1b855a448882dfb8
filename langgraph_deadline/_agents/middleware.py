"""`DeadlineMiddleware`: a `create_agent` agent's model and tool calls inside one deadline."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, Final, NotRequired, cast

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    hook_config,
)
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from .._core.context import current_deadline
from .._core.deadline import Deadline, earliest
from .._core.plan import Plan, plan_step
from .._core.record import child_records, record_child
from .._core.records import Outcome, StepRecord, StepStatus, Terminal
from .._core.run import StepResult, run_async, run_sync
from .._core.validate import check_cap, check_seconds
from .._graph.seams import PASSTHROUGH
from .._graph.state import DeadlineState, deadline_from_state, fresh_run_update, with_trace
from .._tools.tool import DeadlineTool, ToolTimeout, timeout_message
from .model import (
    BudgetedModel,
    budgeted_model,
    provider_options,
    settings_max_tokens,
    stop_stream_at,
)

__all__ = ["BudgetedModel", "DeadlineAgentState", "DeadlineMiddleware", "budgeted_model"]

MODEL_STEP: Final = "model"
"""The name model calls have in step records and outcomes (`create_agent`'s node name)."""

_RUN: Final = "deadline_run"
_EXCERPT: Final = 160
_MAX_LISTED: Final = 5

ToolResult = ToolMessage | Command[Any]


class DeadlineAgentState(AgentState[Any], DeadlineState):
    """`AgentState` plus the deadline fields (`deadline`, `deadline_outcome`, `deadline_trace`).

    `DeadlineMiddleware` adds it to the agent for you. `deadline_run` is private bookkeeping
    (which deadline this middleware stamped, and when the run started); it is neither input
    nor output.
    """

    deadline_run: NotRequired[Annotated[dict[str, float | None] | None, PrivateStateAttr]]


class DeadlineMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """One deadline for each run of a `create_agent` agent, shared by every model and tool call.

    - Each run gets a fresh deadline: the earliest of `timeout` from its start, the deadline in
      context (`deadline_scope`, `DeadlineASGIMiddleware`) and one given in the input with
      `deadline_input(...)`. It replaces the previous run's on the same thread.
    - A model call gets `min(model_cap, remaining - reserve)`, is cancelled at it (async: the
      HTTP stream is closed, SDK retries included) and LangChain's OpenAI models also get it as
      the request `timeout`. With `tokens_per_second`, `max_tokens` is cut to what fits.
    - Below `model_min_viable` no model call starts. Whether a call was skipped or cut, the agent
      ends with a final assistant message saying the time ran out and listing what the tools
      had found, closes every pending tool call with an error `ToolMessage` (the history stays
      valid for the next turn) and sets `deadline_outcome` to `deadline_exceeded`.
    - A tool call gets `min(tool_caps[name] or default_tool_cap, remaining - reserve)`; when it
      runs out it answers the model with `timeout_message` (a `ToolMessage` with
      `status="error"`) and the agent goes on. Tools made with `deadline_tool` keep their own
      budget and messages.
    - Every model and tool call leaves a `StepRecord` in `deadline_trace`; a run that finishes
      gets `deadline_outcome` `completed`. Cancellation, LangGraph's recursion limit and
      errors propagate as exceptions: `terminal_of(exc)` names them.

    List it first in `middleware=[...]`: it then wraps the others, so their retries and waits
    (`ModelRetryMiddleware`, `ToolRetryMiddleware`) are cut at the budget too.

    Raises:
        TypeError, ValueError: a time is not a finite number >= 0, or `tokens_per_second` <= 0.
    """

    state_schema = DeadlineAgentState

    def __init__(
        self,
        *,
        timeout: float | None = None,
        reserve: float = 0.0,
        tool_caps: Mapping[str, float | None] | None = None,
        default_tool_cap: float | None = None,
        model_cap: float | None = None,
        model_min_viable: float = 0.0,
        tokens_per_second: float | None = None,
    ) -> None:
        super().__init__()
        self.timeout = check_cap(timeout, "timeout")
        self.reserve = check_seconds(reserve, "reserve")
        self.tool_caps = {
            name: check_cap(cap, f"tool_caps[{name!r}]") for name, cap in (tool_caps or {}).items()
        }
        self.default_tool_cap = check_cap(default_tool_cap, "default_tool_cap")
        self.model_cap = check_cap(model_cap, "model_cap")
        self.model_min_viable = check_seconds(model_min_viable, "model_min_viable")
        self.tokens_per_second = _check_rate(tokens_per_second)
        self.tools = []

    # -- the run: stamp the deadline, say how it ended -----------------------------------------

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        """A fresh deadline for this run; the thread's previous outcome and trace are cleared."""
        values = _fields(state)
        run = values.get(_RUN) or {}
        stamped = values.get("deadline")
        given = None if stamped is None or stamped == run.get("at") else deadline_from_state(values)
        own = None if self.timeout is None else Deadline.after(self.timeout)
        d = earliest(given, current_deadline(), own)
        at = None if d is None else d.timestamp
        return {**fresh_run_update(at), _RUN: {"at": at, "started": time.time()}}

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        return self.before_agent(state, runtime)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The run reached its end: `completed`, unless it already has an outcome."""
        values = _fields(state)
        if values.get("deadline_outcome") is not None:
            return None
        return {
            "deadline_outcome": Outcome(terminal=Terminal.COMPLETED, elapsed_ms=_elapsed(values))
        }

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    # -- model calls ---------------------------------------------------------------------------

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """End the agent, gracefully, when the next model call cannot fit (or the run has ended)."""
        values = _fields(state)
        outcome = values.get("deadline_outcome")
        if isinstance(outcome, Outcome) and not outcome.ok:
            return {"jump_to": "end"}
        plan = self._model_plan(values, sync=False)
        if not plan.skip:
            return None
        return {**self._give_up(values, self._skipped(plan)), "jump_to": "end"}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """The model call under its budget: cancelled at it, then the graceful ending."""
        plan = self._model_plan(request.state, sync=False)
        if plan.skip:
            return self._model_gave_up(request.state, self._skipped(plan))
        budgeted = self._with_budget(request, plan)
        result = await run_async(plan, lambda: handler(budgeted), passthrough=PASSTHROUGH)
        return self._model_result(request.state, result)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Sync: the call runs on a worker thread the run stops waiting for at the budget (the
        thread cannot be killed: recorded `abandoned`); its token stream stops at the next chunk."""
        plan = self._model_plan(request.state, sync=True)
        if plan.skip:
            return self._model_gave_up(request.state, self._skipped(plan))
        budgeted = self._with_budget(request, plan)
        stop = plan.step_deadline()

        def body() -> ModelResponse[Any]:
            with stop_stream_at(stop, MODEL_STEP):
                return handler(budgeted)

        return self._model_result(request.state, run_sync(plan, body, passthrough=PASSTHROUGH))

    def _model_plan(self, state: Mapping[str, Any], *, sync: bool) -> Plan:
        return plan_step(
            MODEL_STEP,
            "model",
            cap=self.model_cap,
            min_viable=self.model_min_viable,
            reserve=self.reserve,
            deadline=deadline_from_state(state),
            sync=sync,
        )

    def _with_budget(self, request: ModelRequest[Any], plan: Plan) -> ModelRequest[Any]:
        settings = request.model_settings
        options = provider_options(
            request.model,
            plan.budget,
            tokens_per_second=self.tokens_per_second,
            max_tokens=settings_max_tokens(request.model, settings),
        )
        given = settings.get("timeout")
        if "timeout" in options and isinstance(given, int | float) and given > 0:
            options["timeout"] = min(options["timeout"], given)
        if not options:
            return request
        return request.override(model_settings={**settings, **options})

    def _model_result(
        self, state: Mapping[str, Any], result: StepResult[ModelResponse[Any]]
    ) -> ExtendedModelResponse[Any]:
        if result.status is StepStatus.COMPLETED:
            assert result.value is not None
            return ExtendedModelResponse(
                model_response=result.value,
                command=Command(update={"deadline_trace": [result.record]}),
            )
        if result.status.cut:
            return self._model_gave_up(state, result.record)
        assert result.error is not None
        raise result.error

    def _model_gave_up(
        self, state: Mapping[str, Any], record: StepRecord
    ) -> ExtendedModelResponse[Any]:
        update = self._give_up(state, record)
        return ExtendedModelResponse(
            model_response=ModelResponse(result=update.pop("messages")),
            command=Command(update=update),
        )

    def _skipped(self, plan: Plan) -> StepRecord:
        record = plan.record(StepStatus.SKIPPED)
        record_child(record, None)
        return record

    def _give_up(self, state: Mapping[str, Any], record: StepRecord) -> dict[str, Any]:
        """The state update that ends the agent for lack of time, in words the user can read."""
        messages: list[AnyMessage] = list(state.get("messages") or [])
        outcome = Outcome(
            terminal=Terminal.DEADLINE_EXCEEDED,
            step=record.name,
            reason=record.ran_out_reason(),
            elapsed_ms=_elapsed(state),
        )
        closing: list[BaseMessage] = [*_close_pending(messages, record)]
        closing.append(
            AIMessage(
                content=_final_text([*messages, *closing]),
                response_metadata={"langgraph_deadline": outcome.to_dict()},
            )
        )
        return {"messages": closing, "deadline_outcome": outcome, "deadline_trace": [record]}

    # -- tool calls ----------------------------------------------------------------------------

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """The tool call under its budget; past it, a timeout message for the model."""
        tool = request.tool
        if tool is None:  # not a tool of this agent: ToolNode answers with its own error
            return await handler(request)
        plan = self._tool_plan(request, sync=getattr(tool, "coroutine", True) is None)
        if plan.skip:
            return self._tool_ran_out(request, plan, self._skipped(plan), [])
        own = not isinstance(tool, DeadlineTool)  # a deadline_tool records and answers itself
        inner: list[StepRecord] = []

        async def body() -> ToolResult:
            with child_records() as sink:
                try:
                    return await handler(request)
                finally:
                    inner.extend(sink)

        result = await run_async(plan, body, commit=own, passthrough=PASSTHROUGH)
        return self._tool_result(request, plan, result, inner, own=own)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Sync: past its budget the tool's thread is abandoned (it cannot be killed)."""
        tool = request.tool
        if tool is None:
            return handler(request)
        plan = self._tool_plan(request, sync=True)
        if plan.skip:
            return self._tool_ran_out(request, plan, self._skipped(plan), [])
        own = not isinstance(tool, DeadlineTool)
        inner: list[StepRecord] = []

        def body() -> ToolResult:
            with child_records() as sink:
                try:
                    return handler(request)
                finally:
                    inner.extend(sink)

        result = run_sync(plan, body, commit=own, passthrough=PASSTHROUGH)
        return self._tool_result(request, plan, result, inner, own=own)

    def _tool_plan(self, request: ToolCallRequest, *, sync: bool) -> Plan:
        name = request.tool_call["name"]
        wrapped = isinstance(request.tool, DeadlineTool)
        return plan_step(
            name,
            "tool",
            cap=None if wrapped else self.tool_caps.get(name, self.default_tool_cap),
            min_viable=0.0,
            reserve=self.reserve,
            deadline=deadline_from_state(request.state),
            sync=sync,
        )

    def _tool_result(
        self,
        request: ToolCallRequest,
        plan: Plan,
        result: StepResult[ToolResult],
        inner: list[StepRecord],
        *,
        own: bool,
    ) -> ToolResult:
        if result.status is StepStatus.COMPLETED:
            assert result.value is not None
            return _with_trace(result.value, [*inner, result.record] if own else inner)
        if result.status.cut:
            if not own:
                record_child(result.record, None)
            return self._tool_ran_out(request, plan, result.record, inner)
        assert result.error is not None
        raise result.error

    def _tool_ran_out(
        self,
        request: ToolCallRequest,
        plan: Plan,
        record: StepRecord,
        inner: Sequence[StepRecord],
    ) -> Command[Any]:
        call = request.tool_call
        info = ToolTimeout(
            tool=call["name"],
            status=record.status,
            budget_s=plan.budget,
            elapsed_s=record.elapsed_ms / 1000.0,
            remaining_s=plan.remaining,
            min_viable_s=plan.min_viable,
        )
        message = ToolMessage(
            content=timeout_message(info),
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
            artifact={"langgraph_deadline": _facts(record)},
        )
        return Command(update={"messages": [message], "deadline_trace": [*inner, record]})


# -- helpers --------------------------------------------------------------------------------------


def _fields(state: AgentState[Any]) -> Mapping[str, Any]:
    """The agent state with the fields this middleware adds (`DeadlineAgentState`)."""
    return cast("Mapping[str, Any]", state)


def _check_rate(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"tokens_per_second must be a number, got {type(value).__name__}")
    rate = float(value)
    if not (rate > 0 and rate != float("inf")):
        raise ValueError(f"tokens_per_second must be a finite number > 0, got {value!r}")
    return rate


def _elapsed(state: Mapping[str, Any]) -> float | None:
    run = state.get(_RUN) or {}
    started = run.get("started")
    if not isinstance(started, float):
        return None
    return round((time.time() - started) * 1000.0, 3)


def _facts(record: StepRecord) -> dict[str, Any]:
    return {
        "status": str(record.status),
        "budget_ms": record.allocated_ms,
        "elapsed_ms": round(record.elapsed_ms, 3),
        "stale": False,
    }


def _with_trace(value: ToolResult, records: list[StepRecord]) -> ToolResult:
    """A tool's answer carrying its step records into `deadline_trace`."""
    if not records:
        return value
    if isinstance(value, ToolMessage):
        return Command(update={"messages": [value], "deadline_trace": records})
    if isinstance(value, Command) and isinstance(value.update, dict):
        return cast(ToolResult, with_trace(value, records))
    return value


def _close_pending(messages: Sequence[BaseMessage], record: StepRecord) -> list[ToolMessage]:
    """An error `ToolMessage` for each tool call of the last assistant turn still unanswered."""
    for i in range(len(messages) - 1, -1, -1):
        last = messages[i]
        if isinstance(last, AIMessage):
            answered = {m.tool_call_id for m in messages[i + 1 :] if isinstance(m, ToolMessage)}
            left = record.remaining_ms / 1000.0 if record.remaining_ms is not None else None
            return [
                ToolMessage(
                    content=timeout_message(
                        ToolTimeout(
                            tool=call["name"],
                            status=StepStatus.SKIPPED,
                            budget_s=0.0,
                            elapsed_s=0.0,
                            remaining_s=left,
                            min_viable_s=0.0,
                        )
                    ),
                    tool_call_id=call["id"],
                    name=call["name"],
                    status="error",
                    artifact={"langgraph_deadline": {"status": "skipped", "stale": False}},
                )
                for call in last.tool_calls
                if call["id"] is not None and call["id"] not in answered
            ]
        if isinstance(last, HumanMessage):
            break
    return []


def _final_text(messages: Sequence[BaseMessage]) -> str:
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
