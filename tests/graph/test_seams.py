"""The LangGraph behaviours this library relies on where LangGraph has no documented seam.

Each test names what we rely on; when LangGraph changes it, the test fails here first, with a
clear message, instead of a subtle deadline bug somewhere else.
"""

from __future__ import annotations

import functools
import inspect
import operator
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphDrained, GraphInterrupt
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import RunControl, get_runtime
from langgraph.types import RetryPolicy
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline._graph import seams
from langgraph_deadline._graph.seams import (
    DRAIN_REASON,
    PREVIOUS,
    as_task,
    drain,
    is_async_task,
    node_attempt,
    own_control,
    runs_on_a_thread,
    scheduling_with,
    task_name,
)
from langgraph_deadline._graph.settings import GraphSettings
from langgraph_deadline.types import DeadlineGraph


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _two_nodes() -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(State)
    b.add_node("a", lambda s: {"log": ["a"]})
    b.add_node("b", lambda s: {"log": ["b"]})
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", END)
    return b


def test_a_deadline_graph_is_built_the_way_pregel_copy_builds_a_graph() -> None:
    compiled = _two_nodes().compile(checkpointer=InMemorySaver(), name="two")
    settings = GraphSettings(timeout=1.0, reserve=0.1, has_fields=False)
    ours = DeadlineGraph.of(compiled, settings)

    assert isinstance(ours, DeadlineGraph)
    assert ours.deadline_settings == settings
    for key in ("builder", "nodes", "channels", "checkpointer", "name", "stream_mode"):
        assert getattr(ours, key) == getattr(compiled, key), key
    assert (ours.input_channels, ours.output_channels) == (
        compiled.input_channels,
        compiled.output_channels,
    )
    # LangGraph's own copies (with_config, copy) keep the class and the settings.
    configured = ours.with_config(recursion_limit=7)
    assert isinstance(configured, DeadlineGraph)
    assert configured.deadline_settings == settings
    assert configured.config is not None
    assert configured.config["recursion_limit"] == 7


def test_sync_function_nodes_run_on_a_thread_under_ainvoke() -> None:
    def sync_node(state: State) -> dict[str, Any]:
        return {}

    async def async_node(state: State) -> dict[str, Any]:
        return {}

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    b = StateGraph(State)
    b.add_node("sync", sync_node)
    b.add_node("async", async_node)
    b.add_node("tools", ToolNode([echo]))  # a node with both a sync and an async body
    assert runs_on_a_thread(b.nodes["sync"].runnable)
    assert not runs_on_a_thread(b.nodes["async"].runnable)
    assert not runs_on_a_thread(b.nodes["tools"].runnable)


def test_interrupts_are_control_flow_that_steps_pass_through() -> None:
    """The graph layer names LangGraph's control flow to the core once, at import."""
    from langgraph_deadline._core import step

    assert issubclass(GraphInterrupt, step._control_flow)
    assert issubclass(GraphDrained, step._control_flow)


def test_a_drain_stops_the_run_before_the_next_node() -> None:
    b = StateGraph(State)

    def first(state: State) -> dict[str, Any]:
        drain()
        return {"log": ["first"]}

    b.add_node("first", first)
    b.add_node("second", lambda s: {"log": ["second"]})
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    b.add_edge("second", END)
    with pytest.raises(GraphDrained) as caught:
        b.compile().invoke({"log": []})
    assert caught.value.reason == DRAIN_REASON


def test_a_run_started_in_a_node_gets_the_outer_runs_control_unless_given_its_own() -> None:
    # LangGraph hands a run started inside a node the outer run's `RunControl`: a drain asked
    # there would stop the outer run. `own_control` gives it one that only follows the outer's.
    outer = RunControl()
    seen: dict[str, Any] = {}

    def inner_node(state: State) -> dict[str, Any]:
        seen["inner"] = get_runtime().control
        return {"log": ["inner"]}

    inner = StateGraph(State).add_node("n", inner_node).add_edge(START, "n").compile()

    def node(state: State) -> dict[str, Any]:
        inner.invoke({"log": []})
        shared = seen.pop("inner")
        own = own_control(None)
        assert own is not None
        inner.invoke({"log": []}, control=own)
        seen.update(shared=shared, own=own, got=seen.pop("inner"))
        own.request_drain("ours")
        return {"log": ["outer"]}

    b = StateGraph(State).add_node("n", node).add_edge(START, "n")
    assert b.compile().invoke({"log": []}, control=outer)["log"] == ["outer"]
    assert seen["shared"] is outer  # what LangGraph does: the outer run's own control
    assert seen["got"] is seen["own"]  # a control given to the inner run is the one it uses
    assert not outer.drain_requested  # the inner run's drain stayed its own
    follower = seen["own"].__class__(outer)
    outer.request_drain("shutdown")
    assert follower.drain_requested and follower.drain_reason == "shutdown"
    assert own_control(None) is None  # not inside a run
    given = RunControl()
    assert own_control(given) is given


def test_node_attempt_counts_langgraph_retries() -> None:
    seen: list[int] = []

    def flaky(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(node_attempt())
        assert node_attempt(config) == seen[-1]  # read as with_deadlines reads it
        if len(seen) < 2:
            raise ConnectionError("first attempt fails")
        return {"log": ["ok"]}

    b = StateGraph(State)
    b.add_node("flaky", flaky, retry_policy=RetryPolicy(initial_interval=0.01, jitter=False))
    b.add_edge(START, "flaky")
    b.add_edge("flaky", END)
    b.compile().invoke({"log": []})
    assert seen == [1, 2]
    assert node_attempt() == 1  # outside a run
    assert node_attempt({}) == 1


class _Chat(DeadlineState):
    messages: Annotated[list[Any], operator.add]


def test_sub_graphs_inside_budgeted_nodes_are_still_found() -> None:
    inner = StateGraph(_Chat)
    inner.add_node("say", lambda s: {"messages": [AIMessage("hi")]})
    inner.add_edge(START, "say")
    sub = inner.compile()

    outer = StateGraph(_Chat)
    outer.add_node("sub", sub)
    outer.add_edge(START, "sub")
    bare = outer.compile(checkpointer=InMemorySaver())
    wrapped = with_deadlines(bare, timeout=5.0)
    assert [name for name, _ in wrapped.get_subgraphs()] == [
        name for name, _ in bare.get_subgraphs()
    ]
    assert [name for name, _ in wrapped.get_subgraphs()] == ["sub"]


def test_a_tasks_writer_writes_to_the_state_beside_what_the_node_returns() -> None:
    from langgraph._internal._constants import CONFIG_KEY_SEND

    assert CONFIG_KEY_SEND == seams._SEND_KEY

    def node(state: State, config: RunnableConfig) -> dict[str, Any]:
        writer = seams.task_writer(config)
        assert writer is not None
        writer([("log", ["written"])])
        return {"log": ["returned"]}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    out = builder.compile().invoke({"log": []})
    assert sorted(out["log"]) == ["returned", "written"]
    assert seams.task_writer(None) is None


def test_a_nodes_reader_reads_its_graphs_state_as_the_values_stream_shows_it() -> None:
    """`GraphRun.latest` under `ainvoke` (`state_reader`): what a node reads, later, is the
    state the graph's `values` stream showed last, not the node's own writes."""
    from langgraph._internal._constants import CONFIG_KEY_READ

    assert CONFIG_KEY_READ == seams._READ_KEY
    readers: list[Any] = []

    def first(state: State, config: RunnableConfig) -> dict[str, Any]:
        readers.append(seams.state_reader(config, ["log"]))
        return {"log": ["first"]}

    builder = StateGraph(State).add_sequence(
        [("first", first), ("second", lambda s: {"log": ["second"]})]
    )
    builder.add_edge(START, "first")
    graph = builder.compile()
    shown: list[Any] = []
    for chunk in graph.stream({"log": ["in"]}, stream_mode="values"):
        shown.append(chunk)
        assert readers == [] or readers[0]() == chunk  # read now: as the stream shows it now
    assert readers[0]() == shown[-1] == {"log": ["in", "first", "second"]}
    assert seams.state_reader({}, ["log"]) is None


def test_each_node_of_the_graph_gives_the_run_its_reader_and_a_sub_graphs_node_does_not() -> None:
    """`state_reader(config, select, held)`: a later node of the same graph replaces the held
    reader (the finished node's task, its writes and its scratchpad, can then go), a node of a
    sub-graph (other channels) keeps it: what the run reads stays its own graph's state."""
    held: list[Any] = []

    def reader_of(name: str) -> Any:
        def node(state: State, config: RunnableConfig) -> dict[str, Any]:
            held.append(seams.state_reader(config, ["log"], held[-1] if held else None))
            return {"log": [name]}

        return node

    inner = StateGraph(State).add_node("inner", reader_of("inner"))
    inner.add_edge(START, "inner")
    outer = StateGraph(State).add_sequence(
        [("first", reader_of("first")), ("sub", inner.compile()), ("last", reader_of("last"))]
    )
    outer.add_edge(START, "first")
    out = outer.compile().invoke({"log": ["in"]})
    first, in_sub, last = held
    assert in_sub is first  # the sub-graph's node: the outer graph's reader, kept
    assert last is not first  # the next node of the graph: its own
    assert last() == out  # ... reading the graph's state, as the first one would
    assert first() == out


@pytest.mark.anyio
async def test_a_waiting_run_holds_no_task_of_the_nodes_that_finished() -> None:
    """While a run waits in its second node, nothing of its first node's task (its writes) is
    held: the run's reader of its graph's state is the running node's."""
    import asyncio
    import gc

    from langgraph.pregel._algo import PregelTaskWrites

    gate, inside = asyncio.Event(), asyncio.Event()

    async def wait(state: State) -> dict[str, Any]:
        inside.set()
        await gate.wait()
        return {"log": ["waited"]}

    builder = StateGraph(State).add_sequence(
        [("done", lambda s: {"log": ["done"]}), ("waiting", wait)]
    )
    builder.add_edge(START, "done")
    graph = with_deadlines(builder, timeout=60.0)
    run = asyncio.ensure_future(graph.ainvoke({"log": []}))
    await inside.wait()
    gc.collect()
    held = [o for o in gc.get_objects() if isinstance(o, PregelTaskWrites) and o.name == "done"]
    gate.set()
    assert (await run)["log"] == ["done", "waited"]
    assert held == []


# -- the Functional API --------------------------------------------------------------------------


def test_a_task_call_is_scheduled_through_the_callable_in_the_callers_config() -> None:
    from langgraph._internal._constants import CONFIG_KEY_CALL
    from langgraph._internal._constants import PREVIOUS as LANGGRAPH_PREVIOUS
    from langgraph.config import get_config
    from langgraph.func import entrypoint, task

    assert CONFIG_KEY_CALL == seams._CALL_KEY
    assert LANGGRAPH_PREVIOUS == PREVIOUS
    seen: list[Any] = []

    def spy(schedule: Any) -> Any:
        def spying(func: Any, input: Any, **options: Any) -> Any:
            seen.append((func, input, sorted(options)))
            return schedule(func, input, **options)

        return spying

    @task
    def double(x: int) -> int:
        return 2 * x

    @entrypoint()
    def main(x: int) -> int:
        with scheduling_with(get_config(), spy) as config:
            assert get_config() is config
            return int(double(x).result())

    assert PREVIOUS in main.channels
    assert main.invoke(3) == 6
    options = ["cache_policy", "callbacks", "retry_policy", "timeout"]
    assert seen == [(double.func, ((3,), {}), options)]


def _bodies() -> list[Any]:
    def plain(x: int, config: RunnableConfig) -> int:
        return x

    async def coro(x: int) -> int:
        return x

    class Callable_:
        def __call__(self, x: int, *, runtime: Any = None) -> int:
            return x

    class AsyncCallable:
        async def __call__(self, x: int) -> int:
            return x

    named = functools.partial(plain, 1)
    named.__name__ = "renamed"  # type: ignore[attr-defined]  # as task(name=...) does
    return [plain, coro, functools.partial(plain, 1), named, Callable_(), AsyncCallable()]


@pytest.mark.parametrize("body", _bodies())
def test_a_task_wrapper_is_the_same_task_for_langgraph(body: Any) -> None:
    from langgraph._internal._runnable import is_async_callable
    from langgraph.pregel._call import get_runnable_for_task, identifier

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return body(*args, **kwargs)

    as_task(wrapper, body)
    # The name makes task ids and checkpoint namespaces (a resume finds saved results by them),
    # the identifier cache keys, the signature what LangGraph injects.
    assert get_runnable_for_task(wrapper).name == get_runnable_for_task(body).name
    assert task_name(body) == get_runnable_for_task(body).name
    assert identifier(wrapper) == identifier(body)
    assert inspect.signature(wrapper) == inspect.signature(body)
    assert is_async_task(body) == is_async_callable(body)


def test_a_tool_node_copy_calls_its_own_tool_call_wrappers() -> None:
    """`tool_node.capped_per_call` copies a `ToolNode` and sets the wrappers its constructor
    takes (`wrap_tool_call`, `awrap_tool_call`), kept as `_wrap_tool_call`/`_awrap_tool_call`,
    and rebinds its bodies (`func`, `afunc`: bound methods) to the copy."""
    from langgraph_deadline._graph.tool_node import capped_per_call

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    node = ToolNode([echo])
    assert (node._wrap_tool_call, node._awrap_tool_call) == (None, None)
    assert node.func == node._func and node.afunc == node._afunc
    capped = capped_per_call(node, 1.0)
    assert capped.func.__self__ is capped and capped.afunc.__self__ is capped  # type: ignore[union-attr]
    assert node._wrap_tool_call is None  # the node given is left as it was
    assert capped._wrap_tool_call is not None and capped._awrap_tool_call is not None
    # ... and each call of the node goes through them (tests/conformance/test_tool_node_caps.py
    # shows it end to end).
    assert "self._wrap_tool_call(" in inspect.getsource(ToolNode._run_one)
    assert "self._awrap_tool_call(" in inspect.getsource(ToolNode._arun_one)
