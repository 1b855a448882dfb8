"""The public constructors of deadline tools: `deadline_tool` (the `@tool` drop-in, and a
wrapper for any `BaseTool`) and `deadline_tools` (several tools from one table of caps).

`deadline_tool`'s three typed call forms (the overloads) sit beside the function they type,
its keyword options (`@tool`'s and ours) typed once for all three (`_Options`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypedDict, Unpack, cast, overload

from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as lc_tool
from langchain_core.tools.base import ArgsSchema

from .._core.rules import StepRule
from .._core.timeouts import ToolTimeout
from .._core.validate import check_idle_cap, check_limit, check_mapping, show
from .cache import StaleCache
from .hedge import Hedge
from .options import Retries, ToolOptions, check_cache, check_hedge, check_namespace
from .stale import Namespace
from .tool import DeadlineTool

__all__ = ["ToolArgs", "deadline_tool", "deadline_tools"]


def _make(inner: BaseTool, options: ToolOptions) -> DeadlineTool:
    """`inner` (unwrapped first, if it is a deadline tool) under `options`, checked; every field
    a user of `inner` sees (name, schema, `extras`, error handling...) is this tool's too."""
    if isinstance(inner, DeadlineTool):
        inner = inner.inner
    checked = options.checked(inner.name)
    if checked.hedge is not None and getattr(inner, "coroutine", True) is None:
        raise ValueError(
            f"tool {inner.name!r}: hedge needs an async tool (a sync copy runs on a thread "
            "that cannot be stopped, so a losing copy would run on)"
        )
    fields = {name: getattr(inner, name) for name in BaseTool.model_fields}
    return DeadlineTool(**fields, inner=inner, options=checked)


class ToolArgs(TypedDict, total=False):
    """The options of LangChain's `@tool` itself, passed to it as they are: `deadline_tool` takes
    them where `@tool` does, and refuses them with an existing tool (set them on that tool)."""

    description: str | None
    return_direct: bool
    args_schema: ArgsSchema | None
    infer_schema: bool
    response_format: Literal["content", "content_and_artifact"]
    parse_docstring: bool
    error_on_invalid_docstring: bool
    extras: dict[str, Any] | None


class _Options(ToolArgs, total=False):
    """`deadline_tool`'s keyword options (ours and `@tool`'s), for its overloads: the function
    itself lists ours, with their defaults."""

    cap: float | StepRule | None
    min_viable: float | StepRule
    read_only: bool
    side_effect: bool
    cache: StaleCache | None
    cache_namespace: Namespace
    message: Callable[[ToolTimeout], str] | str | None
    retries: Retries | None
    hedge: Hedge | None
    idle_cap: float | StepRule | None


@overload
def deadline_tool(
    name_or_callable: Callable[..., Any] | BaseTool,
    **options: Unpack[_Options],
) -> DeadlineTool: ...


@overload
def deadline_tool(
    name_or_callable: str,
    runnable: Runnable[Any, Any],
    **options: Unpack[_Options],
) -> DeadlineTool: ...


@overload
def deadline_tool(
    name_or_callable: str | None = None,
    **options: Unpack[_Options],
) -> Callable[[Callable[..., Any] | Runnable[Any, Any]], DeadlineTool]: ...


def deadline_tool(
    name_or_callable: str | Callable[..., Any] | BaseTool | None = None,
    runnable: Runnable[Any, Any] | None = None,
    *,
    cap: float | StepRule | None = None,
    min_viable: float | StepRule = 0.0,
    read_only: bool = False,
    side_effect: bool = False,
    cache: StaleCache | None = None,
    cache_namespace: Namespace = None,
    message: Callable[[ToolTimeout], str] | str | None = None,
    retries: Retries | None = None,
    hedge: Hedge | None = None,
    idle_cap: float | StepRule | None = None,
    **tool_args: Unpack[ToolArgs],
) -> DeadlineTool | Callable[[Callable[..., Any] | Runnable[Any, Any]], DeadlineTool]:
    """A drop-in for LangChain's `@tool` whose calls live inside the run's deadline.

    Every form and option of `@tool` (`@deadline_tool`, `@deadline_tool("name")`,
    `deadline_tool("name", runnable)`, `description=`, `args_schema=`, `extras=`, ...) builds the
    same tool `@tool` would (same name, schemas, `extras`, error handling, `ToolMessage`s), plus
    the deadline options: `@deadline_tool(cap=5.0, read_only=True, cache=InMemoryStaleCache())`.
    `deadline_tool(existing_tool, cap=...)` wraps any `BaseTool` (an MCP tool, a toolkit's),
    keeping all of it.

    Each call gets `min(cap, remaining - reserve)`. Below `min_viable` it is not called
    and answers "skipped". Past its budget it is cancelled (a sync tool is abandoned: its thread
    cannot be stopped) and answers, in words the model can act on, that it timed out; with
    `read_only=True` and a `cache`, the last good answer for the same arguments and namespace is
    served instead, marked stale with its age. `cache_namespace` (a string, or a function of the
    config) keeps users apart; by default it is the authenticated user
    (`langgraph_auth_user_id`), else the config's `user_id`, else its `thread_id`, and without any
    of them nothing is cached, which the tool says once with a `UserWarning` (docs/howto/tools.md,
    "Cache tenancy"). `message` overrides the text (a format string with `{tool}`,
    `{seconds}`, `{status}`, `{remaining}`, or a function of `ToolTimeout`).
    `cap` and `min_viable` may be `learned(book, cap=5.0)` (docs/howto/learned-budgets.md).
    `idle_cap` is the longest gap with no progress (bytes of an HTTP response body read
    through a client with `deadline_hooks`, or `progress()` calls) before the call is cut as
    stalled, its timeout text saying "no progress for 2.1 s"; the gap clock starts at its
    first response. It may be `learned(book)` too, never above the tool's cap.

    `retries=Retries(on, attempts=3, idempotency_key=None)` retries failed attempts inside the
    same budget: no attempt or backoff starts that cannot fit. A `side_effect=True` tool (one
    that changes the world) is not retried once its request may have left, unless its
    `Retries` has an `idempotency_key`; its record says whether a side effect started.
    `@tool`'s own options (`ToolArgs`: `description=`, `args_schema=`, `return_direct=`, ...)
    go to `@tool` as they are.

    Raises:
        ValueError, TypeError: bad numbers, `min_viable` above `cap`, a flag that is not a
            bool, a `message` format string with a placeholder it cannot fill, a cache or a
            `hedge` on a tool that is not read-only, a `hedge` on a sync tool, `@tool` options
            given with an existing tool (set them on that tool), and whatever `@tool` raises
            for the same arguments.
    """
    options = ToolOptions(
        cap=cap,
        min_viable=min_viable,
        read_only=read_only,
        side_effect=side_effect,
        cache=cache,
        cache_namespace=cache_namespace,
        message=message,
        retries=retries,
        hedge=hedge,
        idle_cap=idle_cap,
    )
    made: dict[str, Any] = dict(tool_args)
    unknown = sorted(set(made) - set(ToolArgs.__annotations__))
    if unknown:
        raise TypeError(f"deadline_tool got unexpected keyword arguments {unknown}")
    _check_target(name_or_callable, runnable)
    if isinstance(name_or_callable, BaseTool):
        given = sorted(k for k, v in made.items() if v != _TOOL_DEFAULTS[k])
        if runnable is not None:
            given.append("runnable")
        if given:
            raise TypeError(
                f"deadline_tool(existing_tool) takes only deadline options; "
                f"set {given} on {name_or_callable.name!r} itself"
            )
        return _make(name_or_callable, options)
    built = cast(Any, lc_tool)(name_or_callable, runnable, **made)
    if isinstance(built, BaseTool):
        return _make(built, options)
    return lambda fn: _make(built(fn), options)


def _check_target(name_or_callable: object, runnable: object) -> None:
    """Refuse what no form of `deadline_tool` takes (`deadline_tool(5)`) in its own words,
    naming the argument: `@tool` would speak of its decorator."""
    if not (
        name_or_callable is None
        or isinstance(name_or_callable, str | Runnable)  # a BaseTool is a Runnable
        or callable(name_or_callable)
    ):
        raise TypeError(
            "deadline_tool takes a function, an existing tool (a BaseTool), or a tool name "
            f"(with a runnable, or as a decorator), got {type(name_or_callable).__name__}: "
            f"{show(name_or_callable)}"
        )
    if runnable is not None and not isinstance(runnable, Runnable):
        raise TypeError(
            "deadline_tool's runnable must be a Runnable (with a tool name before it), got "
            f"{type(runnable).__name__}: {show(runnable)}"
        )


_TOOL_DEFAULTS: dict[str, Any] = {
    "description": None,
    "return_direct": False,
    "args_schema": None,
    "infer_schema": True,
    "response_format": "content",
    "parse_docstring": False,
    "error_on_invalid_docstring": True,
    "extras": None,
}
"""`@tool`'s own defaults: what `deadline_tool(existing_tool, ...)` accepts for its options."""


def deadline_tools(
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    caps: Mapping[str, float | StepRule | None] | None = None,
    default_cap: float | StepRule | None = None,
    read_only: Sequence[str] = (),
    cache: StaleCache | None = None,
    cache_namespace: Namespace = None,
    hedge: Hedge | None = None,
    idle_cap: float | StepRule | None = None,
) -> list[DeadlineTool]:
    """Wrap several tools from one table of caps: `{"search_docs": 5, "get_order": 3}` plus a
    `default_cap` for the rest; any may be `learned(book, ...)`, learned per tool name. The tools
    named in `read_only` share `cache` for stale answers,
    kept apart by `cache_namespace` (as in `deadline_tool`: by default the authenticated user,
    else the config's `user_id`, else its `thread_id`), and are hedged by `hedge` (each tool
    with a hedge budget of its own). `idle_cap` is every tool's (see `deadline_tool`).

    Every argument is checked, and named as written (`default_cap`, `caps['f']`), even when
    `tools` is empty: a table that is wrong for no tool today is wrong for the next one.

    Raises:
        ValueError: `caps` or `read_only` names a tool that is not in `tools`; a cap or
            `default_cap` that is not a duration (negative, NaN, infinite); a `hedge` with no
            tool named in `read_only`, or for one that is sync.
        TypeError: `tools` is not a list of tools or functions; `caps` is not a mapping;
            `read_only` is a single string; a cap, `default_cap`, `cache` or `cache_namespace`
            of the wrong type.
    """
    if isinstance(tools, str | BaseTool) or not isinstance(tools, Iterable):
        raise TypeError(
            f"tools must be a list of tools or functions, got {type(tools).__name__}: {show(tools)}"
        )
    tools = list(tools)
    for i, t in enumerate(tools):
        if not (isinstance(t, BaseTool) or callable(t)):
            raise TypeError(
                f"tools[{i}] must be a tool or a function, got {type(t).__name__}: {show(t)}"
            )
    default = check_limit(default_cap, "default_cap")
    caps = {
        name: check_limit(value, f"caps[{name!r}]")
        for name, value in check_mapping(caps, "caps").items()
    }
    if isinstance(read_only, str):
        raise TypeError(f"read_only must be a list of tool names, got the string {read_only!r}")
    check_cache(cache)
    check_namespace(cache_namespace)
    check_hedge(hedge, "deadline_tools", read_only=bool(read_only))
    check_idle_cap(idle_cap, "idle_cap")
    wrapped_inner = [t if isinstance(t, BaseTool) else lc_tool(t) for t in tools]
    names = {t.name for t in wrapped_inner}
    for label, given in (("caps", set(caps)), ("read_only", set(read_only))):
        unknown = sorted(given - names)
        if unknown:
            raise ValueError(f"{label} names unknown tools {unknown}; tools are {sorted(names)}")
    return [
        _make(
            t,
            ToolOptions(
                cap=caps.get(t.name, default),
                read_only=t.name in read_only,
                cache=cache if t.name in read_only else None,
                cache_namespace=cache_namespace,
                hedge=hedge if t.name in read_only else None,
                idle_cap=idle_cap,
            ),
        )
        for t in wrapped_inner
    ]
