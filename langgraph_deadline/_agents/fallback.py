"""Model fallback that knows the clock: which model of a chain answers a call, and why.

A chain is the main model and its fallbacks, in order. Before a call, each model is planned
against the deadline like any model step; the first that can start and whose learned time to
answer (a high quantile of its model-step latency in a `LatencyBook`) fits its budget is
called. A model the book says is too slow is passed over for the next, except the last one,
which is tried whenever its `min_viable` fits (a prediction prefers, only `min_viable`
refuses). After a call fails (a provider error) or is cut at its own cap with time left, the
next model that fits is tried, planned again against the same deadline: nothing refreshes it.

A model passed over is not a step (it never ran): the record of the model that answers says
which model it stood in for and why (`StepRecord.note`), and its `AIMessage` says so in
`response_metadata["langgraph_deadline"]`. The calls themselves run where they did before
(`model.py` for `budgeted_model`, `fallback_calls.py` for the middleware).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable

from .._core.plan import Plan
from .._core.records import StepStatus
from .._core.run import StepResult
from .._core.validate import check_number, show
from .._learn.book import LatencyBook
from .provider import Rate, model_id

__all__ = [
    "METADATA_KEY",
    "MIN_SAMPLES",
    "Choice",
    "Fallbacks",
    "Pick",
    "fallbacks_of",
    "mark_fallback",
    "mark_messages",
    "model_id",
    "pick",
    "why_next",
]

MIN_SAMPLES: Final = 20
"""Samples of a model's steps a book needs before its answer time is trusted to pass it over."""

METADATA_KEY: Final = "langgraph_deadline"
"""The key of a fallback answer's `response_metadata` entry."""


@dataclasses.dataclass(frozen=True, slots=True)
class Choice:
    """One model of a chain: its step `name`, the model, its `cap` and `min_viable`, its
    output `rate` (cuts `max_tokens`)."""

    name: str
    model: Runnable[LanguageModelInput, Any]
    cap: float | None = None
    min_viable: float = 0.0
    rate: Rate | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fallbacks:
    """The models to use instead of the main one, in order, and how to tell that a model would
    not answer in time: its `quantile` of the model-step latencies `book` learned, once the book
    holds `min_samples` of them (no book, or fewer samples: no prediction). A value: checked by
    `fallbacks_of`, never changed."""

    models: tuple[Choice, ...]
    book: LatencyBook | None = None
    quantile: float = 0.9
    min_samples: int = 20

    def expected(self, name: str) -> float | None:
        """Seconds the model `name` takes to answer, at `quantile` (None: not known yet). A
        quantile among cut calls is a lower bound ("at least"): still too slow if it is."""
        book = self.book
        if book is None or book.count(name, "model") < max(1, self.min_samples):
            return None
        est = book.sketch(name, "model").quantile(self.quantile)
        return None if est is None else est.seconds

    def with_models(self, models: Sequence[Choice]) -> Fallbacks:
        """The same rule over other models (the same ones with tools bound)."""
        return dataclasses.replace(self, models=tuple(models))


def fallbacks_of(
    models: object,
    *,
    label: str,
    taken: str,
    book: object,
    quantile: object,
    min_samples: object,
    book_label: str = "book",
    quantile_label: str = "quantile",
    chat_models: bool = False,
) -> Fallbacks | None:
    """`models` checked as a chain of fallbacks (None: no fallback), every mistake refused here,
    naming the argument: not a list, an empty list, a non-model, two models of one name (or of
    the main model's name, `taken`), a fallback with fallbacks of its own, a book without
    fallbacks, a quantile outside (0, 1).

    A chat model is called by its model id, with no cap or min_viable of its own (the deadline
    bounds it); one made with `budgeted_model(model, name=, cap=, min_viable=)` brings its own.
    With `chat_models`, each must wrap a chat model itself (no tools bound: an agent binds its
    own).
    """
    from .model import BudgetedModel  # the wrapper that carries a model's own limits

    if book is not None and not isinstance(book, LatencyBook):
        raise TypeError(f"{book_label} must be a LatencyBook or None, got {show(book)}")
    q = check_number(quantile, quantile_label, "a number in (0, 1)")
    if not 0.0 < q < 1.0:
        raise ValueError(f"{quantile_label} must be in (0, 1), got {show(quantile)}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ValueError(f"min_samples must be an int >= 1, got {show(min_samples)}")
    if models is None:
        if book is not None:
            raise ValueError(f"{book_label} is only read to choose a fallback: give {label} too")
        return None
    if isinstance(models, str | bytes) or not isinstance(models, Sequence):
        raise TypeError(f"{label} must be a list of chat models, got {show(models)}")
    if not models:
        raise ValueError(f"{label} is empty: leave it out (None) for no fallback")
    chain: list[Choice] = []
    names = {taken}
    for i, model in enumerate(models):
        if isinstance(model, BudgetedModel) and model.fallbacks:
            raise ValueError(
                f"{label}[{i}] has fallbacks of its own: list them in this chain instead"
            )
        if isinstance(model, BudgetedModel) and not (
            chat_models and not isinstance(model.model, BaseChatModel)
        ):
            choice = Choice(
                model.step_name, model.model, model.cap, model.min_viable, model.tokens_per_second
            )
        elif isinstance(model, BaseChatModel):
            choice = Choice(model_id(model), model)
        else:
            raise TypeError(f"{label}[{i}] must be a chat model, got {show(model)}")
        if choice.name in names:
            raise ValueError(
                f"{label}[{i}] is named {choice.name!r} like a model before it: each model of a "
                f"chain needs its own name (budgeted_model(model, name=...))"
            )
        names.add(choice.name)  # a budgeted model's cap and min_viable were checked when made
        chain.append(choice)
    return Fallbacks(models=tuple(chain), book=book, quantile=q, min_samples=min_samples)


class Pick(NamedTuple):
    """The model chosen for a call: its place in the chain, its plan, and why the models before
    it were not used (`passed`: empty for the main model)."""

    at: int
    plan: Plan
    passed: str = ""


def pick(
    chain: Sequence[Choice],
    start: int,
    plan_of: Callable[[Choice], Plan],
    rule: Fallbacks,
    *,
    why: str = "",
) -> tuple[Pick | None, Plan | None]:
    """The first model from `start` on that can start and is expected to answer in its budget
    (the last one: whenever it can start), with its plan; None when none can start, with the
    plan of the first one tried (for its refusal; None when `start` is past the end). `why`
    says why the models before `start` were left (a failure, a cut)."""
    first: Plan | None = None
    reasons = [why] if why else []
    last = len(chain) - 1
    for i in range(start, len(chain)):
        choice = chain[i]
        plan = plan_of(choice)
        if first is None:
            first = plan
        if plan.skip:
            reasons.append(f"{choice.name} below its min_viable ({_budget(plan)})")
            continue
        expected = rule.expected(choice.name)
        budget = plan.budget
        if i < last and expected is not None and budget is not None and expected > budget:
            reasons.append(
                f"{choice.name} learned p{rule.quantile * 100:g} {expected:.2f} s > "
                f"{budget:.2f} s budget"
            )
            continue
        passed = "; ".join(reasons)
        if passed:  # its record says what it stands in for (the run's backstop's too)
            plan = plan._replace(note=f"fallback: {passed}")
        return Pick(i, plan, passed), first
    return None, first


def _budget(plan: Plan) -> str:
    return "no budget" if plan.budget is None else f"{plan.budget:.2f} s budget"


def why_next(choice: Choice, plan: Plan, result: StepResult[Any]) -> str | None:
    """Why the next model is tried after `choice` did not answer: it failed, or its own cap cut
    it with time left. None: the next one is not tried (it answered, the deadline cut it, it
    was cut to keep the time left for the steps that must follow (`then=`), or the caller
    cancelled it)."""
    status = result.status
    if status is StepStatus.FAILED:
        return f"{choice.name} failed ({type(result.error).__name__})"
    if status.cut and not plan.clamped and not plan.held:
        return f"{choice.name} cut at its cap of {plan.budget or 0.0:.2f} s"
    return None


def mark_fallback(value: Any, name: str, passed: str) -> Any:
    """A fallback's answer, marked: `response_metadata["langgraph_deadline"]` gets `fallback`
    (the model that answered) and `reason` (why the ones before it did not). Other values (a
    structured output) go through as they are."""
    if isinstance(value, AIMessage):
        meta = {**value.response_metadata, METADATA_KEY: {"fallback": name, "reason": passed}}
        return value.model_copy(update={"response_metadata": meta})
    return value


def mark_messages(messages: Sequence[BaseMessage], name: str, passed: str) -> list[BaseMessage]:
    """`mark_fallback` on the `AIMessage`s of a model response."""
    return [mark_fallback(m, name, passed) for m in messages]
