"""The public constructors of deadline tools: `deadline_tool` (the `@tool` drop-in, and a
wrapper for any `BaseTool`) and `deadline_tools` (several tools from one table of caps)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, overload

from langchain_core.tools import BaseTool
from langchain_core.tools import tool as lc_tool

from .._retry.retry import RetryOn
from .cache import StaleCache
from .messages import ToolTimeout
from .options import ToolOptions
from .stale import Namespace
from .tool import DeadlineTool

__all__ = ["deadline_tool", "deadline_tools"]


def _make(inner: BaseTool, options: ToolOptions) -> DeadlineTool:
    """`inner` (unwrapped first, if it is a deadline tool) under `options`, checked."""
    if isinstance(inner, DeadlineTool):
        inner = inner.inner
    return DeadlineTool(
        name=inner.name,
        description=inner.description,
        args_schema=inner.args_schema,
        return_direct=inner.return_direct,
        response_format=inner.response_format,
        metadata=inner.metadata,
        tags=inner.tags,
        inner=inner,
        options=options.checked(inner.name),
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
    config) keeps users apart; by default it is the authenticated user
    (`langgraph_auth_user_id`), else the config's `user_id`, else its `thread_id`, and without any
    of them nothing is cached (docs/howto/tools.md, "Cache tenancy"). `message` overrides the
    text (a format string with `{tool}`, `{seconds}`, `{status}`, `{remaining}`, or a function
    of `ToolTimeout`).

    `retry_on` (as in `retry(on=...)`) retries failed attempts up to `attempts` times, inside
    the same budget: no attempt or backoff starts that cannot fit. A `side_effect=True` tool
    (one that changes the world) is not retried once its request may have left, unless it has
    an `idempotency_key` (a function of its arguments; the key reaches the tool as
    `config["metadata"]["idempotency_key"]`); its record says whether a side effect started.

    Raises:
        ValueError, TypeError: bad numbers, a cache on a tool that is not read-only, etc.
    """
    options = ToolOptions(
        timeout=timeout,
        min_viable=min_viable,
        read_only=read_only,
        side_effect=side_effect,
        cache=cache,
        cache_namespace=cache_namespace,
        message=message,
        retry_on=retry_on,
        attempts=attempts,
        idempotency_key=idempotency_key,
    )
    if isinstance(name_or_callable, BaseTool):
        return _make(name_or_callable, options)

    def build(fn: Callable[..., Any], name: str | None = None) -> DeadlineTool:
        inner = lc_tool(
            *((name, fn) if name else (fn,)),
            description=description,
            args_schema=args_schema,
            return_direct=return_direct,
            response_format=response_format,
            parse_docstring=parse_docstring,
        )
        return _make(inner, options)

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
            ToolOptions(
                timeout=caps.get(t.name, default),
                read_only=t.name in read_only,
                cache=cache if t.name in read_only else None,
            ),
        )
        for t in wrapped_inner
    ]
