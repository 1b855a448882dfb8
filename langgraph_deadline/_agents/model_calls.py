"""The model-call part of `DeadlineMiddleware`: a call's budget, what the provider is told of
it, and what a call that completed, was skipped or was cut turns into."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from langchain.agents.middleware import ExtendedModelResponse, ModelRequest, ModelResponse
from langgraph.types import Command

from .._core.plan import Plan, plan_step
from .._core.records import StepRecord, StepStatus
from .._core.run import StepResult
from .._graph.state import deadline_from_state
from .closing import give_up
from .provider import provider_options, settings_max_tokens
from .settings import MiddlewareSettings

__all__ = ["MODEL_STEP", "gave_up", "model_plan", "model_result", "with_budget"]

MODEL_STEP: Final = "model"
"""The name model calls have in step records and outcomes (`create_agent`'s node name)."""


def model_plan(settings: MiddlewareSettings, state: Mapping[str, Any], *, sync: bool) -> Plan:
    """The next model call's budget: `min(model_cap, remaining - reserve)`."""
    return plan_step(
        MODEL_STEP,
        "model",
        cap=settings.model_cap,
        min_viable=settings.model_min_viable,
        reserve=settings.reserve,
        deadline=deadline_from_state(state),
        sync=sync,
    )


def with_budget(
    request: ModelRequest[Any], plan: Plan, settings: MiddlewareSettings
) -> ModelRequest[Any]:
    """`request` with the budget in its model settings (`timeout`, `max_tokens`): never later
    than a `timeout` the request already has."""
    model_settings = request.model_settings
    options = provider_options(
        request.model,
        plan.budget,
        tokens_per_second=settings.tokens_per_second,
        max_tokens=settings_max_tokens(request.model, model_settings),
    )
    given = model_settings.get("timeout")
    if "timeout" in options and isinstance(given, int | float) and given > 0:
        options["timeout"] = min(options["timeout"], given)
    if not options:
        return request
    return request.override(model_settings={**model_settings, **options})


def model_result(
    state: Mapping[str, Any], result: StepResult[ModelResponse[Any]], *, partial: str = ""
) -> ExtendedModelResponse[Any]:
    """A completed call's response with its record; a cut call ends the agent (keeping the
    `partial` answer it had streamed); errors raise."""
    if result.status is StepStatus.COMPLETED:
        assert result.value is not None
        return ExtendedModelResponse(
            model_response=result.value,
            command=Command(update={"deadline_trace": [result.record]}),
        )
    if result.status.cut:
        return gave_up(state, result.record, partial=partial)
    assert result.error is not None
    raise result.error


def gave_up(
    state: Mapping[str, Any], record: StepRecord, *, partial: str = ""
) -> ExtendedModelResponse[Any]:
    """The model's answer when its call could not fit: the agent's closing words, as a response
    (after what a cut call had already said, `partial`)."""
    update = give_up(state, record, partial=partial)
    return ExtendedModelResponse(
        model_response=ModelResponse(result=update.pop("messages")),
        command=Command(update=update),
    )
