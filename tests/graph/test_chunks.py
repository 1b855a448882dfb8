"""Reading a run's stream (the latest full state, an interrupt) and ending it in its own format."""

from __future__ import annotations

import asyncio
import contextlib
import operator
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, Overwrite
from typing_extensions import TypedDict

from langgraph_deadline import Deadline, DeadlineState, with_deadlines
from langgraph_deadline._graph.chunks import GraphRun, closing_chunks, deadline_given


class Steps(TypedDict):
    log: Annotated[list[str], operator.add]


@pytest.mark.parametrize(
    ("mode", "chunk"),
    [
        ("values", {"n": 1}),
        (["updates", "values"], ("values", {"n": 1})),
        (["values"], ((), "values", {"n": 1})),
        ("values", {"type": "values", "ns": (), "data": {"n": 1}}),
    ],
)
def test_the_latest_full_state_is_kept_from_every_stream_format(mode: Any, chunk: Any) -> None:
    run = GraphRun(deadline=None)
    run.note(chunk, mode)
    assert run.latest == {"n": 1}


def test_an_interrupt_in_the_stream_is_noticed_and_subgraph_values_are_not_the_state() -> None:
    run = GraphRun(deadline=None)
    run.note(("updates", {"__interrupt__": ()}), ["updates", "values"])
    assert run.interrupted
    run.note((("sub",), "values", {"inner": 1}), ["values"])
    assert run.latest is None


def test_the_deadline_a_runs_input_gives() -> None:
    d = Deadline.after(5)
    given = deadline_given({"deadline": d.timestamp})
    assert given is not None and given.timestamp == d.timestamp
    command = deadline_given(Command(update={"deadline": Overwrite(d.timestamp)}))
    assert command is not None and command.timestamp == d.timestamp
    assert deadline_given({"other": 1}) is None
    assert deadline_given(None) is None


@pytest.mark.parametrize(
    ("mode", "subgraphs", "version", "expected"),
    [
        ("values", False, "v1", [{"deadline_outcome": "o", "x": 1}]),
        (["updates", "values"], False, "v1", ["updates", "values"]),
        (["values"], True, "v1", [((), "values", {"deadline_outcome": "o", "x": 1})]),
        (["values"], False, "v1", [("values", {"deadline_outcome": "o", "x": 1})]),
        ("values", True, "v1", [((), {"deadline_outcome": "o", "x": 1})]),
        ("values", False, "v2", ["values"]),
        ("messages", False, "v1", []),
    ],
)
def test_closing_chunks_follow_the_callers_stream_format(
    mode: Any, subgraphs: bool, version: str, expected: list[Any]
) -> None:
    chunks = closing_chunks(
        {"deadline_outcome": "o", "x": 1}, "step", mode, subgraphs=subgraphs, version=version
    )
    if expected and isinstance(expected[0], str):
        kinds = [c["type"] if isinstance(c, dict) and "type" in c else c[0] for c in chunks]
        assert kinds == expected
    else:
        assert chunks == expected


@pytest.mark.anyio
async def test_the_stream_under_ainvoke_is_noted_and_closes_for_a_reader_that_closes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ainvoke` reads the run's stream through LangGraph's `ainvoke`, as a `NotedStream`. A
    LangGraph that reads it in an `aclosing` block and stops early must close the stream under
    it: no node runs after that."""
    ran: list[str] = []

    def node(name: str) -> Any:
        async def body(state: Steps) -> dict[str, Any]:
            ran.append(name)
            await asyncio.sleep(0)
            return {"log": [name]}

        return body

    b = StateGraph(Steps).add_sequence([(name, node(name)) for name in ("a", "b", "c")])
    b.add_edge(START, "a")
    b.add_edge("c", END)
    graph = with_deadlines(b, timeout=10.0)
    seen: list[Any] = []

    async def closing_reader(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        stream = self.astream(input, config, stream_mode="values")
        async with contextlib.aclosing(stream) as chunks:
            async for chunk in chunks:
                seen.append((type(stream).__name__, chunk))
                if len(seen) == 2:  # the input, then a's update: stop reading
                    break
        return seen[-1][1]

    monkeypatch.setattr(Pregel, "ainvoke", closing_reader)
    out = await graph.ainvoke({"log": []})
    await asyncio.sleep(0.05)
    assert [kind for kind, _ in seen] == ["NotedStream", "NotedStream"]
    assert out["log"] == ["a"] and ran == ["a"]  # b and c never ran: the stream was closed


class TimedSteps(Steps, DeadlineState, total=False):
    pass


def _writer(delay: float) -> StateGraph[Any, Any, Any, Any]:
    async def plan(state: TimedSteps) -> dict[str, Any]:
        return {"log": ["plan"]}

    async def write(state: TimedSteps) -> dict[str, Any]:
        await asyncio.sleep(delay)
        return {"log": ["write"]}

    b = StateGraph(TimedSteps)
    b.add_node("plan", plan)
    b.add_node("write", write)
    b.add_edge(START, "plan")
    b.add_edge("plan", "write")
    b.add_edge("write", END)
    return b


def _shape(chunk: Any) -> tuple[Any, ...]:
    """What a consumer unpacks: a tuple's length and its string tags, or "payload"."""
    if not isinstance(chunk, tuple):
        return ("payload",)
    return (len(chunk), *(c for c in chunk if isinstance(c, str)))


@pytest.mark.anyio
@pytest.mark.parametrize("modes", [["updates"], ["values"], ["updates", "values"], "updates"])
@pytest.mark.parametrize("subgraphs", [False, True])
async def test_a_stream_that_ran_out_ends_in_langgraphs_own_chunk_shapes(
    modes: Any, subgraphs: bool
) -> None:
    """A run cut at its deadline ends its stream with chunks shaped as LangGraph shapes that
    stream's: a list of modes, even of one, tags every chunk with its mode (`for mode, chunk in
    graph.astream(..., stream_mode=["updates"])` must not break on the last one)."""
    options: dict[str, Any] = {"stream_mode": modes, "subgraphs": subgraphs}
    bare = {_shape(c) async for c in _writer(0.0).compile().astream({"log": []}, **options)}
    graph = with_deadlines(_writer(10.0), timeout=0.3)
    ours = [_shape(c) async for c in graph.astream({"log": []}, **options)]
    assert ours and set(ours) <= bare, (ours, bare)


@pytest.mark.anyio
async def test_under_ainvoke_the_state_is_read_from_the_graph_once_a_node_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under `ainvoke` the run's first node gives it the reader of its graph's state: the
    stream's later chunks pass without a note, and a run cut at its deadline without a
    checkpointer still returns the state its last finished step left (`plan` done, `write`
    cut), read from the graph."""
    from langgraph_deadline._graph import chunks

    noted: list[Any] = []
    note = chunks.GraphRun.note
    monkeypatch.setattr(chunks.GraphRun, "note", lambda r, c, m: (noted.append(c), note(r, c, m)))
    steps = [(f"s{i}", _step(f"s{i}")) for i in range(6)]
    b = StateGraph(TimedSteps).add_sequence(steps)
    b.add_edge(START, "s0")
    b.add_edge("s5", END)
    out = await with_deadlines(b, timeout=10.0).ainvoke({"log": []})
    assert out["log"] == [f"s{i}" for i in range(6)]
    assert out["deadline_outcome"].ok
    assert 1 <= len(noted) <= 2  # the input's values (and the first step's, on its way)

    noted.clear()
    cut = await with_deadlines(_writer(5.0), timeout=0.4).ainvoke({"log": []})
    assert cut["log"] == ["plan"]
    assert cut["deadline_outcome"].terminal == "deadline_exceeded"
    assert cut["deadline_outcome"].step == "write"
    assert len(noted) <= 2


def _step(name: str) -> Any:
    async def body(state: TimedSteps) -> dict[str, Any]:
        return {"log": [name]}

    return body
