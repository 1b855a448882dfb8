"""The model-call part of `DeadlineMiddleware`: a call's budget, what the provider is told of
it, and what a call that completed, was skipped or was cut turns into."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Final, NamedTuple

from langchain.agents.middleware import ExtendedModelResponse, ModelRequest, ModelResponse
from langgraph.types import Command

from .._core.plan import Plan, Step, run_from_config
from .._core.records import StepRecord, StepStatus
from .._core.step import StepResult, ends_its_run
from .._graph.seams import running_config
from .._graph.state import deadline_from_state
from .._graph.streams import (
    PartialAnswer,
    callbacks_in_context,
    stopping_streams,
    watching_streams,
)
from .closing import give_up
from .model import MIN_SAMPLES
from .note import budget_note, tool_times, with_note
from .provider import Rate, call_options, length_hint
from .run import entry_keeps_trace, tell_ended
from .settings import MiddlewareSettings
from .timing import StreamTiming, book_rate, timing_for

__all__ = [
    "MODEL_STEP",
    "Ears",
    "call_rate",
    "gave_up",
    "model_plan",
    "model_result",
    "with_budget",
]

MODEL_STEP: Final = "model"
"""The name model calls have in step records and outcomes (`create_agent`'s node name)."""


def model_plan(settings: MiddlewareSettings, state: Mapping[str, Any], *, sync: bool) -> Plan:
    """The next model call's budget: `min(model_limits.cap, remaining - reserve)`."""
    lim = settings.model_limits
    step = Step(MODEL_STEP, "model", lim.cap, lim.min_viable, settings.reserve, lim.idle_cap)
    return step.plan(deadline=deadline_from_state(state), sync=sync)


def call_rate(settings: MiddlewareSettings) -> Rate | None:
    """The model's output rate for a call: `tokens_per_second` when given; else, with a book
    attached (`book=`, the book of a learned tool cap, or the run's under
    `with_deadlines(book=)`), the rate that book learns, as `budgeted_model` does
    (`book_rate`); `learned_max_tokens=False`: none."""
    rate = settings.model_limits.tokens_per_second
    if rate is not None or not settings.model_limits.learned_max_tokens:
        return rate
    return book_rate(None, settings.book or _run_book())


def _run_book() -> object:
    run = run_from_config(running_config())
    return None if run is None else run.book


def with_budget(
    request: ModelRequest[Any], plan: Plan, settings: MiddlewareSettings
) -> ModelRequest[Any]:
    """`request` with the budget in its model settings (`timeout`, `max_tokens`): never later
    than a `timeout` the request already has; with `budget_note`, the note in its system
    message, and the length hint after it when the budget set `max_tokens`."""
    if settings.budget_note and plan.remaining is not None:
        times = tool_times(settings.book, request.tools, min_samples=MIN_SAMPLES)
        request = with_note(request, budget_note(plan.remaining, times))
    model_settings = request.model_settings
    told = call_options(
        request.model, plan.budget, model_settings, tokens_per_second=call_rate(settings)
    )
    if not told.options:
        return request
    if settings.model_limits.length_hint and told.tokens is not None:
        request = with_note(request, length_hint(told.tokens))
    return request.override(model_settings={**model_settings, **told.options})


class Ears(NamedTuple):
    """What listens to one model call's stream: the text it said (for a cut call's partial
    answer) and its timing (for a learned rate). `Ears.of` makes them; `listening()` hands them
    to the call, whose stream also stops past the cut when cancelling it does not
    (`stopping_streams`: a sync call's thread; an async call whose cancellation was
    swallowed); `ended` closes them and returns what the call had said."""

    said: PartialAnswer | None
    timing: StreamTiming | None
    watched: bool = False  # its plan has an idle cap: its chunks are progress

    @classmethod
    def of(cls, request: ModelRequest[Any], settings: MiddlewareSettings, plan: Plan) -> Ears:
        said = PartialAnswer() if settings.partial_answer else None
        return cls(said, timing_for(request.model, call_rate(settings)), plan.idle is not None)

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        ends_its_run(MODEL_STEP)  # cut, the call closes the agent: where its run ran out
        with (
            stopping_streams(),
            callbacks_in_context(self.said, self.timing),
            watching_streams(self.watched),
        ):
            yield

    def ended(self, result: StepResult[Any]) -> str:
        if self.timing is not None:
            self.timing.close(cut=result.status.cut)
        return self.said.text if self.said is not None else ""


def model_result(
    state: Mapping[str, Any], result: StepResult[ModelResponse[Any]], *, partial: str = ""
) -> ExtendedModelResponse[Any]:
    """A completed call's response with its record; a call cut (keeping the `partial` answer
    it had streamed) or refused ends the agent; errors raise."""
    if result.status is StepStatus.COMPLETED:
        assert result.value is not None
        traced: Command[Any] | None = None
        if not entry_keeps_trace():  # the middleware alone: no one else writes the record
            traced = Command(update={"deadline_trace": [result.record]})
        return ExtendedModelResponse(model_response=result.value, command=traced)
    if result.status.ran_out:
        return gave_up(state, result.record, partial=partial)
    assert result.error is not None
    raise result.error


def gave_up(
    state: Mapping[str, Any], record: StepRecord, *, partial: str = ""
) -> ExtendedModelResponse[Any]:
    """The model's answer when its call could not fit: the agent's closing words, as a response
    (after what a cut call had already said, `partial`)."""
    update = give_up(state, record, partial=partial)
    if entry_keeps_trace():
        del update["deadline_trace"]
    tell_ended(state, update["deadline_outcome"])
    return ExtendedModelResponse(
        model_response=ModelResponse(result=update.pop("messages")),
        command=Command(update=update),
    )
