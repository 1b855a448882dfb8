"""`deadline_tool`: tools that take their time from the run's deadline and answer the model in
words when it runs out, instead of raising."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, overload

import httpx
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as lc_tool
from pydantic import ConfigDict

from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, plan_step
from .._core.record import record_child
from .._core.records import StepStatus
from .._core.run import StepResult, run_async, run_sync
from .._core.tracker import run_from_config
from .._core.validate import check_cap, check_seconds
from .._graph.seams import PASSTHROUGH
from .._retry.retry import RetryOn, _accepts, retry
from .cache import StaleCache, cache_key

__all__ = ["DeadlineTool", "ToolTimeout", "deadline_tool", "deadline_tools", "timeout_message"]

log = logging.getLogger("langgraph_deadline")

Namespace = str | Callable[[RunnableConfig], str | None] | None


@dataclasses.dataclass(frozen=True, slots=True)
class ToolTimeout:
    """What happened to a tool call that ran out of time: the facts behind its message."""

    tool: str
    status: StepStatus  # TIMED_OUT (cut), ABANDONED (sync, still running) or SKIPPED (not called)
    budget_s: float | None
    elapsed_s: float
    remaining_s: float | None
    min_viable_s: float


def timeout_message(info: ToolTimeout) -> str:
    """The default text the model reads when a tool ran out of time (override per tool)."""
    if info.status is StepStatus.SKIPPED:
        left = 0.0 if info.remaining_s is None else info.remaining_s
        return (
            f"Tool '{info.tool}' was skipped: the run's time budget is exhausted "
            f"({left:.1f} s left, the tool needs at least {info.min_viable_s:.1f} s). "
            "It was not called, so nothing is known about its data. Do not call it again in "
            "this run; continue without it and tell the user which part of the answer is missing."
        )
    budget = info.budget_s or info.elapsed_s
    return (
        f"Tool '{info.tool}' did not answer within {budget:.1f} s and was stopped. "
        "This is a timeout, not an empty result: the data may exist. "
        f"Do not call '{info.tool}' again with the same arguments. Instead, narrow the request, "
        "use another tool, or continue without it and tell the user which part of the answer "
        "is missing."
    )


_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.TransportError, ConnectionError)
_NOT_SENT: tuple[type[BaseException], ...] = (httpx.ConnectError, httpx.ConnectTimeout)
"""Errors that prove the request never left: repeating it cannot repeat a side effect."""


@dataclasses.dataclass(slots=True)
class _Tries:
    started: int = 0


class DeadlineTool(BaseTool):
    """A tool under the run's deadline: budget `min(timeout, remaining - reserve)`; cut at it.

    Made by `deadline_tool`; wraps any `BaseTool` and keeps its name, description and the schema
    the model sees. A call that runs out of time returns a `ToolMessage` with `status="error"`
    (or, invoked without a tool call, the message text); it never raises for a timeout.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    timeout: float | None = None
    min_viable: float = 0.0
    read_only: bool = False
    side_effect: bool = False
    cache: Any = None  # StaleCache
    cache_namespace: Any = None  # Namespace
    message: Any = None  # Callable[[ToolTimeout], str] | str | None
    retry_on: Any = None  # RetryOn | None
    attempts: int = 3
    idempotency_key: Any = None  # Callable[[Mapping[str, Any]], str] | None

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
        plan = self._plan(cfg, sync=True)
        if plan.skip:
            return self._ran_out(input, cfg, plan, StepResult(plan.record(StepStatus.SKIPPED)))
        tries = _Tries()
        call_cfg = self._call_config(input, cfg)

        def once() -> Any:
            tries.started += 1
            return self.inner.invoke(input, call_cfg, **kwargs)

        body = self._retrying(once, tries) if self.retry_on is not None else once
        result = self._account(
            run_sync(plan, body, run=run, commit=False, passthrough=PASSTHROUGH), tries
        )
        if result.status is StepStatus.COMPLETED:
            record_child(result.record, run)
            self._store_sync(input, cfg, result.value)
            return result.value
        if _is_timeout(result) or _is_transport(result):
            return self._ran_out(input, cfg, plan, result)
        record_child(result.record, run)
        assert result.error is not None
        raise result.error

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        cfg = ensure_config(config)
        run = run_from_config(cfg)
        plan = self._plan(cfg, sync=getattr(self.inner, "coroutine", True) is None)
        if plan.skip:
            return await self._aran_out(
                input, cfg, plan, StepResult(plan.record(StepStatus.SKIPPED))
            )
        tries = _Tries()
        call_cfg = self._call_config(input, cfg)

        async def once() -> Any:
            tries.started += 1
            return await self.inner.ainvoke(input, call_cfg, **kwargs)

        body = self._retrying(once, tries) if self.retry_on is not None else once
        result = self._account(
            await run_async(plan, body, run=run, commit=False, passthrough=PASSTHROUGH), tries
        )
        if result.status is StepStatus.COMPLETED:
            record_child(result.record, run)
            await self._store_async(input, cfg, result.value)
            return result.value
        if _is_timeout(result) or _is_transport(result):
            return await self._aran_out(input, cfg, plan, result)
        record_child(result.record, run)
        assert result.error is not None
        raise result.error

    # -- retries and side effects -------------------------------------------------------------

    def _call_config(self, input: Any, cfg: RunnableConfig) -> RunnableConfig:
        """The config the tool runs with: its idempotency key in `metadata`, when it has one."""
        if self.idempotency_key is None:
            return cfg
        key = self.idempotency_key(self._visible_args(input))
        return {**cfg, "metadata": {**(cfg.get("metadata") or {}), "idempotency_key": key}}

    def _retrying(self, once: Callable[[], Any], tries: _Tries) -> Callable[[], Any]:
        """`once` retried within the tool's budget. A tool with side effects is retried only
        when repeating it is safe: it has an idempotency key, or the request never left
        (a connect error)."""
        accepts = _accepts(self.retry_on)

        def retryable(exc: BaseException) -> bool:
            if not accepts(exc):
                return False
            if self.side_effect and self.idempotency_key is None:
                return isinstance(exc, _NOT_SENT)
            return True

        return retry(once, on=retryable, attempts=self.attempts, name=self.name)

    def _account(self, result: StepResult[Any], tries: _Tries) -> StepResult[Any]:
        """The call's record says how many attempts ran and whether a side effect may have
        started (conservatively: a write tool's body ran, and did not fail before sending)."""
        started = self.side_effect and tries.started > 0 and not isinstance(result.error, _NOT_SENT)
        if tries.started <= 1 and not started:
            return result
        rec = dataclasses.replace(
            result.record, attempt=max(1, tries.started), side_effect_started=started
        )
        return StepResult(rec, result.value, result.error)

    def _plan(self, cfg: RunnableConfig, *, sync: bool) -> Plan:
        return plan_step(
            self.name,
            "tool",
            cap=self.timeout,
            min_viable=self.min_viable,
            run=run_from_config(cfg),
            sync=sync,
        )

    def _settle(
        self,
        input: Any,
        cfg: RunnableConfig,
        plan: Plan,
        result: StepResult[Any],
        store: Callable[[Any, RunnableConfig, Any], None],
    ) -> Any:
        run = run_from_config(cfg)
        if result.status is StepStatus.COMPLETED:
            record_child(result.record, run)
            store(input, cfg, result.value)
            return result.value
        if _is_timeout(result) or _is_transport(result):
            return self._ran_out(input, cfg, plan, result)
        record_child(result.record, run)
        assert result.error is not None
        raise result.error

    # -- running out: a stale answer or words for the model --------------------------------------

    def _ran_out(self, input: Any, cfg: RunnableConfig, plan: Plan, result: StepResult[Any]) -> Any:
        hit = None
        where = self._cache_where(input, cfg)
        if where is not None:
            hit = self.cache.get(*where)
        return self._answer(input, cfg, plan, result, hit)

    async def _aran_out(
        self, input: Any, cfg: RunnableConfig, plan: Plan, result: StepResult[Any]
    ) -> Any:
        hit = None
        where = self._cache_where(input, cfg)
        if where is not None:
            hit = await self.cache.aget(*where)
        return self._answer(input, cfg, plan, result, hit)

    def _answer(
        self, input: Any, cfg: RunnableConfig, plan: Plan, result: StepResult[Any], hit: Any
    ) -> Any:
        run = run_from_config(cfg)
        rec = result.record
        status = rec.status if rec.status is not StepStatus.FAILED else StepStatus.TIMED_OUT
        info = ToolTimeout(
            tool=self.name,
            status=status,
            budget_s=plan.budget,
            elapsed_s=rec.elapsed_ms / 1000.0,
            remaining_s=plan.remaining,
            min_viable_s=self.min_viable,
        )
        facts: dict[str, Any] = {
            "status": str(status),
            "budget_ms": rec.allocated_ms,
            "elapsed_ms": round(rec.elapsed_ms, 3),
            "stale": hit is not None,
        }
        if result.error is not None and not isinstance(result.error, DeadlineExceeded):
            facts["error"] = type(result.error).__name__
        call_id = _tool_call_id(input)
        if hit is not None:
            age = hit.age()
            record_child(dataclasses.replace(rec, status=StepStatus.STALE), run)
            facts["age_s"] = round(age, 3)
            note = (
                f"[stale result from {age:.0f} s ago: the live call to '{self.name}' "
                f"{'failed' if 'error' in facts else 'timed out'}; this cached answer may be "
                "out of date — say so if you rely on it]\n"
            )
            content = _prepend(note, hit.content)
            if call_id is None:
                return content
            return ToolMessage(
                content=content,
                tool_call_id=call_id,
                name=self.name,
                status="success",
                artifact={"langgraph_deadline": facts},
            )
        if "error" in facts:  # a transport error with nothing cached: LangChain's usual path
            record_child(rec, run)
            assert result.error is not None
            raise result.error
        record_child(rec, run)
        text = self._text(info)
        if call_id is None:
            return text
        return ToolMessage(
            content=text,
            tool_call_id=call_id,
            name=self.name,
            status="error",
            artifact={"langgraph_deadline": facts},
        )

    def _text(self, info: ToolTimeout) -> str:
        if self.message is None:
            return timeout_message(info)
        if isinstance(self.message, str):
            return self.message.format(
                tool=info.tool,
                seconds=info.budget_s or info.elapsed_s,
                status=str(info.status),
                remaining=info.remaining_s,
            )
        return str(self.message(info))

    # -- the stale cache ---------------------------------------------------------------------------

    def _cache_where(self, input: Any, cfg: RunnableConfig) -> tuple[str, str] | None:
        if self.cache is None:
            return None
        namespace = self._namespace(cfg)
        if namespace is None:
            return None
        return namespace, cache_key(self.name, self._visible_args(input))

    def _namespace(self, cfg: RunnableConfig) -> str | None:
        ns = self.cache_namespace
        if ns is None:
            return _default_namespace(cfg)
        if isinstance(ns, str):
            return ns
        return ns(cfg)  # type: ignore[no-any-return]

    def _visible_args(self, input: Any) -> Any:
        args = input.get("args", {}) if _tool_call_id(input) is not None else input
        if not isinstance(args, Mapping):
            return args
        visible = _schema_fields(self.inner)
        return {k: v for k, v in args.items() if visible is None or k in visible}

    def _store_sync(self, input: Any, cfg: RunnableConfig, value: Any) -> None:
        where = self._cache_where(input, cfg)
        if where is not None:
            self.cache.put(*where, _content(value))

    async def _store_async(self, input: Any, cfg: RunnableConfig, value: Any) -> None:
        where = self._cache_where(input, cfg)
        if where is not None:
            await self.cache.aput(*where, _content(value))


def _is_timeout(result: StepResult[Any]) -> bool:
    return result.status.cut or isinstance(result.error, DeadlineExceeded)


def _is_transport(result: StepResult[Any]) -> bool:
    return isinstance(result.error, _TRANSPORT_ERRORS)


def _tool_call_id(input: Any) -> str | None:
    if isinstance(input, Mapping) and input.get("type") == "tool_call" and "args" in input:
        call_id = input.get("id")
        return str(call_id) if call_id is not None else None
    return None


def _content(value: Any) -> Any:
    return value.content if isinstance(value, ToolMessage) else value


def _prepend(note: str, content: Any) -> Any:
    if isinstance(content, str):
        return note + content
    if isinstance(content, list):
        return [{"type": "text", "text": note}, *content]
    return note + str(content)


def _schema_fields(tool: BaseTool) -> set[str] | None:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        props = schema.get("properties")
        return set(props) if isinstance(props, dict) else None
    fields = getattr(schema, "model_fields", None)
    return set(fields) if isinstance(fields, dict) else None


def _default_namespace(cfg: RunnableConfig) -> str | None:
    """Per user when the config names one, else per thread; no namespace, no cache."""
    conf = cfg.get("configurable") or {}
    user = conf.get("user_id") or conf.get("langgraph_auth_user_id")
    if user:
        return f"user:{user}"
    thread = conf.get("thread_id")
    if thread:
        return f"thread:{thread}"
    return None


# -- the public constructors ---------------------------------------------------------------


def _make(
    inner: BaseTool,
    *,
    timeout: float | None,
    min_viable: float,
    read_only: bool,
    side_effect: bool,
    cache: StaleCache | None,
    cache_namespace: Namespace,
    message: Callable[[ToolTimeout], str] | str | None,
    retry_on: RetryOn | None = None,
    attempts: int = 3,
    idempotency_key: Callable[[Mapping[str, Any]], str] | None = None,
) -> DeadlineTool:
    if isinstance(inner, DeadlineTool):
        inner = inner.inner
    timeout_s = check_cap(timeout, "timeout")
    min_s = check_seconds(min_viable, "min_viable")
    if cache is not None and not read_only:
        raise ValueError(
            f"tool {inner.name!r}: a stale cache needs read_only=True (never serve a cached "
            "answer for a tool that changes the world)"
        )
    if read_only and side_effect:
        raise ValueError(f"tool {inner.name!r}: read_only and side_effect exclude each other")
    if cache is not None and not isinstance(cache, StaleCache):
        raise TypeError(f"cache must be a StaleCache, got {type(cache).__name__}")
    if message is not None and not (isinstance(message, str) or callable(message)):
        raise TypeError("message must be a format string or a function of ToolTimeout")
    if retry_on is not None:
        _accepts(retry_on)  # a clear error now, not at the first failure
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"tool {inner.name!r}: attempts must be an int >= 1, got {attempts!r}")
    if idempotency_key is not None and not callable(idempotency_key):
        raise TypeError("idempotency_key must be a function of the tool's arguments")
    return DeadlineTool(
        name=inner.name,
        description=inner.description,
        args_schema=inner.args_schema,
        return_direct=inner.return_direct,
        response_format=inner.response_format,
        metadata=inner.metadata,
        tags=inner.tags,
        inner=inner,
        timeout=timeout_s,
        min_viable=min_s,
        read_only=read_only,
        side_effect=side_effect,
        cache=cache,
        cache_namespace=cache_namespace,
        message=message,
        retry_on=retry_on,
        attempts=attempts,
        idempotency_key=idempotency_key,
    )


@overload
def deadline_tool(
    name_or_callable: Callable[..., Any] | BaseTool,
    *,
    timeout: float | None = None,
    min_viable: float = 0.0,
    read_only: bool = False,
    side_effect: bool = False,
    cache: StaleCache | None = None,
    cache_namespace: Namespace = None,
    message: Callable[[ToolTimeout], str] | str | None = None,
    retry_on: RetryOn | None = None,
    attempts: int = 3,
    idempotency_key: Callable[[Mapping[str, Any]], str] | None = None,
    description: str | None = None,
    args_schema: Any = None,
    return_direct: bool = False,
    response_format: Literal["content", "content_and_artifact"] = "content",
    parse_docstring: bool = False,
) -> DeadlineTool: ...


@overload
def deadline_tool(
    name_or_callable: str | None = None,
    *,
    timeout: float | None = None,
    min_viable: float = 0.0,
    read_only: bool = False,
    side_effect: bool = False,
    cache: StaleCache | None = None,
    cache_namespace: Namespace = None,
    message: Callable[[ToolTimeout], str] | str | None = None,
    retry_on: RetryOn | None = None,
    attempts: int = 3,
    idempotency_key: Callable[[Mapping[str, Any]], str] | None = None,
    description: str | None = None,
    args_schema: Any = None,
    return_direct: bool = False,
    response_format: Literal["content", "content_and_artifact"] = "content",
    parse_docstring: bool = False,
) -> Callable[[Callable[..., Any]], DeadlineTool]: ...


def deadline_tool(
    name_or_callable: str | Callable[..., Any] | BaseTool | None = None,
    *,
    timeout: float | None = None,
    min_viable: float = 0.0,
    read_only: bool = False,
    side_effect: bool = False,
    cache: StaleCache | None = None,
    cache_namespace: Namespace = None,
    message: Callable[[ToolTimeout], str] | str | None = None,
    retry_on: RetryOn | None = None,
    attempts: int = 3,
    idempotency_key: Callable[[Mapping[str, Any]], str] | None = None,
    description: str | None = None,
    args_schema: Any = None,
    return_direct: bool = False,
    response_format: Literal["content", "content_and_artifact"] = "content",
    parse_docstring: bool = False,
) -> DeadlineTool | Callable[[Callable[..., Any]], DeadlineTool]:
    """A drop-in for LangChain's `@tool` whose calls live inside the run's deadline.

    Same call forms as `@tool` (`@deadline_tool`, `@deadline_tool("name")`,
    `@deadline_tool(timeout=5.0, read_only=True, cache=InMemoryStaleCache())`), and
    `deadline_tool(existing_tool, timeout=...)` to wrap any `BaseTool`, keeping its name,
    description and the schema the model sees.

    Each call gets `min(timeout, remaining - reserve)`. Below `min_viable` it is not called
    and answers "skipped". Past its budget it is cancelled (a sync tool is abandoned: its thread
    cannot be stopped) and answers, in words the model can act on, that it timed out; with
    `read_only=True` and a `cache`, the last good answer for the same arguments and namespace is
    served instead, marked stale with its age. `cache_namespace` (a string, or a function of the
    config) keeps users apart; by default it is the config's `user_id`, else its `thread_id`, and
    without either nothing is cached. `message` overrides the text (a format string with
    `{tool}`, `{seconds}`, `{status}`, `{remaining}`, or a function of `ToolTimeout`).

    `retry_on` (as in `retry(on=...)`) retries failed attempts up to `attempts` times, inside
    the same budget: no attempt or backoff starts that cannot fit. A `side_effect=True` tool
    (one that changes the world) is not retried once its request may have left, unless it has
    an `idempotency_key` (a function of its arguments; the key reaches the tool as
    `config["metadata"]["idempotency_key"]`); its record says whether a side effect started.

    Raises:
        ValueError, TypeError: bad numbers, a cache on a tool that is not read-only, etc.
    """
    options: dict[str, Any] = {
        "timeout": timeout,
        "min_viable": min_viable,
        "read_only": read_only,
        "side_effect": side_effect,
        "cache": cache,
        "cache_namespace": cache_namespace,
        "message": message,
        "retry_on": retry_on,
        "attempts": attempts,
        "idempotency_key": idempotency_key,
    }
    if isinstance(name_or_callable, BaseTool):
        return _make(name_or_callable, **options)

    def build(fn: Callable[..., Any], name: str | None = None) -> DeadlineTool:
        inner = lc_tool(
            *((name, fn) if name else (fn,)),
            description=description,
            args_schema=args_schema,
            return_direct=return_direct,
            response_format=response_format,
            parse_docstring=parse_docstring,
        )
        return _make(inner, **options)

    if callable(name_or_callable):
        return build(name_or_callable)
    if name_or_callable is not None and not isinstance(name_or_callable, str):
        raise TypeError(
            f"deadline_tool() takes a function, a tool or a name, got {type(name_or_callable)}"
        )
    return lambda fn: build(fn, name_or_callable)


def deadline_tools(
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    caps: Mapping[str, float | None] | None = None,
    default: float | None = None,
    read_only: Sequence[str] = (),
    cache: StaleCache | None = None,
) -> list[DeadlineTool]:
    """Wrap several tools from one table of caps: `{"search_docs": 5, "get_order": 3}` plus a
    `default` for the rest; the tools named in `read_only` share `cache` for stale answers.

    Raises:
        ValueError: `caps` or `read_only` names a tool that is not in `tools`.
    """
    wrapped_inner = [t if isinstance(t, BaseTool) else lc_tool(t) for t in tools]
    names = {t.name for t in wrapped_inner}
    caps = dict(caps or {})
    for label, given in (("caps", set(caps)), ("read_only", set(read_only))):
        unknown = sorted(given - names)
        if unknown:
            raise ValueError(f"{label} names unknown tools {unknown}; tools are {sorted(names)}")
    return [
        _make(
            t,
            timeout=caps.get(t.name, default),
            min_viable=0.0,
            read_only=t.name in read_only,
            side_effect=False,
            cache=cache if t.name in read_only else None,
            cache_namespace=None,
            message=None,
        )
        for t in wrapped_inner
    ]
