"""Model calls under the deadline: `budgeted_model`, and what the agent middleware shares with it.

A model call is a step of kind `"model"`: its budget is `min(cap, remaining - reserve)`, it does
not start below `min_viable` (no request, no tokens), and it is cancelled at its budget, which in
async code closes the HTTP stream. The provider also learns the budget: LangChain's OpenAI
models (`ChatOpenAI`, `AzureChatOpenAI` and the others built on `BaseChatOpenAI`) get it as the
OpenAI SDK's per-request `timeout`. Sync calls run on a worker thread that cannot be killed; for
them a callback stops a token stream at its first chunk past the deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import anyio
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import merge_configs, var_child_runnable_config

from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.observe import TokensEvent, emit_tokens
from .._core.plan import Plan, plan_step
from .._core.record import record_child
from .._core.records import StepStatus
from .._core.run import StepResult, run_async, run_sync
from .._core.tracker import run_from_config
from .._core.validate import check_cap, check_seconds
from .._graph.seams import PASSTHROUGH

__all__ = ["BudgetedModel", "budgeted_model", "provider_options", "stop_stream_at"]

T = TypeVar("T")

_TIMEOUT_MODULES = ("langchain_openai.",)
"""Model classes whose per-call `timeout` keyword reaches their SDK as a request timeout
(checked against the OpenAI SDK: `create(timeout=...)`, shown in `x-stainless-read-timeout`)."""


def _takes_timeout(model: object) -> bool:
    target = getattr(model, "bound", model)  # a RunnableBinding (bind_tools) wraps the model
    return any(cls.__module__.startswith(_TIMEOUT_MODULES) for cls in type(target).__mro__[:-1])


def provider_options(
    model: object,
    budget: float | None,
    *,
    tokens_per_second: float | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments that tell the provider about a call's budget.

    `timeout=budget` for models known to pass it to their SDK (LangChain's OpenAI family);
    with `tokens_per_second`, `max_tokens` clamped to what the budget can stream (never above
    `max_tokens`, the limit already set). Nothing without a budget.
    """
    options: dict[str, Any] = {}
    if budget is None:
        return options
    if _takes_timeout(model):
        options["timeout"] = max(budget, 0.001)  # 0 means "no timeout" to some clients
    if tokens_per_second is not None:
        fits = max(1, int(budget * tokens_per_second))
        options["max_tokens"] = fits if max_tokens is None else min(fits, max_tokens)
    return options


# -- sync token streams ---------------------------------------------------------------------------


class _StopStream(BaseCallbackHandler):
    """Raises `DeadlineExceeded` from the first token that arrives after the deadline, which
    ends the provider's stream loop and closes its response (the connection drops). That token
    is reported to the observers (`on_tokens_after_deadline`)."""

    raise_error = True
    run_inline = True

    def __init__(self, deadline: Deadline, step: str) -> None:
        self.deadline = deadline
        self.step = step

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        if self.deadline.expired:
            emit_tokens(TokensEvent(step=self.step, tokens=1))
            raise DeadlineExceeded(
                f"deadline exceeded in {self.step}: stream stopped",
                deadline=self.deadline,
                step=self.step,
            )


def stop_stream_config(
    config: RunnableConfig | None, deadline: Deadline | None, step: str
) -> RunnableConfig:
    """`config` plus a callback that stops a token stream at its first chunk past `deadline`."""
    cfg = ensure_config(config)
    if deadline is None:
        return cfg
    return merge_configs(cfg, {"callbacks": [_StopStream(deadline, step)]})


@contextlib.contextmanager
def stop_stream_at(deadline: Deadline | None, step: str) -> Iterator[None]:
    """For sync code that calls a model without passing a config (LangChain's agent loop):
    the runnable config in context gets the stream-stopping callback for the block."""
    if deadline is None:
        yield
        return
    token = var_child_runnable_config.set(
        stop_stream_config(var_child_runnable_config.get(), deadline, step)
    )
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


# -- budgeted_model -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Limits:
    cap: float | None
    min_viable: float
    name: str


class BudgetedModel(Runnable[LanguageModelInput, T], Generic[T]):
    """A chat model (or a model with tools bound) whose calls live inside the deadline in
    context. Made by `budgeted_model`; use it like the model it wraps (`invoke`, `ainvoke`,
    `bind_tools`)."""

    def __init__(self, model: Runnable[LanguageModelInput, T], limits: _Limits) -> None:
        self.model = model
        self._limits = limits

    @property
    def cap(self) -> float | None:
        return self._limits.cap

    @property
    def min_viable(self) -> float:
        return self._limits.min_viable

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return name or self._limits.name + (suffix or "")

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BudgetedModel[Any]:
        """`model.bind_tools(...)`, still budgeted."""
        bind = getattr(self.model, "bind_tools", None)
        if bind is None:
            raise TypeError(f"{type(self.model).__name__} has no bind_tools")
        return BudgetedModel(
            cast("Runnable[LanguageModelInput, Any]", bind(tools, **kwargs)), self._limits
        )

    def _plan(self, config: RunnableConfig, *, sync: bool) -> Plan:
        return plan_step(
            self._limits.name,
            "model",
            cap=self._limits.cap,
            min_viable=self._limits.min_viable,
            reserve=0.0,  # a model call inside a node shares the node's budget, reserve held back
            run=run_from_config(config),
            sync=sync,
        )

    def _refuse(self, plan: Plan, config: RunnableConfig) -> DeadlineExceeded:
        record_child(plan.record(StepStatus.SKIPPED), run_from_config(config))
        left = 0.0 if plan.remaining is None else plan.remaining
        return DeadlineExceeded(
            f"{plan.name} not started: {plan.budget or 0.0:.3f} s of budget "
            f"({left:.3f} s left), needs at least {plan.min_viable:.3f} s",
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
        if not result.status.cut:
            return 0.0
        if not plan.clamped or plan.deadline is None:
            return 0.0
        return plan.deadline.remaining()

    def invoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> T:
        cfg = ensure_config(config)
        plan = self._plan(cfg, sync=True)
        if plan.skip:
            raise self._refuse(plan, cfg)
        options = {**provider_options(self.model, plan.budget), **kwargs}
        call_cfg = stop_stream_config(cfg, plan.step_deadline(), plan.name)
        result = run_sync(
            plan,
            lambda: self.model.invoke(input, call_cfg, **options),
            run=run_from_config(cfg),
            passthrough=PASSTHROUGH,
        )
        if (wait := self._handoff_left(plan, result)) > 0.0:
            time.sleep(wait)
        return self._outcome(plan, result)

    async def ainvoke(
        self, input: LanguageModelInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> T:
        cfg = ensure_config(config)
        plan = self._plan(cfg, sync=False)
        if plan.skip:
            raise self._refuse(plan, cfg)
        options = {**provider_options(self.model, plan.budget), **kwargs}
        result = await run_async(
            plan,
            lambda: self.model.ainvoke(input, cfg, **options),
            run=run_from_config(cfg),
            passthrough=PASSTHROUGH,
        )
        if (wait := self._handoff_left(plan, result)) > 0.0:
            await anyio.sleep(wait)  # usually cancelled by the enclosing step, at its deadline
        return self._outcome(plan, result)

    def __repr__(self) -> str:
        return (
            f"budgeted_model({self.model!r}, cap={self._limits.cap!r}, "
            f"min_viable={self._limits.min_viable!r})"
        )


def budgeted_model(
    model: BaseChatModel | Runnable[LanguageModelInput, T],
    *,
    cap: float | None = None,
    min_viable: float = 0.0,
    name: str | None = None,
) -> BudgetedModel[Any]:
    """A chat model whose every call gets `min(cap, remaining)` of the deadline in context.

    For model calls inside a graph node (`with_deadlines`, `budgeted`, or any code under a
    `deadline_scope`). Below `min_viable` the call is refused before any request is made; past
    its budget it is cancelled (async: the HTTP stream is closed; sync: the worker thread is
    abandoned, and a token stream stops at its next chunk) and `DeadlineExceeded` is raised. The
    call's `StepRecord` (kind `"model"`) joins the node's trace. LangChain's OpenAI models also
    get the budget as the SDK's request `timeout`. Works on a model with tools bound, too.

    ```python
    llm = budgeted_model(ChatOpenAI(model="gpt-4o-mini"), cap=20.0, min_viable=2.0)

    async def answer(state: State) -> dict:
        return {"messages": [await llm.ainvoke(state["messages"])]}
    ```

    Raises:
        TypeError, ValueError: `cap` or `min_viable` is not a finite number >= 0.
        DeadlineExceeded: (from a call) not started for lack of budget, or cut at its budget.
    """
    if isinstance(model, BudgetedModel):
        model = model.model
    if not isinstance(model, Runnable):
        raise TypeError(f"budgeted_model() needs a chat model, got {type(model).__name__}")
    limits = _Limits(
        cap=check_cap(cap, "cap"),
        min_viable=check_seconds(min_viable, "min_viable"),
        name=name or model.get_name(),
    )
    return BudgetedModel(cast("Runnable[LanguageModelInput, Any]", model), limits)


def settings_max_tokens(model: object, settings: Mapping[str, Any]) -> int | None:
    """The output-token limit already in force for a call: its settings', else the model's."""
    for value in (settings.get("max_tokens"), getattr(model, "max_tokens", None)):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
