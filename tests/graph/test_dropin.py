"""A true drop-in: a graph wrapped with a deadline nobody reaches is, in everything LangGraph
itself shows, the graph it was. Each test runs the same graph plain and wrapped and compares.
(LangGraph's own suite checks the same at scale: `make suite`, scripts/langgraph_suite.)"""

from __future__ import annotations

import dataclasses
import gc
import operator
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any
from unittest import mock

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.pregel._loop import SyncPregelLoop
from langgraph.types import Command
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_deadline import with_deadlines
from langgraph_deadline._core.plan import RUN_KEY

TIMEOUT = 600.0  # nobody reaches it: nothing may change


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        yield saver


def _both(builder: StateGraph[Any, Any, Any, Any], **compile: Any) -> tuple[Any, Any]:
    plain = builder.compile(**compile)
    return plain, with_deadlines(builder.compile(**compile), timeout=TIMEOUT)


@pytest.mark.parametrize("items", [["a", "b"], ["xy", "zw"], [("k", "v")]])
def test_a_list_states_command_update_passes_untouched(items: list[Any]) -> None:
    def node(state: list[Any]) -> Command[Any]:
        return Command(update=items)

    b = StateGraph(Annotated[list, operator.add])  # type: ignore[arg-type]
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    plain, wrapped = _both(b)
    assert wrapped.invoke(["in"]) == plain.invoke(["in"])
    if not isinstance(items[0], tuple):  # (LangGraph reads a list of pairs as keyed updates)
        assert plain.invoke(["in"]) == ["in", *items]


class Model(BaseModel):
    count: int = 0


@dataclasses.dataclass
class Data:
    count: int = 0


@pytest.mark.parametrize("schema", [Model, Data])
@pytest.mark.parametrize("given", ["builder", "compiled"])
def test_v2_outputs_keep_the_states_type(schema: type[Any], given: str) -> None:
    b = StateGraph(schema)
    b.add_node("add", lambda s: {"count": s.count + 1})
    b.add_edge(START, "add")
    b.add_edge("add", END)
    wrapped = with_deadlines(b if given == "builder" else b.compile(), timeout=TIMEOUT)
    out = wrapped.invoke(schema(count=1), version="v2")
    assert out.value == schema(count=2)
    values = [c["data"] for c in wrapped.stream(schema(), stream_mode="values", version="v2")]
    assert all(isinstance(v, schema) for v in values)


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def _two_steps() -> StateGraph[Any, Any, Any, Any]:
    steps = [("a", lambda s: {"log": ["a"]}), ("b", lambda s: {"log": ["b"]})]
    return StateGraph(Log).add_sequence(steps).add_edge(START, "a").add_edge("b", END)


def _plain_data(x: Any) -> Any:
    """`x` with the parts that differ between any two runs (ids, times) left out."""
    drop = {"checkpoint_id", "id", "ts", "timestamp", "task_id", "run_id", "thread_id"}
    if isinstance(x, dict):
        return {k: _plain_data(v) for k, v in x.items() if k not in drop}
    if isinstance(x, list | tuple):
        return [_plain_data(v) for v in x]
    return x if isinstance(x, str | int | float | bool | type(None)) else type(x).__name__


def test_checkpoints_and_debug_events_show_nothing_of_ours(sqlite: SqliteSaver) -> None:
    plain, wrapped = _both(_two_steps(), checkpointer=sqlite)
    seen = []
    for graph, thread in ((plain, "p"), (wrapped, "w")):
        cfg = {"configurable": {"thread_id": thread}}
        debug = list(graph.stream({"log": []}, cfg, stream_mode="debug"))
        history = [
            (s.values, s.metadata, s.config["configurable"].keys())
            for s in graph.get_state_history(cfg)
        ]
        saved = [
            (t.metadata, [w[1:] for w in t.pending_writes or ()], t.checkpoint["channel_values"])
            for t in sqlite.list(cfg)
        ]
        seen.append(_plain_data([debug, history, saved]))
        assert RUN_KEY not in repr(debug)
    assert seen[0] == seen[1]


def test_messages_mode_metadata_is_langgraphs_own() -> None:
    def talk(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("hi")]}

    b = StateGraph(MessagesState)
    b.add_node("talk", talk)
    b.add_edge(START, "talk")
    b.add_edge("talk", END)
    plain, wrapped = _both(b)
    metas = [
        [
            sorted(meta)
            for _, meta in g.stream({"messages": [HumanMessage("q")]}, stream_mode="messages")
        ]
        for g in (plain, wrapped)
    ]
    assert metas[0] == metas[1]


def test_get_graph_draws_the_users_graph() -> None:
    plain, wrapped = _both(_two_steps())
    assert wrapped.get_graph().to_json() == plain.get_graph().to_json()
    assert wrapped.get_graph().draw_mermaid() == plain.get_graph().draw_mermaid()


class Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.names.append(f"start:{kwargs.get('name')}")

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.names.append(f"custom:{name}")


@pytest.mark.anyio
async def test_runs_and_events_are_langgraphs_own() -> None:
    plain, wrapped = _both(_two_steps())
    seen = []
    for graph in (plain, wrapped):
        events = Events()
        await graph.ainvoke({"log": []}, {"callbacks": [events]})
        names = [
            (e["event"], e["name"]) async for e in graph.astream_events({"log": []}, version="v2")
        ]
        levels = [
            sorted(op["path"] for op in patch.ops if op["path"].startswith("/logs/"))
            async for patch in graph.astream_log({"log": []})
        ]
        seen.append((events.names, names, levels))
    assert seen[0] == seen[1]


def test_a_checkpointed_run_without_thread_id_gets_langgraphs_error() -> None:
    plain, wrapped = _both(_two_steps(), checkpointer=InMemorySaver())
    for graph in (plain, wrapped):
        with pytest.raises(ValueError, match="thread_id") as caught:
            graph.invoke({"log": []})
        assert type(caught.value) is ValueError


def test_nothing_of_a_run_is_kept_alive_after_it() -> None:
    wrapped = with_deadlines(_two_steps(), timeout=TIMEOUT)
    gc.collect()
    gc.disable()  # no collection may hide a reference: the objects must be freed at once
    try:
        for _ in range(3):
            wrapped.invoke({"log": []})
            assert [o for o in gc.get_objects() if isinstance(o, SyncPregelLoop)] == []
    finally:
        gc.enable()


def test_a_builder_with_a_default_error_handler_wraps_after_compile() -> None:
    def boom(state: Log) -> dict[str, Any]:
        raise ValueError("boom")

    def handle(state: Log) -> dict[str, Any]:
        return {"log": ["handled"]}

    def builder() -> StateGraph[Any, Any, Any, Any]:
        b = StateGraph(Log)
        b.add_node("boom", boom)
        b.add_edge(START, "boom")
        b.add_edge("boom", END)
        return b.set_node_defaults(error_handler=handle)

    plain = builder().compile()
    wrapped = with_deadlines(builder().compile(), timeout=TIMEOUT)
    assert wrapped.invoke({"log": []}) == plain.invoke({"log": []}) == {"log": ["handled"]}


def test_a_run_calls_uuid4_as_often_as_langgraph_does() -> None:
    plain, wrapped = _both(_two_steps())
    counts = []
    for graph in (plain, wrapped):
        with mock.patch("uuid.uuid4", side_effect=uuid.uuid4) as made:
            graph.invoke({"log": []})
        counts.append(made.call_count)
    assert counts[0] == counts[1]


def test_a_subgraph_draws_as_what_it_is() -> None:
    """The one intended difference LangGraph's suite shows (its allowlist): a subgraph the user
    wrapped too is drawn as what it is, a `DeadlineGraph`; one left plain, as LangGraph's."""

    def parent(child: Any) -> Any:
        b = StateGraph(Log)
        b.add_node("child", child)
        b.add_edge(START, "child")
        b.add_edge("child", END)
        return with_deadlines(b, timeout=TIMEOUT)

    def ids(graph: Any) -> list[Any]:
        nodes = graph.get_graph().to_json()["nodes"]
        return [n["data"]["id"][-1] for n in nodes if isinstance(n.get("data"), dict)]

    assert "CompiledStateGraph" in ids(parent(_two_steps().compile()))
    assert "DeadlineGraph" in ids(parent(with_deadlines(_two_steps(), timeout=TIMEOUT)))
