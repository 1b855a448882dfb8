"""The LangGraph seams this library plugs into, in one place (checked against langgraph 1.2).

Public LangGraph API where it has one; where it has none, the keys LangGraph 1.x puts in a
running task's config (its runtime, reader, writer, task scheduler). `tests/graph/test_seams.py`
fails loudly when one of them changes shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import RunControl, get_runtime

from .._core.step import let_through

__all__ = [
    "DRAIN_REASON",
    "PREVIOUS",
    "as_task",
    "check_thread",
    "defaults_to_compile",
    "drain",
    "is_async_task",
    "node_attempt",
    "own_control",
    "running_config",
    "runs_on_a_thread",
    "scheduling_with",
    "state_reader",
    "task_name",
    "task_writer",
    "uncached",
]

let_through(
    GraphBubbleUp
)  # LangGraph's control flow (interrupts, drains): every step lets it go up

DRAIN_REASON: Final = "deadline_exceeded"
"""The reason given to `RunControl.request_drain` when a step ran out of budget."""


def running_config() -> RunnableConfig | None:
    """The config of the LangGraph run this code runs in (`get_config`), None outside one."""
    try:
        return get_config()
    except RuntimeError:  # not inside a LangGraph run
        return None


def _runtime() -> Any:
    try:
        return get_runtime()
    except Exception:  # outside a graph run (a direct call in a test)
        return None


_RUNTIME_KEY: Final = "__pregel_runtime"
"""Where LangGraph 1.x puts a task's `Runtime` in its config (what `get_runtime()` reads)."""


def node_attempt(config: Mapping[str, Any] | None = None) -> int:
    """The attempt number of the node running here (LangGraph's retries count up from 1).

    Given the node's `config`, it is read from there (the hot path: no context lookup)."""
    conf = config.get("configurable", {}) if config is not None else None
    runtime = conf.get(_RUNTIME_KEY) if conf is not None else _runtime()
    info = getattr(runtime, "execution_info", None)
    return info.node_attempt if info is not None else 1


_READ_KEY: Final = "__pregel_read"
"""Where LangGraph 1.x puts, in a running task's config, the reader of its graph's channels
(`(select, fresh=False)`: the values of the `select` keys, as the graph's `values` stream
shows them)."""


def state_reader(
    config: Mapping[str, Any], select: Any, held: Callable[[], Any] | None = None
) -> Callable[[], Any] | None:
    """What reads, from a node's `config`, the state of the graph running it now (its `select`
    keys), without its task's own writes; `held` (the run's reader so far) when LangGraph gave
    the node none, or when the node is another graph's (a sub-graph's: other channels). A
    reader holds its node's task (its writes, its scratchpad): taking each node's own lets the
    finished ones go while the run waits."""
    read = config.get("configurable", {}).get(_READ_KEY)
    if read is None:
        return held
    if held is not None and _channels(held) is not _channels(read):
        return held
    return functools.partial(read, select)


def _channels(read: Any) -> Any:
    """The channels a LangGraph reader reads (its `local_read` partial's second argument; a
    partial of it is flattened into one), or the reader itself for one of another shape (then
    no two nodes' readers match)."""
    args: tuple[Any, ...] = getattr(read, "args", ())
    return args[1] if len(args) > 1 else read


_SEND_KEY: Final = "__pregel_send"
"""Where LangGraph 1.x puts, in a running task's config, what writes to the graph's channels when
the task ends (taking `(channel, value)` pairs): what a node's return value goes through."""


def task_writer(
    config: Mapping[str, Any] | None,
) -> Callable[[Sequence[tuple[str, Any]]], None] | None:
    """What writes `(channel, value)` pairs to the graph's state at the end of the task running
    with `config`, beside its return value (None outside a LangGraph task). A tool-call wrapper
    writes its records with it and returns the tool's own answer, as it is."""
    conf = config.get("configurable", {}) if config is not None else {}
    writer = conf.get(_SEND_KEY)
    return writer if callable(writer) else None


def drain() -> None:
    """Ask LangGraph to stop after this superstep: no further node body runs."""
    control = getattr(_runtime(), "control", None)
    if control is not None:
        control.request_drain(DRAIN_REASON)


class _OwnControl(RunControl):
    """The `RunControl` of a run started inside another LangGraph run: a drain asked of it
    (its deadline ran out) is its own, and a drain asked of the run it runs in (a server's
    shutdown) still reaches it."""

    __slots__ = ("_outer",)

    def __init__(self, outer: RunControl) -> None:
        super().__init__()
        self._outer = outer

    @property
    def drain_requested(self) -> bool:
        return super().drain_requested or self._outer.drain_requested

    @property
    def drain_reason(self) -> str | None:
        return super().drain_reason or self._outer.drain_reason


def own_control(given: RunControl | None) -> RunControl | None:
    """The control to start a run with: `given` (the caller's) when there is one; inside
    another LangGraph run (a node calling this graph, or this graph as a subgraph), one of its
    own that follows the outer run's (`_OwnControl`): LangGraph hands a run started there the
    outer run's control, so the drain that ends this run at its deadline would stop the outer
    run too; else None (LangGraph makes one)."""
    if given is not None:
        return given
    outer = var_child_runnable_config.get()
    if outer is None:
        return None
    control = getattr(outer.get("configurable", {}).get(_RUNTIME_KEY), "control", None)
    return _OwnControl(control) if isinstance(control, RunControl) else None


NO_WRITES: Final = "__no_writes__"
"""The write LangGraph 1.x gives a task that wrote nothing; `apply_writes` sends it to no channel
and the "updates" stream leaves it out, so a marker riding on it changes nothing a run shows.
(An `__error__` write would also keep a task out of the cache, but it hides the node's update
from the stream and marks the task failed in the checkpoint.)"""
UNCACHED: Final = "langgraph_deadline: ended early by the deadline, not cached"


def uncached(config: Mapping[str, Any] | None = None) -> None:
    """Keep the running node's writes out of LangGraph's node cache (`cache_policy=`): a node
    the deadline ended early, or whose answer holds a step that did not complete, must run
    again on the same input. Adds the marker `(NO_WRITES, UNCACHED)` to the task's writes, which
    no channel reads and `DeadlineCache` (the cache `with_deadlines` compiles with) refuses to
    store. The running config is read from the context when `config` is not given; outside a
    run, nothing."""
    if config is None:
        config = var_child_runnable_config.get()
    send = task_writer(config)
    if send is not None:
        send([(NO_WRITES, UNCACHED)])


def runs_on_a_thread(node: Any) -> bool:
    """True for a function node with only a sync body: under `ainvoke` LangGraph runs it on an
    executor thread, which a budget cannot stop (its step is `abandoned`, not `timed_out`).

    LangGraph 1.2 exposes a function node's bodies as `func` / `afunc`, and gives a sync-only
    node an `afunc` that is `functools.partial(run_in_executor, None, func)`.
    """
    func = getattr(node, "func", None)
    if func is None:
        return False
    afunc = getattr(node, "afunc", None)
    return afunc is None or (isinstance(afunc, functools.partial) and func in afunc.args)


_DEFAULT_ERROR_HANDLER: Final = "__default_error_handler__"
"""The node `StateGraph.compile` adds for `set_node_defaults(error_handler=...)`."""


def defaults_to_compile(builder: Any) -> Any:
    """The node defaults (`set_node_defaults`) for compiling `builder` once more.

    LangGraph 1.2's `compile` applies them to the builder itself: it adds the default error
    handler as a node (and refuses to add it twice) and writes the defaults into the node specs.
    A builder compiled already keeps its handler node; compiling it again must not add another.
    """
    defaults = builder._node_defaults
    if defaults.error_handler is not None and _DEFAULT_ERROR_HANDLER in builder.nodes:
        return dataclasses.replace(defaults, error_handler=None)
    return defaults


def check_thread(checkpointer: Any, config: Mapping[str, Any]) -> None:
    """Refuse a run of a checkpointed graph whose config has no `configurable` keys, as LangGraph
    1.2 does (`Pregel._defaults`): it checks the config it is given, in which the run's tracker
    already rides, so the caller's config is checked here first, with LangGraph's words.

    Raises:
        ValueError: LangGraph's own error for a missing `thread_id`.
    """
    if isinstance(checkpointer, BaseCheckpointSaver) and not config.get("configurable"):
        raise ValueError(
            "Checkpointer requires one or more of the following 'configurable' "
            "keys: thread_id, checkpoint_ns, checkpoint_id"
        )


# -- the Functional API: what a `@task` call goes through ----------------------------------------

_CALL_KEY: Final = "__pregel_call"
"""Where LangGraph 1.x puts, in a running node's config, what a `@task` call schedules its task
with (`call(func, (args, kwargs), retry_policy=, cache_policy=, callbacks=, timeout=)`, which
returns the task's future); the task's body is `func`."""

PREVIOUS: Final = "__previous__"
"""The channel an `@entrypoint` keeps its saved value in (`previous`): an entrypoint's mark."""


@contextlib.contextmanager
def scheduling_with(
    config: RunnableConfig, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> Iterator[RunnableConfig]:
    """`config` with the task scheduler in it wrapped by `wrap`, set as the running config (what
    `@task` calls and `get_config()` read) for the block. `config` as it is when it has none."""
    conf = config.get("configurable", {})
    schedule = conf.get(_CALL_KEY)
    if schedule is None:
        yield config
        return
    patched: RunnableConfig = {**config, "configurable": {**conf, _CALL_KEY: wrap(schedule)}}
    token = var_child_runnable_config.set(patched)
    try:
        yield patched
    finally:
        var_child_runnable_config.reset(token)


def task_name(func: Callable[..., Any]) -> str:
    """The name LangGraph gives the task whose body is `func` (in its task ids, checkpoint
    namespaces, stream chunks): as `langgraph.pregel._call.get_runnable_for_task` finds it."""
    if hasattr(func, "__name__"):
        return str(func.__name__)
    if hasattr(func, "func"):
        return str(func.func.__name__)
    return type(func).__name__


def as_task(wrapper: Callable[..., Any], func: Callable[..., Any]) -> None:
    """Make `wrapper` the same task as `func` for LangGraph: the same name (task ids, so that a
    resume finds the results its checkpoint saved) and identifier (`module.qualname`: cache
    keys), and the same signature (what LangGraph injects: `config`, `runtime`, ...)."""
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    wrapper.__name__ = task_name(func)
    wrapper.__qualname__ = qualname or wrapper.__name__
    wrapper.__module__ = getattr(func, "__module__", None) if qualname else None  # type: ignore[assignment]
    wrapper.__doc__ = getattr(func, "__doc__", None)
    wrapper.__wrapped__ = func  # type: ignore[attr-defined]  # read by inspect.signature


def is_async_task(func: Callable[..., Any]) -> bool:
    """True for a task body LangGraph awaits (a coroutine function, or an object whose
    `__call__` is one), as `langgraph._internal._runnable.is_async_callable` decides."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004
    )
