"""Model calls inside a graph node under the deadline in context: `budgeted_model`.

A model call is a step of kind `"model"`: its budget is `min(cap, remaining - reserve)`, it does
not start below `min_viable` (no request, no tokens), and it is cancelled at its budget, which in
async code closes the HTTP stream. The provider also learns the budget: LangChain's OpenAI
models (`ChatOpenAI`, `AzureChatOpenAI` and the others built on `BaseChatOpenAI`) get it as the
OpenAI SDK's per-request `timeout`. Sync calls run on a worker thread that cannot be killed; for
them a callback stops a token stream at its first chunk past the deadline.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

import anyio
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config

from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, plan_step
from .._core.record import record_child
from .._core.records import StepStatus
from .._core.run import StepResult, run_async, run_sync
from .._core.tracker import run_from_config
from .._core.validate import check_cap, check_seconds
from .._graph.seams import PASSTHROUGH
from .._graph.streams import stop_stream_config
from .provider import provider_options

__all__ = ["BudgetedModel", "ModelLimits", "budgeted_model"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelLimits:
    """What one budgeted model may take of the deadline: at most `cap`, never less than
    `min_viable`; `name` is its steps' name. Checked when made.

    Raises:
        TypeError, ValueError: `cap` or `min_viable` is not a finite number >= 0.
    """

    name: str
    cap: float | None = None
    min_viable: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cap", check_cap(self.cap, "cap"))
        object.__setattr__(self, "min_viable", check_seconds(self.min_viable, "min_viable"))


class BudgetedModel(Runnable[LanguageModelInput, T], Generic[T]):
    """A chat model (or a model with tools bound) whose calls live inside the deadline in
    context. Made by `budgeted_model`; use it like the model it wraps (`invoke`, `ainvoke`,
    `bind_tools`)."""

    def __init__(self, model: Runnable[LanguageModelInput, T], limits: ModelLimits) -> None:
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
    limits = ModelLimits(cap=cap, min_viable=min_viable, name=name or model.get_name())
    return BudgetedModel(cast("Runnable[LanguageModelInput, Any]", model), limits)
