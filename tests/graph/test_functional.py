"""The Functional API under one deadline: `with_deadlines(@entrypoint)`, each `@task` call a
budgeted step, on real entrypoints (in memory and SQLite checkpointers)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.pregel import Pregel

from langgraph_deadline import (
    DeadlineEntrypoint,
    with_deadlines,
)

MARGIN = 0.5  # generous: a loaded 2-core machine


@task
def double(x: int) -> int:
    return 2 * x


@task
async def adouble(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


@entrypoint()
def sync_main(xs: list[int]) -> dict[str, Any]:
    return {"doubled": [f.result() for f in [double(x) for x in xs]], "n": len(xs)}


@entrypoint()
async def async_main(xs: list[int]) -> dict[str, Any]:
    futures = [adouble(x) for x in xs]
    return {"doubled": [await f for f in futures], "n": len(xs)}


def _cfg(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


# -- a plain run is LangGraph's own ---------------------------------------------------------------


def test_with_deadlines_accepts_an_entrypoint() -> None:
    graph = with_deadlines(sync_main, timeout=5.0)
    assert isinstance(graph, DeadlineEntrypoint)
    assert isinstance(graph, Pregel)
    assert graph.deadline_settings.timeout == 5.0
    assert graph.nodes.keys() == sync_main.nodes.keys()


def test_a_sync_entrypoint_with_time_to_spare_returns_what_it_returns_bare() -> None:
    graph = with_deadlines(sync_main, timeout=5.0)
    out = graph.invoke([1, 2, 3])
    assert out == sync_main.invoke([1, 2, 3]) == {"doubled": [2, 4, 6], "n": 3}
    assert type(out) is dict
    assert list(graph.stream([1, 2])) == list(sync_main.stream([1, 2]))
    modes = ["updates", "values", "custom"]
    assert list(graph.stream([1], stream_mode=modes)) == list(
        sync_main.stream([1], stream_mode=modes)
    )


@pytest.mark.anyio
async def test_an_async_entrypoint_with_time_to_spare_returns_what_it_returns_bare() -> None:
    graph = with_deadlines(async_main, timeout=5.0)
    out = await graph.ainvoke([1, 2, 3])
    assert out == await async_main.ainvoke([1, 2, 3]) == {"doubled": [2, 4, 6], "n": 3}
    bare = [c async for c in async_main.astream([1, 2])]
    assert [c async for c in graph.astream([1, 2])] == bare
    assert bare[-1] == {"async_main": {"doubled": [2, 4], "n": 2}}


@pytest.mark.anyio
async def test_a_sync_entrypoint_under_ainvoke_returns_what_it_returns_bare() -> None:
    graph = with_deadlines(sync_main, timeout=5.0)
    assert await graph.ainvoke([4]) == await sync_main.ainvoke([4]) == {"doubled": [8], "n": 1}
    assert [c async for c in graph.astream([4])] == [c async for c in sync_main.astream([4])]


def test_any_value_comes_back_as_it_is() -> None:
    @entrypoint()
    def echo(value: Any) -> Any:
        return value

    graph = with_deadlines(echo, timeout=5.0)
    # A dict with the deadline fields' names is the user's: never read as the run's deadline.
    mine = {"deadline": "tomorrow", "deadline_outcome": "fine"}
    for value in (3, "s", (1, 2), [1], mine):
        got = graph.invoke(value)
        assert got == value and type(got) is type(value)


def test_a_checkpointed_entrypoint_keeps_previous_and_returns_final_values() -> None:
    @entrypoint(checkpointer=InMemorySaver())
    def counter(step: int, *, previous: int | None = None) -> entrypoint.final[int, int]:
        total = (previous or 0) + double(step).result()
        return entrypoint.final(value=total * 10, save=total)

    graph = with_deadlines(counter, timeout=5.0)
    assert graph.checkpointer is counter.checkpointer
    assert graph.invoke(1, _cfg()) == 20
    assert graph.invoke(2, _cfg()) == 60
    assert graph.get_state(_cfg()).values == 60  # what LangGraph shows: the last return


def test_what_is_not_a_graph_or_an_entrypoint_is_refused() -> None:
    with pytest.raises(TypeError, match="@entrypoint"):
        with_deadlines(object())  # type: ignore[call-overload]
