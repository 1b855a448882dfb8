"""`with_deadlines`: put one deadline on every run of an existing graph."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Mapping
from typing import Any, TypedDict, Unpack, overload

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from .._core.rules import StepRule, Timings
from .._core.validate import (
    check_cap,
    check_caps_fit,
    check_fits,
    check_limit,
    check_mapping,
    check_seconds,
    check_step_cap,
    check_viable,
    floor_of,
)
from .following import found_book, keeping_back, paths_after
from .functional import DeadlineEntrypoint, is_entrypoint, wrap_entrypoint
from .graph import DeadlineGraph
from .node import is_budgeted, wrap_node
from .retries import guard_retries
from .routes import guard_branches
from .seams import defaults_to_compile
from .settings import CLOSING, Closing, GraphSettings, NodeSettings
from .state import DeadlineChannel

__all__ = ["CompileArgs", "with_deadlines"]


class CompileArgs(TypedDict, total=False):
    """The options of LangGraph's own `compile()` that `with_deadlines` passes on when it
    compiles a builder (a compiled graph keeps its own; these replace them)."""

    checkpointer: Checkpointer
    store: BaseStore | None


class _Options(CompileArgs, total=False):
    """`with_deadlines`'s keyword options, for its overloads (the function itself lists them,
    with their defaults)."""

    timeout: float | None
    caps: Mapping[str, float | StepRule | None] | None
    min_viable: Mapping[str, float | StepRule] | None
    reserve: float
    default_cap: float | None
    optional: Collection[str]
    book: Timings | None
    keep_back: bool
    closing: Closing
    queue_time: float | None


@overload
def with_deadlines(  # type: ignore[overload-overlap]  # a compiled graph is a Pregel too
    graph: StateGraph[Any, Any, Any, Any] | CompiledStateGraph[Any, Any, Any, Any],
    **options: Unpack[_Options],
) -> DeadlineGraph: ...


@overload
def with_deadlines(
    graph: Pregel[Any, Any, Any, Any],
    **options: Unpack[_Options],
) -> DeadlineEntrypoint: ...


def with_deadlines(
    graph: StateGraph[Any, Any, Any, Any] | Pregel[Any, Any, Any, Any],
    *,
    timeout: float | None = None,
    caps: Mapping[str, float | StepRule | None] | None = None,
    min_viable: Mapping[str, float | StepRule] | None = None,
    reserve: float = 0.0,
    default_cap: float | None = None,
    optional: Collection[str] = (),
    book: Timings | None = None,
    keep_back: bool = True,
    closing: Closing = CLOSING,
    queue_time: float | None = None,
    **compile: Unpack[CompileArgs],
) -> DeadlineGraph | DeadlineEntrypoint:
    """Compile `graph` (a `StateGraph` builder, a compiled graph or an `@entrypoint`, left
    untouched) with every node budgeted and one deadline per run.

    Each run's deadline is the earliest of: the input's `deadline`, the deadline in context
    (`deadline_scope` around the call) and `timeout` seconds from the call. An input that is a
    finished run's result (its `deadline_outcome` set) brings that run's spent deadline, which
    is ignored. Resuming a run (`None` or a `Command` as input) keeps the checkpointed deadline
    (in state, or in the checkpoint's metadata for state without the deadline fields); a
    deadline in its update can only bring it forward; a `Command(update=deadline_input(s))`
    grants a new one, within `timeout`. `ainvoke` also cancels the whole run at the deadline. A
    compiled graph keeps its config (`with_config`), name and stream transformers; a builder is
    compiled with LangGraph's own `checkpointer=` and `store=` (`CompileArgs`), given here.

    How the caller learns the terminal:
    - state with `DeadlineState` fields: the returned state's `deadline_outcome`
      (`COMPLETED` when the run finished, `CANCELLED` when its caller cancelled it; a
      checkpointed thread holds it too);
    - state without them: `DeadlineExceeded` is raised, with `.outcome` and the partial `.state`.
    Recursion limits, failures and cancellation raise as LangGraph raises them (`terminal_of`).

    How a step that runs out ends (docs/concepts.md, "How a step ends early"): its routers do not
    run, it stays pending in the checkpoint, siblings keep their results, open tool calls are
    answered with model-readable timeouts, and with a `reserve` a messages state gets a short
    assistant reply saying the answer is incomplete (`closing=Closing(message=False)` leaves it
    out); a node cut while its model was streaming the answer starts that reply with what it
    had said, marked as cut short (`Closing(partial_answer=False)` leaves it out). Granting
    time runs the cut step again, those answers and that reply removed first.

    `caps` and `min_viable` take learned values too (`learned(book, ...)`: a cap from what the
    node really takes, never above yours or `default_cap`; docs/howto/learned-budgets.md).
    With a latency `book` (given here, or the book of any learned value in `caps` or
    `min_viable`), each node keeps back, from a budget the deadline sets, the time of what can
    still run after it on the way to END (read from the graph's edges once, here): each later
    node's learned p95 (its `min_viable` while the book is cold) and the hand-off between
    steps, over the longest path, when that leaves the node its own learned p95 (else the
    steps inside it keep it back); and a `budgeted_model` call without `tokens_per_second`
    gets the `max_tokens` its learned output rate fits in its budget. `keep_back=False` turns
    both off.

    `optional` names nodes the run can do without (a slow branch): one cut at its own budget
    (its cap, or the time it keeps back for what follows) writes no update, its record says
    `timed_out`, and the graph goes on with what the other nodes gave; with a book it keeps
    back what follows even when that leaves it less than its own usual time. Cut by the run's
    deadline, it ends the run as any node does.

    Served by LangGraph Server, a run also honours the deadline headers of its request, which
    the server puts in `config["configurable"]` (`x-request-timeout-ms`, `x-request-deadline`,
    `grpc-timeout`; with `configurable_headers` in `langgraph.json`), never later than `timeout`.
    `queue_time` (seconds, opt-in) counts `timeout` and a relative header from when the server
    received the request rather than from when a worker picked the run up: up to `queue_time`
    seconds of waiting in the queue are taken from the run's budget
    (docs/howto/across-services.md, "Deploy on LangGraph Server").

    An `@entrypoint` (Functional API) gives a `DeadlineEntrypoint`: the entrypoint and each
    `@task` call are steps, `caps` and `min_viable` by task name (or the entrypoint's),
    `default_cap` for tasks. With a book, each task keeps back the time of the tasks that
    followed it in the entrypoint's past runs (read from their step records: no graph to read
    it from), as a node does for the nodes after it. With time to spare it returns what the
    entrypoint returns; a run that ends early raises `DeadlineExceeded` (`.state` None). A task
    cut at its cap raises `DeadlineExceeded` where it is awaited: an entrypoint that catches it
    and returns completes. A cut task is not saved as finished:
    `Command(update=deadline_input(s))` runs only the unfinished tasks again. Its input is the
    entrypoint's argument, never read for a deadline (docs/howto/wrap-a-graph.md).

    Raises:
        ValueError: a name in `caps`, `min_viable` or `optional` is not a node (task names,
            known only once called, are warned of after the first run that returns:
            `UserWarning`); a bad number or a cap of 0; settings that cannot fit
            (`reserve >= timeout`, a `min_viable` above `timeout` less `reserve`, or above the
            step's cap or `default_cap`); a state field named `deadline` that is not the run's
            deadline (a due date of your own).
        TypeError: `graph` is not a `StateGraph`, a compiled one or an `@entrypoint`; `caps` or
            `min_viable` is not a mapping.
    """
    _check_kinds(closing, compile, keep_back, book)
    timeout_s = check_cap(timeout, "timeout")
    reserve_s = check_seconds(reserve, "reserve")
    queue_s = check_cap(queue_time, "queue_time")
    default_cap_s = check_step_cap(default_cap, "default_cap")
    caps = dict(check_mapping(caps, "caps"))
    mins = dict(check_mapping(min_viable, "min_viable"))
    book = book or found_book(caps, mins)
    if not isinstance(graph, CompiledStateGraph) and is_entrypoint(graph):
        return wrap_entrypoint(
            graph,  # type: ignore[arg-type]
            timeout=timeout_s,
            caps=caps,
            min_viable=mins,
            reserve=reserve_s,
            default_cap=default_cap_s,
            checkpointer=compile.get("checkpointer"),
            store=compile.get("store"),
            queue_time=queue_s,
            book=book if keep_back else None,
        )
    builder, compile_kwargs = _compile_options(graph, compile)
    _check_deadline_field(builder)
    book = book or found_book(builder=builder)
    dropped = _check_names(builder, caps, mins, optional)
    _check_tables(caps, mins, default_cap_s, timeout_s, reserve_s)
    node_caps = _node_caps(builder, caps, mins, dropped, default_cap_s, book if keep_back else None)
    wrapped = _budgeted_builder(builder, node_caps, mins, dropped, explicit={*caps, *mins})
    compiled = wrapped.compile(**compile_kwargs)
    guarded = guard_retries(compiled, {n: floor_of(v) for n, v in mins.items()})  # compiled
    settings = GraphSettings(
        timeout=timeout_s,
        reserve=reserve_s,
        has_fields={"deadline", "deadline_outcome", "deadline_trace"} <= set(wrapped.channels),
        closing_message=closing.message,
        partial_answer=closing.partial_answer,
        queue_time=queue_s,
        guarded_retries=guarded,
        book=book if keep_back else None,
    )
    ours = DeadlineGraph.of(compiled, settings)
    if isinstance(graph, CompiledStateGraph) and graph.config:
        # What `.with_config(...)` gave the graph (create_agent: recursion_limit, metadata).
        ours = ours.with_config(graph.config)
    return ours


def _check_kinds(
    closing: object, compile: Mapping[str, Any], keep_back: object, book: object
) -> None:
    """Refuse an option of the wrong kind, naming it.

    Raises:
        TypeError: `closing` not a `Closing`, a keyword `compile()` does not take, `keep_back`
            not a bool, `book` not a latency book.
    """
    if not isinstance(closing, Closing):
        raise TypeError(f"closing must be a Closing, got {type(closing).__name__}: {closing!r}")
    unknown = sorted(set(compile) - set(CompileArgs.__annotations__))
    if unknown:
        raise TypeError(f"with_deadlines() got unexpected keyword arguments {unknown}")
    if not isinstance(keep_back, bool):
        raise TypeError(f"keep_back must be a bool, got {keep_back!r}")
    if book is not None and not callable(getattr(book, "seconds_at", None)):
        raise TypeError(f"book must be a LatencyBook, got {type(book).__name__}")


def _compile_options(
    graph: object, given: CompileArgs
) -> tuple[StateGraph[Any, Any, Any, Any], dict[str, Any]]:
    """The builder to wrap and what to compile it with: a compiled graph's own options
    (checkpointer, store, cache, interrupts, debug, name, stream transformers), with the
    `checkpointer` and `store` given to `with_deadlines` in their place.

    Raises:
        TypeError: `graph` is neither a builder nor a compiled graph.
    """
    compile_kwargs: dict[str, Any] = {}
    if isinstance(graph, CompiledStateGraph):
        builder = graph.builder
        compile_kwargs = {
            "checkpointer": graph.checkpointer,
            "store": graph.store,
            "cache": graph.cache,
            "interrupt_before": graph.interrupt_before_nodes or None,
            "interrupt_after": graph.interrupt_after_nodes or None,
            "debug": graph.debug,
            "name": graph.name,
        }
        transformers = tuple(getattr(graph, "stream_transformers", ()) or ())
        if transformers:  # LangGraph >= 1.2.x: stream transformers given at compile time
            compile_kwargs["transformers"] = transformers
    elif isinstance(graph, StateGraph):
        builder = graph
    else:
        raise TypeError(
            "with_deadlines() needs a StateGraph, a compiled graph or an @entrypoint, "
            f"got {type(graph).__name__}"
        )
    compile_kwargs.update({k: v for k, v in given.items() if v is not None})
    return builder, compile_kwargs


def _check_names(
    builder: StateGraph[Any, Any, Any, Any],
    caps: Mapping[str, Any],
    mins: Mapping[str, Any],
    optional: Collection[str],
) -> set[str]:
    """The `optional` nodes, once `caps`, `min_viable` and `optional` are known to name only
    the graph's nodes.

    Raises:
        TypeError: `optional` is not a collection of names.
        ValueError: a table names a node the graph does not have.
    """
    if isinstance(optional, str) or not all(isinstance(n, str) for n in optional):
        raise TypeError(f"optional must be a collection of node names, got {optional!r}")
    dropped = set(optional)
    for table, label in ((caps, "caps"), (mins, "min_viable"), (dropped, "optional")):
        unknown = sorted(set(table) - set(builder.nodes))
        if unknown:
            raise ValueError(
                f"{label} names unknown nodes {unknown}; nodes are {sorted(builder.nodes)}"
            )
    return dropped


def _node_caps(
    builder: StateGraph[Any, Any, Any, Any],
    caps: Mapping[str, Any],
    mins: Mapping[str, Any],
    dropped: set[str],
    default_cap: float | None,
    book: Timings | None,
) -> dict[str, Any]:
    """Each node's cap: its own or `default_cap`; with a `book`, one that also keeps back the
    learned time of what can still follow the node on the way to END."""
    node_caps = {name: caps.get(name, default_cap) for name in builder.nodes}
    if book is not None:
        floors = {node: floor_of(need) for node, need in mins.items()}
        paths = paths_after(builder)
        for name, cap in node_caps.items():
            node_caps[name] = keeping_back(
                cap, paths.get(name, ()), book, floors, optional=name in dropped
            )
    return node_caps


def _check_tables(
    caps: dict[str, Any],
    mins: dict[str, Any],
    default_cap: float | None,
    timeout: float | None,
    reserve: float,
) -> None:
    """Check each node's cap and min_viable in place (a learned cap bounded by `default_cap`),
    and refuse a table that cannot fit: a min_viable above its cap, or above the timeout less
    the reserve.

    Raises:
        ValueError, TypeError: naming the node and the table, as written.
    """
    for node, value in caps.items():
        cap = check_limit(value, f"caps[{node!r}]")
        caps[node] = cap.bounded(default_cap) if isinstance(cap, StepRule) else cap
    for node, value in mins.items():
        mins[node] = check_viable(value, f"min_viable[{node!r}]")
    check_caps_fit(caps, mins, default_cap=default_cap)
    check_fits(
        timeout,
        reserve=reserve,
        needs={f"min_viable[{node!r}]": floor_of(need) for node, need in mins.items()},
    )


def _budgeted_builder(
    builder: StateGraph[Any, Any, Any, Any],
    node_caps: Mapping[str, Any],
    mins: Mapping[str, Any],
    dropped: set[str],
    *,
    explicit: set[str],
) -> StateGraph[Any, Any, Any, Any]:
    """A copy of `builder` with every node budgeted (error handlers left as they are) and its
    routers guarded; `builder` itself is not changed."""
    wrapped = copy.copy(builder)
    wrapped.nodes = {
        name: spec
        if spec.is_error_handler
        else dataclasses.replace(
            spec,
            runnable=_budget_node(
                spec.runnable,
                name,
                NodeSettings(
                    cap=node_caps[name],
                    min_viable=mins.get(name, 0.0),
                    retry=spec.retry_policy,
                    optional=name in dropped,
                ),
                explicit=name in explicit or name in dropped,
            ),
        )
        for name, spec in builder.nodes.items()
    }
    wrapped.branches = guard_branches(builder.branches)  # type: ignore[assignment]
    wrapped._node_defaults = defaults_to_compile(builder)
    return wrapped


def _check_deadline_field(builder: StateGraph[Any, Any, Any, Any]) -> None:
    """A state field named `deadline` must be the run's deadline (`DeadlineState`'s), not the
    user's own (a due date, say): it would be read as the run's deadline."""
    channel = builder.channels.get("deadline")
    if channel is None or isinstance(channel, DeadlineChannel):
        return
    typ = getattr(channel, "typ", None)
    kind = getattr(typ, "__name__", None) or repr(typ)
    raise ValueError(
        f"the state field 'deadline' ({kind}) is not the run's deadline: with_deadlines() "
        "reads a field of that name as the run's deadline (epoch seconds). Rename your field "
        "(for example 'due_date'), or declare it from DeadlineState (or DeadlineModel / "
        "DeadlineDataclass) if it is meant to be the run's deadline."
    )


def _budget_node(runnable: Any, name: str, settings: NodeSettings, *, explicit: bool) -> Any:
    """Budget one node, keeping both of its bodies (sync and async); a node the user already
    `budgeted` keeps its own budget."""
    own = (getattr(runnable, "func", None), getattr(runnable, "afunc", None))
    if is_budgeted(runnable) or any(is_budgeted(body) for body in own if body is not None):
        if explicit:
            raise ValueError(
                f"node {name!r} is already wrapped with budgeted(): give its cap and min_viable "
                "there, not in with_deadlines(caps=..., min_viable=...)"
            )
        return runnable
    return wrap_node(runnable, settings, name)
