"""`DeadlineMiddleware(fallbacks=[...])`: an agent's model call, down its chain of models.

The agent's own model (the request's) comes first, named `model` like every agent model call;
then the fallbacks, each under its model id. `fallback.pick` chooses, `model_calls` budgets the
request (`with_budget`) and turns what the call did into the agent's next state, as for a call
without fallbacks: a cut by the deadline ends the agent with its closing words, an error
raises. A fallback runs as the request with its model swapped (`request.override(model=...)`,
as LangChain's `ModelFallbackMiddleware` does): the agent's tools are bound to it by the
handler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from langchain.agents.middleware import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langgraph.types import Command

from .._core.plan import Plan
from .._core.records import StepRecord, StepStatus
from .._core.step import StepResult, refused, run_async, run_sync
from .._graph.state import deadline_from_state
from .model import Choice, Fallbacks, Pick, mark_messages, pick, why_next
from .model_calls import MODEL_STEP, Ears, gave_up, model_plan, model_result, with_budget
from .settings import MiddlewareSettings

__all__ = ["acall_chain", "call_chain"]

Response = ModelResponse[Any] | ExtendedModelResponse[Any]


def _chain(settings: MiddlewareSettings, request: ModelRequest[Any]) -> tuple[Choice, ...]:
    assert settings.fallbacks is not None
    lim = settings.model_limits
    main = Choice(MODEL_STEP, request.model, lim.cap, lim.min_viable, idle_cap=lim.idle_cap)
    return (main, *settings.fallbacks.models)


def _planner(
    settings: MiddlewareSettings, state: Mapping[str, Any], *, sync: bool
) -> Callable[[Choice], Plan]:
    def plan_of(choice: Choice) -> Plan:
        if choice.name == MODEL_STEP:
            return model_plan(settings, state, sync=sync)
        return choice.step(settings.reserve).plan(deadline=deadline_from_state(state), sync=sync)

    return plan_of


def _request_for(
    request: ModelRequest[Any], chosen: Pick, choice: Choice, settings: MiddlewareSettings
) -> ModelRequest[Any]:
    model = choice.model
    if chosen.at == 0:
        own = request
    else:
        assert isinstance(model, BaseChatModel)  # checked when the middleware was made
        own = request.override(model=model)
    return with_budget(own, chosen.plan, settings)


def _settled(
    state: Mapping[str, Any],
    chosen: Pick,
    choice: Choice,
    result: StepResult[ModelResponse[Any]],
    earlier: Sequence[StepRecord],
    said: str,
) -> Response:
    """What a call that answered or ran out turns into, with the records of the models tried
    before it in the trace; a fallback's record carries its note, its answer is marked."""
    if chosen.at and result.status is StepStatus.COMPLETED and result.value is not None:
        marked = mark_messages(result.value.result, choice.name, chosen.passed)
        result = result._replace(value=dataclasses.replace(result.value, result=marked))
    response = model_result(state, result, partial=said)
    command = response.command
    if earlier and isinstance(command, Command) and isinstance(command.update, dict):
        update = {**command.update}
        update["deadline_trace"] = [*earlier, *update.get("deadline_trace", [])]
        response = dataclasses.replace(response, command=Command(update=update))
    return response


def _then(
    state: Mapping[str, Any],
    chain: Sequence[Choice],
    plan_of: Callable[[Choice], Plan],
    rule: Fallbacks,
    chosen: Pick,
    result: StepResult[ModelResponse[Any]],
    earlier: list[StepRecord],
    said: str,
) -> Pick | Response:
    """After one model of the chain: the next one to try, or the agent's response."""
    choice = chain[chosen.at]
    why = why_next(choice, chosen.plan, result)
    later = None if why is None else pick(chain, chosen.at + 1, plan_of, rule, why=why)[0]
    if later is None:
        return _settled(state, chosen, choice, result, earlier, said)
    earlier.append(result.record)
    return later


def _start(
    settings: MiddlewareSettings, request: ModelRequest[Any], *, sync: bool
) -> tuple[tuple[Choice, ...], Callable[[Choice], Plan], Fallbacks, Pick | Response]:
    assert settings.fallbacks is not None
    chain = _chain(settings, request)
    plan_of = _planner(settings, request.state, sync=sync)
    chosen, first = pick(chain, 0, plan_of, settings.fallbacks)
    if chosen is None:
        assert first is not None
        return chain, plan_of, settings.fallbacks, gave_up(request.state, refused(first).record)
    return chain, plan_of, settings.fallbacks, chosen


async def acall_chain(
    settings: MiddlewareSettings,
    request: ModelRequest[Any],
    handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
) -> Response:
    """The agent's model call, async: each model tried is cancelled at its budget."""
    chain, plan_of, rule, step = _start(settings, request, sync=False)
    earlier: list[StepRecord] = []
    while isinstance(step, Pick):
        call = _request_for(request, step, chain[step.at], settings)
        ears = Ears.of(call, settings, step.plan)
        with ears.listening():
            result = await run_async(step.plan, partial(handler, call))
        said = ears.ended(result)
        step = _then(request.state, chain, plan_of, rule, step, result, earlier, said)
    return step


def call_chain(
    settings: MiddlewareSettings,
    request: ModelRequest[Any],
    handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
) -> Response:
    """The agent's model call, sync: each model tried runs on a worker thread the run stops
    waiting for at its budget; its token stream stops at the next chunk."""
    chain, plan_of, rule, step = _start(settings, request, sync=True)
    earlier: list[StepRecord] = []
    while isinstance(step, Pick):
        call = _request_for(request, step, chain[step.at], settings)
        ears = Ears.of(call, settings, step.plan)
        body = _body(handler, call, ears)
        result = run_sync(step.plan, body)
        said = ears.ended(result)
        step = _then(request.state, chain, plan_of, rule, step, result, earlier, said)
    return step


def _body(
    handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    call: ModelRequest[Any],
    ears: Ears,
) -> Callable[[], ModelResponse[Any]]:
    def body() -> ModelResponse[Any]:
        with ears.listening():
            return handler(call)

    return body
