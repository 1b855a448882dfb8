"""`budgeted`: give a LangGraph node only what is left of the run's deadline.

A node function is wrapped as a function (LangGraph keeps injecting `config`, `runtime`, `store`,
`writer`); a Runnable node (a compiled sub-graph, `ToolNode`, a node with both a sync and an
async body) is wrapped as a Runnable that calls its `invoke` under `invoke` and its `ainvoke`
under `ainvoke`, so each keeps the body LangGraph would have run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar, cast, overload

from langchain_core.messages import ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import merge_configs
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime

from .._core.plan import run_from_config
from .._core.rules import StepRule
from .._core.validate import (
    ceiling_of,
    check_fits,
    check_idle_cap,
    check_limit,
    check_seconds,
    check_viable,
    floor_of,
)
from .messages import ToolResults, open_tool_calls
from .seams import runs_on_a_thread
from .settings import NodeSettings
from .step import NodeStep, listening
from .streams import heartbeating
from .tool_node import capped_per_call, is_tool_node

__all__ = ["budgeted", "is_budgeted", "unwrapped", "wrap_node"]

F = TypeVar("F", bound=Callable[..., Any])
_INJECTABLE = ("config", "runtime", "store", "writer", "previous")
_MARK = "__langgraph_deadline__"
_GIVEN: Final = "lgd_given"  # where a Runnable wrapper keeps the node it wraps


@overload
def budgeted(
    node: F,
    *,
    cap: float | StepRule | None = None,
    min_viable: float | StepRule = 0.0,
    name: str | None = None,
    reserve: float | None = None,
    idle_cap: float | StepRule | None = None,
) -> F: ...


@overload
def budgeted(
    node: Runnable[Any, Any],
    *,
    cap: float | StepRule | None = None,
    min_viable: float | StepRule = 0.0,
    name: str | None = None,
    reserve: float | None = None,
    idle_cap: float | StepRule | None = None,
) -> Runnable[Any, Any]: ...


@overload
def budgeted(
    node: None = None,
    *,
    cap: float | StepRule | None = None,
    min_viable: float | StepRule = 0.0,
    name: str | None = None,
    reserve: float | None = None,
    idle_cap: float | StepRule | None = None,
) -> Callable[[F], F]: ...


def budgeted(
    node: Any = None,
    *,
    cap: float | StepRule | None = None,
    min_viable: float | StepRule = 0.0,
    name: str | None = None,
    reserve: float | None = None,
    idle_cap: float | StepRule | None = None,
) -> Any:
    """Run a node with budget `min(cap, remaining - reserve)` of the run's deadline.

    Below `min_viable` the node body never runs: the run ends with `deadline_exceeded` (no I/O).
    Otherwise the body runs inside a cancel scope of its budget with the deadline in context, so
    httpx calls, model clients, tools and sub-graphs below it see the step's budget. When the
    budget runs out the body is cancelled (async) or abandoned (sync: a thread cannot be killed),
    the outcome and the step record are written to state (for `DeadlineState` graphs) and the run
    drains: no further node body runs. Works for sync and async functions (keeping LangGraph's
    injection of `config`, `runtime`, `store`, `writer`) and for runnables (`ToolNode`, sub-graphs).

    Use as `budgeted(node, cap=2.0)` or as `@budgeted(cap=2.0)`. `reserve` defaults to the run's.
    `cap` and `min_viable` may be learned: `learned(book, ...)` (docs/howto/learned-budgets.md).
    `idle_cap` (seconds, or learned) cuts the node as stalled when it shows no progress for
    that long, from its start (LangGraph's `idle_timeout`): progress is `runtime.heartbeat()`
    (where the installed LangGraph has it), a write of `runtime.stream_writer` (or an injected
    `writer`), a chunk of a model's stream or of an HTTP body read with `deadline_hooks`.

    Raises:
        TypeError, ValueError: `cap`, `min_viable` or `reserve` is not a finite number >= 0;
            `min_viable` is above `cap`; `name` is not a string; `node` is neither a function
            nor a Runnable.
        DeadlineExceeded: from the node, when the graph state has no deadline fields.
    """
    settings = NodeSettings(
        cap=check_limit(cap, "cap"),
        min_viable=check_viable(min_viable, "min_viable"),
        reserve=None if reserve is None else check_seconds(reserve, "reserve"),
        idle_cap=check_idle_cap(idle_cap, "idle_cap"),
    )
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}: {name!r}")
    check_fits(
        ceiling_of(settings.cap),
        reserve=0.0,
        needs={"min_viable": floor_of(settings.min_viable)},
        name="cap",
    )
    if node is None:
        return lambda fn: wrap_node(fn, settings, name)
    return wrap_node(node, settings, name)


def is_budgeted(node: object) -> bool:
    """True for a node this library already wrapped (it keeps its own budget)."""
    return bool(getattr(node, _MARK, False))


def unwrapped(node: Any) -> Any:
    """The node as the user gave it, when `with_deadlines` wrapped it as a Runnable (its
    `given`), else `node`."""
    return getattr(node, _GIVEN, node)


def wrap_node(node: Any, settings: NodeSettings, name: str | None) -> Any:
    """`budgeted` with checked settings (also used by `with_deadlines`)."""
    if is_budgeted(node):
        return node
    if isinstance(node, Runnable):
        return _wrap_runnable(node, settings, name)
    if not callable(node):
        raise TypeError(f"budgeted() needs a function or a Runnable, got {type(node).__name__}")
    return _wrap_function(node, settings, name)


# -- functions ------------------------------------------------------------------------------------


def _wrap_function(fn: Callable[..., Any], settings: NodeSettings, name: str | None) -> Any:
    step = NodeStep(name or getattr(fn, "__name__", None) or "node", settings)
    params = inspect.signature(fn).parameters
    wants = tuple(k for k in _INJECTABLE if k in params)

    beats = settings.idle_cap is not None

    def kwargs_for(config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        if not wants:
            return {}
        if beats:
            runtime = heartbeating(runtime)
        found = {
            "config": config,
            "runtime": runtime,
            "store": getattr(runtime, "store", None),
            "writer": getattr(runtime, "stream_writer", None),
            "previous": getattr(runtime, "previous", None),
        }
        return {k: found[k] for k in wants}

    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(fn):

        async def async_wrapper(state: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
            kwargs = kwargs_for(config, runtime)
            return await step.acall(state, config, lambda: fn(state, **kwargs))

        wrapper = async_wrapper
    else:

        def sync_wrapper(state: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
            return step.call(state, config, lambda cfg: fn(state, **kwargs_for(cfg, runtime)))

        wrapper = sync_wrapper

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(fn, attr):
            setattr(wrapper, attr, getattr(fn, attr))
    setattr(wrapper, "__signature__", _signature(fn))  # noqa: B010 - read by inspect.signature
    setattr(wrapper, _MARK, True)
    return wrapper


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """`(state, config, runtime)`, keeping the node's own state annotation (its input schema)."""
    first = next(iter(inspect.signature(fn).parameters.values()), None)
    annotation: Any = inspect.Parameter.empty
    if first is not None:
        try:
            annotation = typing.get_type_hints(fn).get(first.name, inspect.Parameter.empty)
        except Exception:
            annotation = first.annotation
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [
            inspect.Parameter("state", kind, annotation=annotation),
            inspect.Parameter("config", kind, annotation=RunnableConfig),
            inspect.Parameter("runtime", kind, annotation=Runtime),
        ]
    )


# -- runnables ------------------------------------------------------------------------------------


def _wrap_runnable(
    runnable: Runnable[Any, Any], settings: NodeSettings, name: str | None
) -> Runnable[Any, Any]:
    given = runnable
    if is_tool_node(runnable) and settings.cap is not None:
        # A cap on a node that answers tool calls is each call's (tool_node.py): a call that
        # reaches it answers the model, and the node itself has only the run's deadline.
        runnable = capped_per_call(cast(ToolNode, runnable), settings.cap)
        settings = dataclasses.replace(settings, cap=None)
    return _BudgetedRunnable(runnable, NodeStep(name or runnable.get_name(), settings), given)


def _collecting_tool_results(
    state: Any, config: RunnableConfig
) -> tuple[RunnableConfig, dict[str, ToolMessage] | None]:
    """A node answering open tool calls (`ToolNode`) reports each finished call to a callback,
    so that if the node is cut, the answers it already had are kept."""
    if not open_tool_calls(state):
        return config, None
    results = ToolResults()
    return merge_configs(config, {"callbacks": [results]}), results.by_call


class _BudgetedRunnable(RunnableLambda[Any, Any]):
    """A budgeted Runnable node. A `RunnableLambda`, so that LangGraph still finds a sub-graph
    inside it (`get_subgraphs`, `get_state(subgraphs=True)` look through a lambda's closure);
    calls go straight to the budgeted body: the wrapped node traces itself, as it would bare."""

    __langgraph_deadline__ = True

    def __init__(
        self, runnable: Runnable[Any, Any], step: NodeStep, given: Runnable[Any, Any]
    ) -> None:
        on_thread = runs_on_a_thread(runnable)

        def invoke(state: Any, config: RunnableConfig) -> Any:
            config, results = _collecting_tool_results(state, config)
            return step.call(state, config, lambda cfg: runnable.invoke(state, cfg), results)

        async def ainvoke(state: Any, config: RunnableConfig) -> Any:
            return await self.ainvoke(state, config)

        super().__init__(invoke, afunc=ainvoke, name=step.name)
        self._body = invoke
        self._runnable = runnable
        self.lgd_given = given
        self._step = step
        self._on_thread = on_thread

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self._body(input, config or {})

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        # As a Runnable streams by default, with no run of its own (LangGraph streams a node's
        # first step): the wrapped node traces itself, as it would bare.
        yield self._body(input, config or {})

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        yield await self.ainvoke(input, config)

    def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        # The body's coroutine itself, not one more awaiting it: every node call goes through.
        cfg, results = _collecting_tool_results(input, config or {})
        said = listening(input, run_from_config(cfg), results)
        if said is not None:  # the body runs with this config, not the one in context
            cfg = merge_configs(cfg, {"callbacks": [said]})
        body = functools.partial(self._runnable.ainvoke, input, cfg)
        return self._step.acall(input, cfg, body, results, on_thread=self._on_thread, said=said)
