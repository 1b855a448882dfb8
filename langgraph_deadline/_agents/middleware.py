"""`DeadlineMiddleware`: a `create_agent` agent's model and tool calls inside one deadline.

The rules live next door: `model_calls` and `tool_calls` (a call's budget and what its result
turns into), `fallback_calls` (a model call down a chain of models), `closing` (the words an
agent that ran out ends with), `run` (its state fields).

This module is the class users configure: its arguments, their read-only properties and the
hooks LangChain calls, each hook a few lines handing on to those rules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from .._core.deadline import Deadline, earliest
from .._core.records import Outcome, StepRecord, Terminal
from .._core.rules import StepRule
from .._core.step import child_records, refused, run_async, run_sync
from .._core.validate import show
from .._graph.following import found_book
from .._graph.state import deadline_from_state, fresh_run_update
from .._learn.book import LatencyBook
from .._tools.tool import DeadlineTool
from .fallback_calls import acall_chain, call_chain
from .model import MIN_SAMPLES, BudgetedModel, ModelLimits, fallbacks_of
from .model_calls import MODEL_STEP, Ears, gave_up, model_plan, model_result, with_budget
from .run import (
    RUN,
    DeadlineAgentState,
    elapsed_ms,
    fields,
    run_started,
    steps_of,
    tell_ended,
)
from .seams import ToolHook
from .settings import MiddlewareSettings
from .tool_calls import ToolResult, tool_plan, tool_result
from .turn import deadline_around, handed_on, in_parent_graph, turn_in_progress

__all__ = ["DeadlineAgentState", "DeadlineMiddleware"]


class DeadlineMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """One deadline for each run of a `create_agent` agent, shared by every model and tool call.

    Its checked settings are one frozen value, `settings` (`middleware.settings.timeout`, ...).

    - Each run gets a fresh deadline: the earliest of `timeout` from its start, the deadline in
      context (`deadline_scope`, `DeadlineASGIMiddleware`) and one given in the input with
      `deadline_input(...)`. It replaces the previous run's on the same thread.
    - One user turn, one deadline: an agent handed a turn in progress inside a parent graph (a
      swarm handoff, a supervisor's delegation) joins the turn's deadline instead of starting
      its `timeout` again; its handoffs carry the deadline and its records to the parent; it
      leaves `completed` to the parent, which learns a `deadline_exceeded`.
    - A model call gets `min(model_limits.cap, remaining - reserve)` (`model_limits` is one
      `ModelLimits`: `cap`, `min_viable`, `idle_cap`, `tokens_per_second`, `length_hint`,
      `learned_max_tokens`), is cancelled at it (async: the
      HTTP stream is closed, SDK retries included) and models whose SDK takes a per-request
      timeout (OpenAI's, Anthropic's, Gemini's, ...) also get it as theirs. With
      `tokens_per_second`, `max_tokens` is cut to what fits, under the name the model's
      provider takes (none, and one warning, for a family not known); given
      `learned(book)`, the model's time to first token and output rate are learned per model
      id from its streamed calls, and `max_tokens` is what fits after a slow first token at a
      slow day's rate (your own `max_tokens` stays the most). Without `tokens_per_second`, a
      book attached to the agent (`book`, the book of a learned tool cap, or the run's
      under `with_deadlines(book=)`) does the same by default, as for `budgeted_model`: its
      p90 once it holds 10 streamed calls of the model (`learned_max_tokens=False`: off). A
      call whose time fits fewer than 12 tokens gets no `max_tokens` (cut at its budget, the
      agent ends in words, as without a book). Under `with_deadlines(book=)` the agent runs
      against the run's deadline, not its first node's budget.
      When the budget sets `max_tokens`, the model is also told its length (a line at the end
      of the system message, as for `budgeted_model`: it writes a shorter, whole answer rather
      than being cut mid-sentence; `length_hint=False` leaves the system message as it is).
    - With an `idle_cap` (seconds, or `learned(book)`), a model call whose stream sends
      nothing for that long after its first chunk is cut at once as stalled (its record's
      `cancel_source="stalled"`, its note "no progress for 2.1 s"): the next fallback model
      takes the time left, or, without one, the agent ends as for a cut call.
    - Below its `min_viable` no model call starts. Whether a call was skipped or cut, the agent
      ends with a final assistant message saying the time ran out and listing what the tools
      had found (a cut call's streamed text first, marked as cut short; `partial_answer=False`
      leaves it out), closes every pending tool call with an error `ToolMessage` (the history stays
      valid for the next turn) and sets `deadline_outcome` to `deadline_exceeded`.
    - A tool call gets `min(tool_caps[name] or default_tool_cap, remaining - reserve)` (either
      may be `learned(book, ...)`, learned per tool name); when it
      runs out it answers the model with `timeout_message` (a `ToolMessage` with
      `status="error"`) and the agent goes on. Tools made with `deadline_tool` keep their own
      budget and messages.
    - Every model and tool call leaves a `StepRecord` in `deadline_trace`; a run that finishes
      gets `deadline_outcome` `completed`. Cancellation, LangGraph's recursion limit and
      errors propagate as exceptions: `terminal_of(exc)` names them.

    - With `fallbacks` (opt-in), a model call goes to the first model of `[the agent's
      model, *fallbacks]` that can start and, with a `book`, whose learned
      `fallback_quantile` of answer times fits its budget; one that fails or is cut at
      its `cap` with time left hands the call to the next that fits, inside the same
      deadline. A fallback's record (named by its model id) says what it stood in for in its
      `note`, and its `AIMessage` carries `response_metadata["langgraph_deadline"]["fallback"]`.

    - With `budget_note=True` (opt-in), each model call's system message ends with a short
      note: the seconds left and, from `book`, what the tools it may call usually take,
      so the model can plan fewer calls when time is short.

    List it first in `middleware=[...]`: it then wraps the others, so their retries and waits
    (`ModelRetryMiddleware`, `ToolRetryMiddleware`) are cut at the budget too. It may go
    anywhere, and the agent may be under `with_deadlines` too: the other middleware see the
    same requests and responses (a tool's own `ToolMessage`), the graph has the same edges and
    LangChain the same checks, and a run takes two more steps (the run's start and end) against
    `recursion_limit`. Every difference is listed in docs/howto/agents.md.

    Raises:
        TypeError, ValueError: a time is not a finite number >= 0 (or a cap is 0),
            `tool_caps` is not a mapping, `model_limits` not a `ModelLimits`, or the settings
            cannot fit (`reserve >= timeout`, the model's `min_viable` above `timeout` less
            `reserve`); `fallbacks` empty, holding a non-model or two models of one name;
            `book` not a `LatencyBook`; `fallback_quantile` outside (0, 1); `partial_answer` or
            `budget_note` not a bool.
        ValueError: at the agent's first model call, `tool_caps` naming a tool the agent
            does not have (the tools are known only then).
    """

    state_schema = DeadlineAgentState

    def __init__(
        self,
        *,
        timeout: float | None = None,
        reserve: float = 0.0,
        tool_caps: Mapping[str, float | StepRule | None] | None = None,
        default_tool_cap: float | StepRule | None = None,
        model_limits: ModelLimits | None = None,
        partial_answer: bool = True,
        fallbacks: Sequence[BaseChatModel | BudgetedModel[Any]] | None = None,
        book: LatencyBook | None = None,
        fallback_quantile: float = 0.9,
        budget_note: bool = False,
    ) -> None:
        super().__init__()
        models, given = fallbacks, book
        book = _attached(given, tool_caps, default_tool_cap)
        chain = fallbacks_of(
            models,
            label="fallbacks",
            taken=MODEL_STEP,
            book=None if models is None else given,
            quantile=fallback_quantile,
            min_samples=MIN_SAMPLES,
            quantile_label="fallback_quantile",
            chat_models=True,
        )
        self.settings = MiddlewareSettings(
            timeout=timeout,
            reserve=reserve,
            tool_caps={} if tool_caps is None else tool_caps,
            default_tool_cap=default_tool_cap,
            model_limits=ModelLimits() if model_limits is None else model_limits,
            partial_answer=partial_answer,
            fallbacks=chain,
            budget_note=budget_note,
            book=book,
        )
        self.tools = []

    # -- the settings are `self.settings`; only the fallbacks' names are read here --------------

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """The names of the fallback models, in the order they are tried."""
        chain = self.settings.fallbacks
        return () if chain is None else tuple(c.name for c in chain.models)

    # -- the run: stamp the deadline, say how it ended -----------------------------------------

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        """A fresh deadline for this run; the thread's previous outcome and trace are cleared.

        Under `with_deadlines`, the run's deadline: not this node's own budget (`deadline_around`),
        which is shortened by the time kept back for the model and tool calls after it.
        An agent handed a user turn in progress (a swarm handoff, a supervisor's delegation)
        joins that turn's deadline instead: `timeout` is not started again.
        """
        values = fields(state)
        run = values.get(RUN) or {}
        carried = turn_in_progress(values, run.get("at"))
        if carried is not None:
            d = earliest(carried, deadline_around())
            at = None if d is None else d.timestamp
            # the outcome stays (a turn that ran out stays so); the trace here is this agent's
            return {
                "deadline": at,
                "deadline_trace": Overwrite([]),
                RUN: run_started(at, self.settings.reserve, joined=True),
            }
        stamped = values.get("deadline")
        nested = in_parent_graph()  # a parent's state may hold a previous turn's deadline
        mine = stamped is None or stamped == run.get("at") or nested
        given = None if mine else deadline_from_state(values)
        own = None if self.settings.timeout is None else Deadline.after(self.settings.timeout)
        d = earliest(given, deadline_around(), own)
        at = None if d is None else d.timestamp
        return {**fresh_run_update(at), RUN: run_started(at, self.settings.reserve, nested=nested)}

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        return self.before_agent(state, runtime)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The run reached its end: `completed`, unless it already has an outcome. An agent
        inside a parent graph leaves `completed` to the parent: another agent of the same turn
        may still run out."""
        values = fields(state)
        run = values.get(RUN) or {}
        if values.get("deadline_outcome") is not None or run.get("nested") or run.get("joined"):
            return None
        outcome = Outcome(terminal=Terminal.COMPLETED, elapsed_ms=elapsed_ms(values))
        tell_ended(values, outcome)
        return {"deadline_outcome": outcome}

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    # -- model calls ---------------------------------------------------------------------------

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """The model call under its budget: cancelled at it, then the graceful ending. One that
        cannot fit (or comes after the run ended) is not made: the agent ends, in words."""
        with steps_of(request.state):
            self.settings.check_tool_names(request.tools)
            if (ended := _ended(self.settings, request)) is not None:
                return ended
            if self.settings.fallbacks is not None:
                return await acall_chain(self.settings, request, handler)
            plan = model_plan(self.settings, request.state, sync=False)
            budgeted = with_budget(request, plan, self.settings)
            ears = Ears.of(budgeted, self.settings, plan)
            with ears.listening():
                result = await run_async(plan, lambda: handler(budgeted))
            return model_result(request.state, result, partial=ears.ended(result))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Sync: the call runs on a worker thread the run stops waiting for at the budget (the
        thread cannot be killed: recorded `abandoned`); its token stream stops at the next chunk."""
        with steps_of(request.state):
            self.settings.check_tool_names(request.tools)
            if (ended := _ended(self.settings, request)) is not None:
                return ended
            if self.settings.fallbacks is not None:
                return call_chain(self.settings, request, handler)
            plan = model_plan(self.settings, request.state, sync=True)
            budgeted = with_budget(request, plan, self.settings)
            ears = Ears.of(budgeted, self.settings, plan)

            def body() -> ModelResponse[Any]:
                with ears.listening():
                    return handler(budgeted)

            result = run_sync(plan, body)
            return model_result(request.state, result, partial=ears.ended(result))

    # -- tool calls ----------------------------------------------------------------------------

    @ToolHook
    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """The tool call under its budget; past it, a timeout message for the model. A call
        of a tool the agent does not have (`request.tool` None) is budgeted too: a middleware
        listed after this one may run it (a tool added at run time), or ToolNode answers it
        with its own error."""
        with steps_of(request.state):
            tool = request.tool
            plan = tool_plan(self.settings, request, sync=getattr(tool, "coroutine", True) is None)
            own = not isinstance(tool, DeadlineTool)  # a deadline_tool records and answers itself
            inner: list[StepRecord] = []

            async def body() -> ToolResult:
                with child_records() as sink:
                    try:
                        return await handler(request)
                    finally:
                        inner.extend(sink)

            result = await run_async(plan, body, commit=own)
            return handed_on(tool_result(request, plan, result, inner, own=own), request.state)

    @ToolHook
    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Sync: past its budget the tool's thread is abandoned (it cannot be killed)."""
        with steps_of(request.state):
            tool = request.tool
            plan = tool_plan(self.settings, request, sync=True)
            own = not isinstance(tool, DeadlineTool)
            inner: list[StepRecord] = []

            def body() -> ToolResult:
                with child_records() as sink:
                    try:
                        return handler(request)
                    finally:
                        inner.extend(sink)

            result = run_sync(plan, body, commit=own)
            return handed_on(tool_result(request, plan, result, inner, own=own), request.state)


def _ended(
    settings: MiddlewareSettings, request: ModelRequest[Any]
) -> ExtendedModelResponse[Any] | None:
    """The agent's ending, when its run already ended early (an agent handed a turn that ran
    out): no model call is made."""
    outcome = fields(request.state).get("deadline_outcome")
    if not isinstance(outcome, Outcome) or outcome.ok:
        return None
    return gave_up(request.state, refused(model_plan(settings, request.state, sync=False)).record)


def _attached(
    book: object,
    tool_caps: Mapping[str, float | StepRule | None] | None,
    default_tool_cap: float | StepRule | None,
) -> LatencyBook | None:
    """The book attached to the agent: `book` (checked), else the book of a learned
    tool cap (a user who wrote `learned(book)` for a tool has attached it)."""
    if book is not None and not isinstance(book, LatencyBook):
        raise TypeError(f"book must be a LatencyBook or None, got {show(book)}")
    if book is None:
        caps = dict(tool_caps) if isinstance(tool_caps, Mapping) else {}
        book = found_book(caps, {"": default_tool_cap})
    return book if isinstance(book, LatencyBook) else None
