"""A model call under the deadline, down its chain of fallbacks: `budgeted_model`.

A model call is a step of kind `"model"`: its budget is `min(cap, remaining - reserve)`, it does
not start below `min_viable` (no request, no tokens), and it is cancelled at its budget, which in
async code closes the HTTP stream. The provider also learns the budget: models whose SDK takes a
per-request `timeout` get it as theirs (`provider.py` knows which). Sync calls run on a worker
thread that cannot be killed; for them a callback stops a token stream at its first chunk past
the deadline.

Model fallback that knows the clock: a chain is the main model and its fallbacks, in order.
Before a call, each model is planned against the deadline like any model step; the first that
can start and whose learned time to answer (a high quantile of its model-step latency in a
`LatencyBook`) fits its budget is called. A model the book says is too slow is passed over for
the next, except the last one, which is tried whenever its `min_viable` fits (a prediction
prefers, only `min_viable` refuses). After a call fails (a provider error) or is cut at its own
cap with time left, the next model that fits is tried, planned again against the same
deadline: nothing refreshes it. A model passed over is not a step (it never ran): the record of
the model that answers says which model it stood in for and why (`StepRecord.note`), and its
`AIMessage` says so in `response_metadata["langgraph_deadline"]`. `DeadlineMiddleware` calls
its chain in `fallback_calls.py`, with the same choice (`pick`).

Here too: `BudgetedModel`'s sync and async calls and the chain loop around them, which share
the plan, the refusal and the outcome of one step, and `fallbacks_of`, which checks a chain
with the wrapper that carries a model's own limits.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, NamedTuple, TypeVar, cast

import anyio
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import merge_configs

from .._core.context import cut_through
from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, Step, run_from_config
from .._core.records import StepStatus
from .._core.rules import StepRule
from .._core.step import StepResult, refused, run_async, run_sync
from .._core.validate import (
    check_idle_cap,
    check_number,
    check_seconds,
    check_step_cap,
    show,
)
from .._graph.streams import stopping_streams, watching_streams
from .._learn.book import LatencyBook
from .._learn.policy import Learned
from .provider import Rate, call_options, check_rate, model_id, with_length_hint
from .timing import StreamTiming, book_rate, timing_for

__all__ = [
    "METADATA_KEY",
    "MIN_SAMPLES",
    "budgeted_model",
    "BudgetedModel",
    "Choice",
    "Fallbacks",
    "fallbacks_of",
    "mark_fallback",
    "mark_messages",
    "model_id",
    "ModelLimits",
    "Pick",
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
    output `rate` (cuts `max_tokens`), its `idle_cap` (the longest gap between two chunks)."""

    name: str
    model: Runnable[LanguageModelInput, Any]
    cap: float | None = None
    min_viable: float = 0.0
    rate: Rate | None = None
    idle_cap: float | StepRule | None = None

    def step(self, reserve: float | None) -> Step:
        """Its call as a step, with `reserve` held back (None: the run's)."""
        return Step(self.name, "model", self.cap, self.min_viable, reserve, self.idle_cap)


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
    if book is not None and not isinstance(book, LatencyBook):
        raise TypeError(f"book must be a LatencyBook or None, got {show(book)}")
    q = check_number(quantile, quantile_label, "a number in (0, 1)")
    if not 0.0 < q < 1.0:
        raise ValueError(f"{quantile_label} must be in (0, 1), got {show(quantile)}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ValueError(f"min_samples must be an int >= 1, got {show(min_samples)}")
    if models is None:
        if book is not None:
            raise ValueError(f"book is only read to choose a fallback: give {label} too")
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
            lim = model.limits
            choice = Choice(
                model.step_name,
                model.model,
                lim.cap,
                lim.min_viable,
                lim.tokens_per_second,
                lim.idle_cap,
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
    """Why the next model is tried after `choice` did not answer: it failed, it stalled (cut at
    its idle cap), or its own cap cut it with time left. None: the next one is not tried (it
    answered, the deadline cut it, it was cut to keep the time left for the steps that must
    follow (`then=`), or the caller cancelled it)."""
    status = result.status
    if result.record.stalled:
        return f"{choice.name} stalled ({result.record.note})"
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


T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelLimits:
    """What one model call may take of the deadline, as one value: at most `cap`, never less
    than `min_viable`; `idle_cap` (seconds, or learned) is the longest gap between two chunks
    of its stream before it is cut as stalled; `tokens_per_second` (a rate, or learned) cuts
    `max_tokens` to what its budget can stream, and without it the rate a book attached to the
    run learned does, unless `learned_max_tokens` is False; with `length_hint` the model is
    told the length its `max_tokens` allows. Checked when made.

    `DeadlineMiddleware(model_limits=ModelLimits(cap=20.0, min_viable=2.0))`; `budgeted_model`
    takes the same options as keywords.

    Raises:
        TypeError, ValueError: `cap` or `min_viable` is not a finite number >= 0, or
            `min_viable` is above `cap`; `tokens_per_second` neither a number > 0 nor
            `learned(...)`, `idle_cap` neither a number > 0 nor `learned(...)`; a flag that is
            not a bool.
    """

    cap: float | None = None
    min_viable: float = 0.0
    idle_cap: float | StepRule | None = None
    tokens_per_second: Rate | None = None
    length_hint: bool = True
    learned_max_tokens: bool = True

    def __post_init__(self) -> None:
        for flag in ("length_hint", "learned_max_tokens"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {show(getattr(self, flag))}")
        object.__setattr__(self, "cap", check_step_cap(self.cap, "cap"))
        object.__setattr__(self, "min_viable", check_seconds(self.min_viable, "min_viable"))
        object.__setattr__(self, "tokens_per_second", check_rate(self.tokens_per_second))
        object.__setattr__(self, "idle_cap", check_idle_cap(self.idle_cap, "idle_cap"))
        if self.cap is not None and self.min_viable > self.cap:
            raise ValueError(
                f"min_viable ({self.min_viable} s) is more than cap ({self.cap} s): no model "
                "call could start"
            )


class BudgetedModel(Runnable[LanguageModelInput, T], Generic[T]):
    """A chat model (or a model with tools bound) whose calls live inside the deadline in
    context. Made by `budgeted_model`; use it like the model it wraps (`invoke`, `ainvoke`,
    `bind_tools`). With fallbacks, a call may be answered by one of them (see
    `budgeted_model`)."""

    def __init__(
        self,
        model: Runnable[LanguageModelInput, T],
        name: str,
        limits: ModelLimits,
        fallbacks: Fallbacks | None = None,
    ) -> None:
        self.model = model
        self._name = name
        self._limits = limits
        self._fallbacks = fallbacks
        main = Choice(
            name,
            model,
            limits.cap,
            limits.min_viable,
            limits.tokens_per_second,
            limits.idle_cap,
        )
        self._chain = (main, *(() if fallbacks is None else fallbacks.models))
        self._rule = fallbacks or Fallbacks(models=())

    @property
    def step_name(self) -> str:
        """Its steps' name (a fallback's, in a chain)."""
        return self._name

    @property
    def limits(self) -> ModelLimits:
        """What each of its calls may take (`budgeted_model`'s `cap`, `min_viable`, ...)."""
        return self._limits

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """The names of its fallback models, in the order they are tried."""
        return tuple(c.name for c in self._chain[1:])

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return name or self._name + (suffix or "")

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BudgetedModel[Any]:
        """`model.bind_tools(...)`, still budgeted (its fallbacks get the same tools)."""
        bound = [_bind(c.model, tools, kwargs) for c in self._chain]
        fallbacks = None
        if self._fallbacks is not None:
            pairs = zip(self._chain[1:], bound[1:], strict=True)
            fallbacks = self._fallbacks.with_models(
                [dataclasses.replace(c, model=m) for c, m in pairs]
            )
        return BudgetedModel(bound[0], self._name, self._limits, fallbacks)

    def _plan(self, choice: Choice, config: RunnableConfig, *, sync: bool) -> Plan:
        # A model call inside a node shares the node's budget, the reserve held back already.
        return choice.step(0.0).plan(run=run_from_config(config), sync=sync)

    def _refuse(self, plan: Plan, config: RunnableConfig) -> DeadlineExceeded:
        refused(plan, run_from_config(config))
        left = 0.0 if plan.remaining is None else plan.remaining
        nor = " (and no fallback could start)" if len(self._chain) > 1 else ""
        return DeadlineExceeded(
            f"{plan.name} not started: {plan.budget or 0.0:.3f} s of budget "
            f"({left:.3f} s left), needs at least {plan.min_viable:.3f} s{nor}",
            deadline=plan.deadline,
            step=plan.name,
        )

    def _outcome(self, plan: Plan, result: StepResult[T]) -> T:
        if result.status is StepStatus.COMPLETED:
            return cast("T", result.value)
        err = result.error
        if result.status.cut:
            if isinstance(err, DeadlineExceeded):
                raise err
            raise DeadlineExceeded(
                f"{plan.name} cut at its budget of {plan.budget or 0.0:.3f} s",
                deadline=plan.step_deadline(),
                step=plan.name,
            ) from err
        assert err is not None
        raise err

    @staticmethod
    def _handoff_left(plan: Plan, result: StepResult[T]) -> float:
        """A call cut by the enclosing deadline ended a hand-off before it. It raises rather
        than answers, so it waits that out: the enclosing step (a budgeted node) then sees its
        own deadline passed and ends as timed out, not as failed."""
        if not result.status.cut or result.record.stalled:
            return 0.0
        if not plan.clamped or plan.deadline is None:
            return 0.0
        return plan.deadline.remaining()

    def _next(
        self, cfg: RunnableConfig, start: int, why: str, *, sync: bool
    ) -> tuple[Pick | None, Plan | None]:
        def plan_of(choice: Choice) -> Plan:
            return self._plan(choice, cfg, sync=sync)

        return pick(self._chain, start, plan_of, self._rule, why=why)

    def _answered(self, chosen: Pick, result: StepResult[T]) -> T:
        """A fallback's answer, marked as one."""
        if chosen.at == 0 or result.status is not StepStatus.COMPLETED:
            return cast("T", result.value)
        name = self._chain[chosen.at].name
        return cast("T", mark_fallback(result.value, name, chosen.passed))

    def invoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> T:
        cfg = ensure_config(config)
        chosen, first = self._next(cfg, 0, "", sync=True)
        if chosen is None:
            assert first is not None
            raise self._refuse(first, cfg)
        while True:
            choice, plan = self._chain[chosen.at], chosen.plan
            result = self._attempt(chosen, input, cfg, kwargs)
            value = self._answered(chosen, result)
            if result.status is StepStatus.COMPLETED:
                return value
            why = why_next(choice, plan, result)
            later = None if why is None else self._next(cfg, chosen.at + 1, why, sync=True)[0]
            if later is None:
                if (wait := self._handoff_left(plan, result)) > 0.0:
                    time.sleep(wait)
                return self._outcome(plan, result)
            chosen = later

    def _attempt(
        self, chosen: Pick, input: LanguageModelInput, cfg: RunnableConfig, kwargs: dict[str, Any]
    ) -> StepResult[T]:
        """One model of the chain called on a worker thread, under its plan."""
        model, said, options, call_cfg, timing = self._prepared(chosen, input, cfg, kwargs)
        watched = chosen.plan.idle is not None
        with stopping_streams(), watching_streams(watched):  # (the job runs in a copy of these)
            result = run_sync(
                chosen.plan,
                lambda: model.invoke(said, call_cfg, **options),
                run=run_from_config(cfg),
            )
        if timing is not None:
            timing.close(cut=result.status.cut)
        return result

    def _prepared(
        self, chosen: Pick, input: LanguageModelInput, cfg: RunnableConfig, kwargs: dict[str, Any]
    ) -> tuple[
        Runnable[LanguageModelInput, T],
        LanguageModelInput,
        dict[str, Any],
        RunnableConfig,
        StreamTiming | None,
    ]:
        """What one call of the chosen model runs with: the model, its input (with the length
        hint when the budget set its `max_tokens`), its options (the budget told to the
        provider), its config (timed when its rate is learned) and that timing, if any. (Its
        stream stops past the cut through `stopping_streams`.)"""
        choice, plan = self._chain[chosen.at], chosen.plan
        model = choice.model
        run = run_from_config(cfg)
        book = None if run is None or not self._limits.learned_max_tokens else run.book
        rate = book_rate(choice.rate, book)  # by default
        told = call_options(model, plan.budget, kwargs, tokens_per_second=rate)
        if self._limits.length_hint and told.tokens is not None:
            input = with_length_hint(input, told.tokens)
        timing = timing_for(model, rate)
        call_cfg = cfg if timing is None else merge_configs(cfg, {"callbacks": [timing]})
        return model, input, {**kwargs, **told.options}, call_cfg, timing

    async def ainvoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> T:
        cfg = ensure_config(config)
        chosen, first = self._next(cfg, 0, "", sync=False)
        if chosen is None:
            assert first is not None
            raise self._refuse(first, cfg)
        while True:
            choice, plan = self._chain[chosen.at], chosen.plan
            result = await self._aattempt(chosen, input, cfg, kwargs)
            value = self._answered(chosen, result)
            if result.status is StepStatus.COMPLETED:
                return value
            why = why_next(choice, plan, result)
            later = None if why is None else self._next(cfg, chosen.at + 1, why, sync=False)[0]
            if later is None:
                if (wait := self._handoff_left(plan, result)) > 0.0:
                    try:
                        await anyio.sleep(wait)  # usually cancelled by the enclosing step
                    except anyio.get_cancelled_exc_class() as exc:
                        cut_through(exc, plan.name)  # the scope that cancels names this call
                        raise
                return self._outcome(plan, result)
            chosen = later

    async def _aattempt(
        self, chosen: Pick, input: LanguageModelInput, cfg: RunnableConfig, kwargs: dict[str, Any]
    ) -> StepResult[T]:
        """One model of the chain called under its plan, cancelled at its budget."""
        model, said, options, call_cfg, timing = self._prepared(chosen, input, cfg, kwargs)
        with stopping_streams(), watching_streams(chosen.plan.idle is not None):
            result = await run_async(
                chosen.plan,
                lambda: model.ainvoke(said, call_cfg, **options),
                run=run_from_config(cfg),
            )
        if timing is not None:
            timing.close(cut=result.status.cut)
        return result

    def __repr__(self) -> str:
        more = f", fallbacks={list(self.fallbacks)!r}" if self._fallbacks is not None else ""
        return (
            f"budgeted_model({self.model!r}, cap={self._limits.cap!r}, "
            f"min_viable={self._limits.min_viable!r}{more})"
        )


def _bind(
    model: Runnable[LanguageModelInput, Any], tools: Sequence[Any], kwargs: dict[str, Any]
) -> Runnable[LanguageModelInput, Any]:
    bind = getattr(model, "bind_tools", None)
    if bind is None:
        raise TypeError(f"{type(model).__name__} has no bind_tools")
    return cast("Runnable[LanguageModelInput, Any]", bind(tools, **kwargs))


def budgeted_model(
    model: BaseChatModel | Runnable[LanguageModelInput, T],
    *,
    cap: float | None = None,
    min_viable: float = 0.0,
    name: str | None = None,
    fallbacks: Sequence[BaseChatModel | BudgetedModel[Any]] | None = None,
    book: LatencyBook | None = None,
    fallback_quantile: float = 0.9,
    tokens_per_second: float | Learned | None = None,
    idle_cap: float | Learned | None = None,
    length_hint: bool = True,
) -> BudgetedModel[Any]:
    """A chat model whose every call gets `min(cap, remaining)` of the deadline in context.

    For model calls inside a graph node (`with_deadlines`, `budgeted`, or any code under a
    `deadline_scope`). Below `min_viable` the call is refused before any request is made; past
    its budget it is cancelled (async: the HTTP stream is closed; sync: the worker thread is
    abandoned, and a token stream stops at its next chunk) and `DeadlineExceeded` is raised. The
    call's `StepRecord` (kind `"model"`) joins the node's trace. Models whose SDK takes a
    per-request timeout (OpenAI's, Anthropic's, Gemini's, ...) also get the budget as theirs.
    Works on a model with tools bound, with structured output, or configurable, too.

    `fallbacks` (opt-in) are faster models to answer instead, inside the same deadline. A call
    goes to the first model of `[model, *fallbacks]` that can start (its `min_viable` fits)
    and, with a `book`, whose learned `fallback_quantile` of answer times fits its budget
    (known once the book holds 20 samples of that model's steps; the last model is tried
    whenever it can start).
    A model that fails (a provider error, after its SDK's own retries) or is cut at its own cap
    with time left hands the call to the next one that fits; nothing runs past the deadline.
    Each model's steps are named by its model id (`gpt-4o-mini`: the book's key, the same with
    or without fallbacks, sync or async; LangChain's name for a model without one), or `name`;
    give `budgeted_model(fast, name=, cap=, min_viable=)` a fallback's own name and limits (a
    plain fallback has none). A fallback's record's `note` says what it stood in for,
    and its `AIMessage` carries `response_metadata["langgraph_deadline"] = {"fallback": name,
    "reason": why}`.

    `tokens_per_second` cuts each call's `max_tokens` to what its budget can stream (never above
    a limit the model or call already has), under the name its provider takes (Ollama's
    `num_predict`, Gemini's `max_output_tokens`, ...; a model of a family not known gets none,
    and one warning per class). Given `learned(book, quantile=0.9)`, the
    model's time to first token and seconds per token are learned per model id from its calls
    (which then stream), and `max_tokens` is what fits in the budget after the learned
    `quantile` of time to first token, at the learned `quantile` of seconds per token; until
    the book holds `min_samples` of each, no `max_tokens` is set. In a run with a book attached
    (`with_deadlines(book=)`), a model given no `tokens_per_second` learns it from that book.

    When its budget sets `max_tokens` (below any the call already has), the model is also told
    its length: a line at the end of the system message, "Answer in at most N words, ending
    with a complete sentence: a longer answer is cut off." (N = 3/4 of the tokens). A model
    never sees `max_tokens`: told only that, it is cut mid-sentence; told the length, it writes
    a shorter, whole answer. `length_hint=False` leaves the messages as they are.

    `idle_cap` is the longest gap between two chunks of the call's stream (Vercel's `chunkMs`,
    LangGraph's `idle_timeout`; the call then streams): past it the call is cut at once as
    stalled (`StepRecord.stalled`, `cancel_source="stalled"`, `note` "no progress for 2.1 s")
    and the next fallback takes the time left. The gap clock starts at the first chunk: a slow
    first token is the budget's business, and a stream that keeps flowing is never cut.
    Given `learned(book)`, the cap is learned per model id from the longest gaps of its
    streams (never above its `cap`); until then its gaps are only watched.

    ```python
    llm = budgeted_model(ChatOpenAI(model="gpt-4o-mini"), cap=20.0, min_viable=2.0)

    async def answer(state: State) -> dict:
        return {"messages": [await llm.ainvoke(state["messages"])]}
    ```

    Raises:
        TypeError, ValueError: `cap` is not a finite number > 0 (or None), `min_viable` not a
            finite number >= 0;
            `tokens_per_second` or `idle_cap` neither a number > 0 nor `learned(...)`;
            `length_hint` not a bool; `fallbacks` is empty, holds a non-model or two models of
            one name; `book` without `fallbacks`; `fallback_quantile` outside (0, 1).
        DeadlineExceeded: (from a call) not started for lack of budget, or cut at its budget.
    """
    if isinstance(model, BudgetedModel):
        model = model.model
    if not isinstance(model, Runnable):
        raise TypeError(f"budgeted_model() needs a chat model, got {type(model).__name__}")
    limits = ModelLimits(
        cap=cap,
        min_viable=min_viable,
        tokens_per_second=tokens_per_second,
        idle_cap=idle_cap,
        length_hint=length_hint,
    )
    name = name or model_id(model)
    chain = fallbacks_of(
        fallbacks,
        label="fallbacks",
        taken=name,
        book=book,
        quantile=fallback_quantile,
        min_samples=MIN_SAMPLES,
        quantile_label="fallback_quantile",
    )
    return BudgetedModel(cast("Runnable[LanguageModelInput, Any]", model), name, limits, chain)
