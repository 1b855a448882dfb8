"""`DeadlineTool`: a tool that takes its time from the run's deadline and answers the model in
words when it runs out, instead of raising.

The class holds a `BaseTool`'s sync and async calls, its stale answers and the fields it hands
to the tool it wraps; the rules live beside it (`policy`, `stale`, `hedge`), and its answers
when it runs out are built in `_graph/answers.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, Tool
from pydantic import ConfigDict, InstanceOf, PrivateAttr

from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, Step, run_from_config
from .._core.records import StepStatus
from .._core.step import StepResult, record_child, run_async, run_sync
from .._graph.answers import cut_answer, cut_text, stale_answer
from . import policy, stale
from .cache import StaleCache
from .hedge import Copies, HedgeBudget, answering, race
from .options import ToolOptions

__all__ = ["DeadlineTool"]

_SHARED = frozenset(BaseTool.model_fields)
"""The fields `@tool` users set on a tool; the wrapped tool is kept in step with them."""

_ONE_STRING = {
    "properties": {"__arg1": {"title": "__arg1", "type": "string"}},
    "required": ["__arg1"],
    "type": "object",
}
"""The schema LangChain gives the model for a `Tool` without `args_schema`: one string."""


class DeadlineTool(BaseTool):
    """A tool under the run's deadline: budget `min(cap, remaining - reserve)`; cut at it.

    Made by `deadline_tool`; wraps any `BaseTool` and keeps everything a user of that tool sees:
    name, description, schemas, `extras`, error handling. Setting one of those on this tool
    later sets it on the wrapped one too (on a copy: a tool you wrapped is never changed). A call
    that runs out of time returns a `ToolMessage` with `status="error"` (or, invoked without a
    tool call, the message text); it never raises for a timeout.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    __langgraph_deadline__: ClassVar[bool] = True  # plans its own budget (a node's cap is its cap)

    inner: BaseTool
    options: InstanceOf[ToolOptions] = ToolOptions()
    _said_uncached: bool = PrivateAttr(default=False)  # warned once that a call had no namespace
    _hedge_budget: HedgeBudget | None = PrivateAttr(default=None)  # this tool's extra load
    # (the wrapped tool, the copy of it each hedged copy runs): see `_racer`
    _racing: tuple[BaseTool, BaseTool] | None = PrivateAttr(default=None)

    # -- one tool to its users: the wrapped one sees what is set on this one ---------------------

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _SHARED and name in self.__dict__:
            self.__dict__["inner"] = self.inner.model_copy(update={name: value})

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        shared = {k: v for k, v in (update or {}).items() if k in _SHARED}
        if shared:
            copied.__dict__["inner"] = copied.inner.model_copy(update=shared)
        return copied

    @property
    def args(self) -> dict[str, Any]:
        return self.inner.args

    @property
    def tool_call_schema(self) -> Any:
        if isinstance(self.inner, Tool) and not self.inner.args_schema:
            return dict(_ONE_STRING)  # what the model sees of a schema-less `Tool`
        return self.inner.tool_call_schema

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self.inner.get_input_schema(config)

    # -- what ToolNode inspects on tools: delegate to the wrapped one --------------------------

    @property
    def func(self) -> Callable[..., Any] | None:
        return getattr(self.inner, "func", None)

    @property
    def coroutine(self) -> Callable[..., Any] | None:
        return getattr(self.inner, "coroutine", None)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner._run(*args, **kwargs)

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner._arun(*args, **kwargs)

    # -- the budgeted call ------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        cfg = ensure_config(config)
        run = run_from_config(cfg)
        plan = self._step.plan(run=run, sync=True)
        tries = policy.Tries()
        call_cfg = self._call_config(input, cfg)

        def once() -> Any:
            tries.started += 1
            return self.inner.invoke(input, call_cfg(), **kwargs)

        result = self._account(
            run_sync(plan, self._retrying(once), run=run, commit=False),
            tries,
        )
        if result.status is StepStatus.COMPLETED:
            record_child(result.record, run)
            self._store_sync(input, cfg, result.value)
            return result.value
        if policy.is_timeout(result) or policy.is_transport(result):
            return self._ran_out(input, cfg, plan, result)
        record_child(result.record, run)
        assert result.error is not None
        raise result.error

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        cfg = ensure_config(config)
        run = run_from_config(cfg)
        plan = self._step.plan(run=run, sync=getattr(self.inner, "coroutine", True) is None)
        tries, copies = policy.Tries(), Copies()
        call_cfg = self._call_config(input, cfg)

        async def copy() -> Any:
            return await self._racer().ainvoke(input, call_cfg(), **kwargs)

        async def once() -> Any:
            tries.started += 1
            if self.options.hedge is None:
                return await self.inner.ainvoke(input, call_cfg(), **kwargs)
            return await self._race(copy, copies)

        def account(result: StepResult[Any]) -> StepResult[Any]:
            return self._account(result, tries, copies)

        result = account(
            await run_async(
                plan,
                self._retrying(once),
                run=run,
                commit=False,
                amend=account,  # its node's cut, reaching it first, records it with these too
            )
        )
        if result.status is StepStatus.COMPLETED:
            record_child(result.record, run)
            await self._store_async(input, cfg, result.value)
            return result.value
        if policy.is_timeout(result) or policy.is_transport(result):
            return await self._aran_out(input, cfg, plan, result)
        record_child(result.record, run)
        assert result.error is not None
        raise result.error

    @property
    def _step(self) -> Step:
        opts = self.options
        return Step(self.name, "tool", opts.cap, opts.min_viable, idle_cap=opts.idle_cap)

    # -- retries and side effects (the rules are in `policy`) ------------------------------------

    def _call_config(self, input: Any, cfg: RunnableConfig) -> Callable[[], RunnableConfig]:
        """The config every try and copy of this call runs with. The idempotency key is made at
        the first try, once: a refused call never calls the user's key function."""
        retries = self.options.retries
        key = None if retries is None else retries.idempotency_key
        if key is None:
            return lambda: cfg
        made: list[RunnableConfig] = []

        def keyed() -> RunnableConfig:
            if not made:
                made.append(policy.call_config(cfg, key(stale.visible_args(self.inner, input))))
            return made[0]

        return keyed

    def _retrying(self, once: Callable[[], Any]) -> Callable[[], Any]:
        opts = self.options
        retries = opts.retries
        if retries is None:
            return once
        return policy.retrying(
            once,
            on=retries.on,
            attempts=retries.attempts,
            side_effect=opts.side_effect,
            idempotent=retries.idempotency_key is not None,
            name=self.name,
        )

    def _account(
        self, result: StepResult[Any], tries: policy.Tries, copies: Copies | None = None
    ) -> StepResult[Any]:
        result = policy.account(result, tries, side_effect=self.options.side_effect)
        return result if copies is None else policy.hedged(result, tries, copies)

    # -- hedging (the race is in `hedge`) --------------------------------------------------------

    async def _race(self, copy: Callable[[], Any], copies: Copies) -> Any:
        """One attempt, hedged (`hedge.race`), against this tool's hedge budget."""
        opts = self.options.hedge
        assert opts is not None
        if self._hedge_budget is None:
            self._hedge_budget = HedgeBudget(
                max_extra=opts.max_extra,
                floor_per_s=opts.floor_per_s,
                outage_share=opts.outage_share,
            )
        spent = self._hedge_budget
        return await race(copy, name=self.name, hedge=opts, budget=spent, copies=copies)

    def _racer(self) -> BaseTool:
        """The tool a hedged copy runs: the wrapped one, its coroutine (when it has one, as a
        `@tool` function has) made by `hedge.answering`, so that the first copy to answer
        cancels the others from inside LangChain's tool task, as soon as the coroutine returns.
        Made again when the wrapped tool is replaced (`__setattr__`)."""
        inner = self.inner
        made = self._racing
        if made is not None and made[0] is inner:
            return made[1]
        coroutine = getattr(inner, "coroutine", None)
        racer = inner
        if "coroutine" in type(inner).model_fields and coroutine is not None:
            racer = inner.model_copy(update={"coroutine": answering(coroutine)})
        self._racing = (inner, racer)
        return racer

    # -- running out: a stale answer or words for the model --------------------------------------

    def _ran_out(self, input: Any, cfg: RunnableConfig, plan: Plan, result: StepResult[Any]) -> Any:
        where = self._slot(input, cfg)
        hit = None if where is None else self._cache().get(*where)
        return self._answer(input, cfg, plan, result, hit)

    async def _aran_out(
        self, input: Any, cfg: RunnableConfig, plan: Plan, result: StepResult[Any]
    ) -> Any:
        where = self._slot(input, cfg)
        hit = None if where is None else await self._cache().aget(*where)
        return self._answer(input, cfg, plan, result, hit)

    def _answer(
        self, input: Any, cfg: RunnableConfig, plan: Plan, result: StepResult[Any], hit: Any
    ) -> Any:
        """A stale answer when the cache has one; else, for a timeout, words for the model, and
        for a transport error, the error (LangChain's usual path)."""
        run = run_from_config(cfg)
        rec = result.record
        status = rec.status if rec.status.ran_out else StepStatus.TIMED_OUT  # a failed call: cut
        error = None if isinstance(result.error, DeadlineExceeded) else result.error
        call_id = stale.tool_call_id(input)
        if hit is not None:
            age = hit.age()
            record_child(dataclasses.replace(rec, status=StepStatus.STALE), run)
            content = stale.stale_content(
                self.name, hit.content, age_s=age, failed=error is not None
            )
            if call_id is None:
                return content
            return stale_answer(
                content,
                call_id=call_id,
                tool=self.name,
                status=status,
                record=rec,
                error=error,
                age_s=age,
            )
        record_child(rec, run)
        retries = self.options.retries
        sent = rec.side_effect_started and (retries is None or retries.idempotency_key is None)
        if error is not None and not sent:
            raise error
        if error is not None:
            # A write whose request may have left: answered, never raised, so that no retry
            # layer (a node's RetryPolicy included) sends it again.
            status = StepStatus.FAILED
        words = self.options.message
        if call_id is None:
            return cut_text(self.name, plan, rec, status=status, message=words)
        return cut_answer(call_id, self.name, plan, rec, status=status, error=error, message=words)

    # -- the stale cache ---------------------------------------------------------------------------

    def _cache(self) -> StaleCache:
        assert self.options.cache is not None
        return self.options.cache

    def _slot(self, input: Any, cfg: RunnableConfig) -> tuple[str, str] | None:
        if self.options.cache is None:
            return None
        where = stale.slot(self.inner, self.options.cache_namespace, input, cfg)
        if where is None and self.options.cache_namespace is None and not self._said_uncached:
            self._said_uncached = True
            stale.warn_uncached(self.name)
        return where

    def _store_sync(self, input: Any, cfg: RunnableConfig, value: Any) -> None:
        where = self._slot(input, cfg)
        if where is not None:
            self._cache().put(*where, stale.stored_content(value))

    async def _store_async(self, input: Any, cfg: RunnableConfig, value: Any) -> None:
        where = self._slot(input, cfg)
        if where is not None:
            await self._cache().aput(*where, stale.stored_content(value))
