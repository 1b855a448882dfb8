"""The Functional API under one deadline: `with_deadlines(@entrypoint)`, each `@task` call a
budgeted step, on real entrypoints (in memory and SQLite checkpointers)."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.errors import NodeTimeoutError
from langgraph.func import entrypoint, task
from langgraph.pregel import Pregel
from langgraph.types import CachePolicy, Command, RetryPolicy, interrupt

from langgraph_deadline import (
    DeadlineExceeded,
    StepRecord,
    Terminal,
    deadline_input,
    deadline_scope,
    terminal_of,
    with_deadlines,
)
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import DeadlineEntrypoint, StepStatus

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
    ours, bare = list(graph.stream([1, 2])), list(sync_main.stream([1, 2]))
    assert ours[-1] == bare[-1] == {"sync_main": {"doubled": [2, 4], "n": 2}}
    assert sorted(map(repr, ours)) == sorted(map(repr, bare))  # parallel tasks: any order
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
    ours = [c async for c in graph.astream([1, 2])]
    assert sorted(map(repr, ours)) == sorted(map(repr, bare))  # parallel tasks: any order
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


# -- each task call is a step under the run's deadline ---------------------------------------------


def _fetching(slow_server: SlowServer) -> Any:
    """An entrypoint whose `@task` fetches from `slow_server` (`/slow?delay=`), 0.6 s to run."""

    @task
    async def fetch(delay: float) -> str:
        async with httpx.AsyncClient() as client:
            return (await client.get(slow_server.url(f"/slow?delay={delay}"))).text

    @entrypoint()
    async def main(delay: float) -> str:
        return await fetch(delay)

    return with_deadlines(main, timeout=0.6)


@pytest.mark.anyio
async def test_a_hanging_async_task_is_cut_and_its_socket_closed(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    graph = _fetching(slow_server)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke(5.0)
    assert time.monotonic() - t0 < 0.6 + MARGIN
    assert caught.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert caught.value.outcome.step == "fetch"
    assert caught.value.state is None  # an entrypoint has no state
    assert slow_server.wait_disconnected(2.0), "the server never saw the client go away"
    assert [(r.name, r.kind, r.status) for r in steps if r.name == "fetch"] == [
        ("fetch", "node", StepStatus.TIMED_OUT)
    ]


@pytest.mark.anyio
async def test_on_a_busy_loop_the_outcome_still_names_the_task_where_the_time_ran_out(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # The loop is held across the deadline: the task's cut (a hand-off before its
    # entrypoint's) and the entrypoint's are due together, and the entrypoint's is handled first.
    graph = _fetching(slow_server)

    async def hold_the_loop() -> None:
        await anyio.sleep(0.45)
        time.sleep(0.3)  # noqa: ASYNC251  (holds the loop over both cuts)

    holding = asyncio.ensure_future(hold_the_loop())
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke(5.0)
    await holding
    assert caught.value.outcome is not None
    assert caught.value.outcome.step == "fetch"
    assert "fetch" in caught.value.outcome.reason
    assert slow_server.wait_disconnected(2.0), "the server never saw the client go away"
    assert [(r.name, r.kind, r.status) for r in steps if r.name == "fetch"] == [
        ("fetch", "node", StepStatus.TIMED_OUT)
    ]


def test_a_blocking_sync_task_is_abandoned_and_the_run_returns_on_time(
    steps: list[StepRecord],
) -> None:
    release = threading.Event()

    @task
    def block() -> str:
        release.wait(5.0)
        return "late"

    @entrypoint()
    def main(_: Any) -> str:
        return str(block().result())

    graph = with_deadlines(main, timeout=0.5)
    t0 = time.monotonic()
    try:
        with pytest.raises(DeadlineExceeded) as caught:
            graph.invoke(0)
        assert time.monotonic() - t0 < 0.5 + MARGIN
    finally:
        release.set()
    assert caught.value.outcome.step == "block"
    cut = [r for r in steps if r.name == "block"]
    assert [r.status for r in cut] == [StepStatus.ABANDONED]


@pytest.mark.anyio
async def test_a_task_gets_its_cap_and_the_entrypoint_the_runs_deadline(
    steps: list[StepRecord],
) -> None:
    @task
    async def slow() -> None:
        await asyncio.sleep(5)

    @entrypoint()
    async def main(_: int) -> None:
        await slow()

    graph = with_deadlines(main, timeout=5.0, caps={"slow": 0.3})
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="slow"):
        await graph.ainvoke(0)
    assert time.monotonic() - t0 < 0.3 + MARGIN
    [record] = [r for r in steps if r.name == "slow"]
    assert record.status is StepStatus.TIMED_OUT
    assert record.requested_ms == record.allocated_ms == 300.0
    assert not record.clamped


@pytest.mark.anyio
async def test_default_cap_bounds_the_tasks_not_the_entrypoint(steps: list[StepRecord]) -> None:
    @task
    async def quick(x: int) -> int:
        await asyncio.sleep(0.01)
        return x

    @entrypoint()
    async def main(n: int) -> int:
        total = 0
        for i in range(n):  # the whole entrypoint takes longer than default_cap
            total += await quick(i)
            await asyncio.sleep(0.1)
        return total

    graph = with_deadlines(main, timeout=5.0, default_cap=0.2)
    assert await graph.ainvoke(4) == 6
    caps = {r.name: r.requested_ms for r in steps}
    assert caps == {"quick": 200.0, "main": None}


@pytest.mark.anyio
async def test_a_task_below_its_min_viable_does_not_start(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    @task
    async def fetch() -> str:
        async with httpx.AsyncClient() as client:
            return (await client.get(slow_server.url("/slow?delay=0"))).text

    @entrypoint()
    async def main(_: int) -> str:
        await asyncio.sleep(0.3)  # spends the run's time before the task
        return await fetch()

    graph = with_deadlines(main, timeout=0.6, min_viable={"fetch": 0.5})
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke(0)
    assert caught.value.outcome.step == "fetch"
    assert slow_server.requests == []  # no request made
    assert [r.status for r in steps if r.name == "fetch"] == [StepStatus.SKIPPED]


@pytest.mark.anyio
async def test_parallel_tasks_share_the_deadline_and_the_finished_ones_keep_their_results(
    steps: list[StepRecord],
) -> None:
    calls: list[str] = []
    hangs = {"b"}

    @task
    async def fetch(name: str) -> str:
        calls.append(name)
        await asyncio.sleep(5 if name in hangs else 0.05)
        return name.upper()

    @entrypoint(checkpointer=InMemorySaver())
    async def main(names: list[str]) -> list[str]:
        futures = [fetch(n) for n in names]
        return [await f for f in futures]

    graph = with_deadlines(main, timeout=0.6)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await graph.ainvoke(["a", "b", "c"], _cfg())
    assert time.monotonic() - t0 < 0.6 + MARGIN
    statuses = sorted(r.status.value for r in steps if r.name == "fetch")
    assert statuses == ["completed", "completed", "timed_out"]
    # Granting time runs the cut task only: the others' results come from the checkpoint.
    calls.clear()
    hangs.clear()
    out = await graph.ainvoke(Command(update=deadline_input(10.0)), _cfg())
    assert calls == ["b"] and out == ["A", "B", "C"]


# -- checkpoints: a cut task stays unfinished, a resume keeps the run's deadline -------------------


@pytest.fixture
def sqlite_saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        yield saver


def test_a_cut_sync_task_is_not_saved_as_finished_and_a_grant_reruns_only_it(
    sqlite_saver: SqliteSaver, steps: list[StepRecord]
) -> None:
    calls: list[str] = []
    release = threading.Event()
    blocks = {"b"}

    @task
    def work(name: str) -> str:
        calls.append(name)
        if name in blocks:
            release.wait(5.0)
        return name.upper()

    @entrypoint(checkpointer=sqlite_saver)
    def main(names: list[str]) -> list[str]:
        futures = [work(n) for n in names]
        return [f.result() for f in futures]

    graph = with_deadlines(main, timeout=0.6)
    t0 = time.monotonic()
    try:
        with pytest.raises(DeadlineExceeded) as caught:
            graph.invoke(["a", "b", "c"], _cfg())
        assert time.monotonic() - t0 < 0.6 + MARGIN
    finally:
        blocks.clear()
        release.set()  # the abandoned thread ends now; its late result is saved nowhere
    assert caught.value.outcome.step == "work"
    statuses = sorted(r.status.value for r in steps if r.name == "work")
    assert statuses == ["abandoned", "completed", "completed"]
    assert graph.get_state(_cfg()).next == ("main",)  # the run is not finished

    calls.clear()
    assert graph.invoke(Command(update=deadline_input(5.0)), _cfg()) == ["A", "B", "C"]
    assert calls == ["b"]
    assert graph.get_state(_cfg()).next == ()


def _ask_between(calls: list[str], saver: Any) -> Any:
    """An entrypoint that runs a task, asks a human, then runs a task named by the answer (an
    answer "hang" hangs)."""

    @task
    async def work(name: str) -> str:
        calls.append(name)
        await asyncio.sleep(5 if name == "hang" else 0)
        return name.upper()

    @entrypoint(checkpointer=saver)
    async def main(first: str) -> list[str]:
        done = await work(first)
        answer = interrupt("go on?")
        return [done, await work(answer)]

    return main


@pytest.mark.anyio
async def test_a_resume_keeps_the_first_runs_deadline(tmp_path: Path) -> None:
    calls: list[str] = []
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        graph = with_deadlines(_ask_between(calls, saver), timeout=0.6)
        t0 = time.monotonic()
        paused = await graph.ainvoke("a", _cfg())
        assert "__interrupt__" in paused
        with pytest.raises(DeadlineExceeded) as caught:
            await graph.ainvoke(Command(resume="hang"), _cfg())
        assert time.monotonic() - t0 < 0.6 + MARGIN  # the first run's 0.6 s, not a fresh one
        assert caught.value.outcome.step == "work"
        assert calls == ["a", "hang"]  # the first task's result came from the checkpoint


@pytest.mark.anyio
async def test_a_resume_after_the_deadline_does_not_start_and_a_grant_goes_on(
    tmp_path: Path,
) -> None:
    calls: list[str] = []
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "c.db")) as saver:
        graph = with_deadlines(_ask_between(calls, saver), timeout=0.6)
        await graph.ainvoke("a", _cfg())
        await asyncio.sleep(0.7)
        with pytest.raises(DeadlineExceeded, match="resumed after") as caught:
            await graph.ainvoke(Command(resume="b"), _cfg())
        assert caught.value.outcome.step == "main"
        assert calls == ["a"]  # nothing was run
        assert (await graph.aget_state(_cfg())).next == ("main",)  # still paused

        out = await graph.ainvoke(Command(resume="b", update=deadline_input(5.0)), _cfg())
        assert out == ["A", "B"]
        assert calls == ["a", "b"]


def test_a_sync_resume_after_the_deadline_does_not_start(sqlite_saver: SqliteSaver) -> None:
    calls: list[str] = []

    @task
    def work(name: str) -> str:
        calls.append(name)
        return name

    @entrypoint(checkpointer=sqlite_saver)
    def main(first: str) -> list[str]:
        return [work(first).result(), work(interrupt("go on?")).result()]

    graph = with_deadlines(main, timeout=0.6)
    assert "__interrupt__" in graph.invoke("a", _cfg())
    time.sleep(0.7)
    with pytest.raises(DeadlineExceeded, match="resumed after"):
        graph.invoke(Command(resume="b"), _cfg())
    with pytest.raises(DeadlineExceeded, match="resumed after"):
        next(iter(graph.stream(Command(resume="b"), _cfg())))
    assert calls == ["a"]


@pytest.mark.anyio
async def test_an_interrupt_inside_a_task_pauses_the_run() -> None:
    @task
    async def ask() -> str:
        return str(interrupt("name?"))

    @entrypoint(checkpointer=InMemorySaver())
    async def main(_: int) -> str:
        return "hello " + await ask()

    graph = with_deadlines(main, timeout=5.0)
    paused = await graph.ainvoke(0, _cfg())
    assert "__interrupt__" in paused
    assert await graph.ainvoke(Command(resume="Ada"), _cfg()) == "hello Ada"


# -- the entrypoint is a step too; tasks keep what LangGraph gives them ---------------------------


@pytest.mark.anyio
async def test_the_entrypoint_itself_is_cut_at_the_runs_deadline(steps: list[StepRecord]) -> None:
    @entrypoint()
    async def main(delay: float) -> float:
        await asyncio.sleep(delay)  # no task: the entrypoint's own body runs out
        return delay

    graph = with_deadlines(main, timeout=0.3)
    for run in (graph.ainvoke(5.0), _last(graph.astream(5.0))):
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded) as caught:
            await run
        assert time.monotonic() - t0 < 0.3 + MARGIN
        assert caught.value.outcome.step == "main"
    assert [r.status for r in steps] == [StepStatus.TIMED_OUT, StepStatus.TIMED_OUT]


async def _last(stream: Any) -> Any:
    return [chunk async for chunk in stream][-1]


def test_a_sync_stream_ends_with_deadline_exceeded_after_the_finished_tasks_chunks() -> None:
    release = threading.Event()

    @task
    def work(name: str) -> str:
        if name == "slow":
            release.wait(5.0)
        return name

    @entrypoint()
    def main(names: list[str]) -> list[str]:
        return [work(n).result() for n in names]

    graph = with_deadlines(main, timeout=0.4)
    chunks: list[Any] = []
    try:
        with pytest.raises(DeadlineExceeded) as caught:
            chunks.extend(_noted(graph.stream(["a", "slow"]), chunks))
    finally:
        release.set()
    assert chunks == [{"work": "a"}]
    assert caught.value.outcome.step == "work"


def _noted(stream: Iterator[Any], chunks: list[Any]) -> list[Any]:
    for chunk in stream:
        chunks.append(chunk)  # kept as they come: the stream ends by raising
    return []


@pytest.mark.anyio
async def test_tasks_called_by_tasks_are_budgeted_too(steps: list[StepRecord]) -> None:
    @task
    async def inner(delay: float) -> float:
        await asyncio.sleep(delay)
        return delay

    @task
    async def outer(delay: float) -> float:
        return await inner(delay)

    @entrypoint()
    async def main(delay: float) -> float:
        return await outer(delay)

    graph = with_deadlines(main, timeout=5.0, caps={"inner": 0.2})
    assert await graph.ainvoke(0.01) == 0.01
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke(5.0)
    assert caught.value.outcome.step == "inner"
    # inner is cut at its cap; outer, which did not catch its DeadlineExceeded, failed with it
    assert [(r.name, r.status.value) for r in steps][-2:] == [
        ("inner", "timed_out"),
        ("outer", "failed"),
    ]


@pytest.mark.anyio
async def test_a_tasks_retry_that_cannot_fit_is_not_waited_for(steps: list[StepRecord]) -> None:
    attempts: list[int] = []
    policy = RetryPolicy(
        max_attempts=50, initial_interval=0.2, backoff_factor=1.0, jitter=False, retry_on=ValueError
    )

    @task(retry_policy=policy)
    async def flaky() -> None:
        attempts.append(1)
        await asyncio.sleep(0.1)
        raise ValueError("upstream down")

    @entrypoint()
    async def main(_: int) -> None:
        await flaky()

    graph = with_deadlines(main, timeout=1.0, min_viable={"flaky": 0.1})
    with pytest.raises(DeadlineExceeded, match="retry would not fit"):
        await graph.ainvoke(0)
    assert 2 <= len(attempts) <= 4  # never 50
    assert [r.attempt for r in steps if r.name == "flaky"] == list(range(1, len(attempts) + 1))


@pytest.mark.anyio
async def test_a_named_task_is_budgeted_by_its_name_and_cached_as_it_is_bare() -> None:
    calls: list[int] = []

    async def body(x: int) -> int:
        calls.append(x)
        await asyncio.sleep(x)
        return x

    renamed = task(name="lookup", cache_policy=CachePolicy())(body)

    @entrypoint(cache=InMemoryCache())
    async def main(x: int) -> list[int]:
        return [await renamed(x), await renamed(x)]

    graph = with_deadlines(main, timeout=5.0, caps={"lookup": 0.2})
    assert await graph.ainvoke(0) == [0, 0]
    assert await main.ainvoke(0) == [0, 0]  # the same cache entry, bare or wrapped
    assert calls == [0]
    with pytest.raises(DeadlineExceeded, match="lookup"):
        await graph.ainvoke(1)


@pytest.mark.anyio
async def test_a_caller_that_cancels_gets_its_cancellation(steps: list[StepRecord]) -> None:
    started = asyncio.Event()

    @task
    async def slow() -> None:
        started.set()
        await asyncio.sleep(5)

    @entrypoint()
    async def main(_: int) -> None:
        await slow()

    graph = with_deadlines(main, timeout=5.0)
    run = asyncio.ensure_future(graph.ainvoke(0))
    await asyncio.wait_for(started.wait(), 3.0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert StepStatus.CANCELLED in {r.status for r in steps if r.name == "slow"}


@pytest.mark.anyio
async def test_a_tasks_own_timeout_policy_fires_as_langgraphs(steps: list[StepRecord]) -> None:
    @task(timeout=0.1)
    async def short() -> None:
        await asyncio.sleep(2)

    @entrypoint()
    async def main(_: int) -> None:
        await short()

    graph = with_deadlines(main, timeout=5.0)
    with pytest.raises(NodeTimeoutError) as caught:
        await graph.ainvoke(0)
    assert terminal_of(caught.value) is Terminal.DEADLINE_EXCEEDED
    assert [r.status for r in steps if r.name == "short"] == [StepStatus.CANCELLED]


@pytest.mark.anyio
async def test_an_entrypoint_that_catches_the_drain_still_ends_the_run(
    steps: list[StepRecord],
) -> None:
    @task
    async def slow() -> None:
        await asyncio.sleep(2)

    @entrypoint(checkpointer=InMemorySaver())
    async def main(_: int) -> str:
        try:
            await slow()
        except Exception as exc:  # what the docs say not to do
            return f"caught {type(exc).__name__}"
        return "done"

    graph = with_deadlines(main, timeout=0.3)
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke(0, _cfg())
    assert caught.value.outcome.step is not None and "slow" in caught.value.outcome.step
    # The entrypoint has the hand-off between the task's cut and its own (10 ms) to catch and
    # return: on a loaded machine it may be cut too, and then has returned nothing
    [record] = [r for r in steps if r.name == "main"]
    if record.status is StepStatus.COMPLETED:
        assert (await graph.aget_state(_cfg())).values == "caught GraphDrained"
    else:
        assert record.status is StepStatus.TIMED_OUT


def test_a_deadline_scope_around_the_call_is_the_runs_deadline() -> None:
    release = threading.Event()

    @task
    def block() -> None:
        release.wait(5.0)

    @entrypoint()
    def main(_: int) -> None:
        block().result()

    graph = with_deadlines(main)  # no timeout of its own
    t0 = time.monotonic()
    try:
        with deadline_scope(0.4), pytest.raises(DeadlineExceeded):
            graph.invoke(0)
        assert time.monotonic() - t0 < 0.4 + MARGIN
    finally:
        release.set()


@pytest.mark.anyio
async def test_a_sync_entrypoint_under_ainvoke_with_a_checkpointer_given_to_with_deadlines(
    steps: list[StepRecord],
) -> None:
    calls: list[str] = []
    release = threading.Event()
    blocks = {"b"}

    @task
    def work(name: str) -> str:
        calls.append(name)
        if name in blocks:
            release.wait(5.0)
        return name

    @entrypoint()
    def main(names: list[str]) -> list[str]:
        futures = [work(n) for n in names]
        return [f.result() for f in futures]

    graph = with_deadlines(main, timeout=0.5, checkpointer=InMemorySaver())
    t0 = time.monotonic()
    try:
        with pytest.raises(DeadlineExceeded):
            await graph.ainvoke(["a", "b"], _cfg())
        assert time.monotonic() - t0 < 0.5 + MARGIN
    finally:
        blocks.clear()
        release.set()
    assert StepStatus.ABANDONED in {r.status for r in steps if r.name == "work"}
    calls.clear()
    assert await graph.ainvoke(Command(update=deadline_input(5.0)), _cfg()) == ["a", "b"]
    assert calls == ["b"]


@pytest.mark.anyio
async def test_the_entrypoints_retry_policy_is_the_tasks_without_one() -> None:
    attempts: list[int] = []
    policy = RetryPolicy(
        max_attempts=50, initial_interval=0.2, backoff_factor=1.0, jitter=False, retry_on=ValueError
    )

    @task
    async def flaky() -> None:
        attempts.append(1)
        await asyncio.sleep(0.1)
        raise ValueError("upstream down")

    @entrypoint(retry_policy=policy)
    async def main(_: int) -> None:
        await flaky()

    graph = with_deadlines(main, timeout=1.0, min_viable={"flaky": 0.1})
    with pytest.raises(DeadlineExceeded, match="retry would not fit"):
        await graph.ainvoke(0)
    assert 2 <= len(attempts) <= 4  # never 50


@pytest.mark.anyio
async def test_wrapping_an_entrypoint_again_replaces_its_settings(steps: list[StepRecord]) -> None:
    @task
    async def slow() -> None:
        await asyncio.sleep(5)

    @entrypoint()
    async def main(_: int) -> None:
        await slow()

    once = with_deadlines(main, timeout=5.0, caps={"slow": 5.0})
    twice = with_deadlines(once, timeout=5.0, caps={"slow": 0.2})
    with pytest.raises(DeadlineExceeded):
        await twice.ainvoke(0)
    assert [(r.name, r.requested_ms) for r in steps if r.name == "slow"] == [("slow", 200.0)]


def test_the_entrypoint_below_its_min_viable_does_not_start(steps: list[StepRecord]) -> None:
    ran: list[int] = []

    @entrypoint()
    def main(x: int) -> int:
        ran.append(x)
        return x

    with pytest.raises(ValueError, match="min_viable"):
        with_deadlines(main, timeout=0.5, min_viable={"main": 1.0})  # can never fit
    graph = with_deadlines(main, min_viable={"main": 1.0})
    with deadline_scope(0.5), pytest.raises(DeadlineExceeded) as caught:
        graph.invoke(1)
    assert caught.value.outcome.step == "main"
    assert ran == []
    assert [r.status for r in steps] == [StepStatus.SKIPPED]
    assert graph.invoke(2) == 2  # no deadline at all: it runs


# -- settings that could never work ---------------------------------------------------------------


def test_a_task_whose_min_viable_is_above_its_cap_is_refused() -> None:
    with pytest.raises(ValueError, match=r"min_viable\['double'\] \(2 s\) is more than caps"):
        with_deadlines(sync_main, caps={"double": 1.0}, min_viable={"double": 2.0})
    with pytest.raises(ValueError, match=r"min_viable\['double'\] \(2 s\) is more than default"):
        with_deadlines(sync_main, default_cap=1.0, min_viable={"double": 2.0})
    with pytest.raises(ValueError, match=r"^caps\['double'\] must be more than 0 seconds"):
        with_deadlines(sync_main, caps={"double": 0})
    # default_cap is the tasks', not the entrypoint's: its own min_viable may exceed it
    with_deadlines(sync_main, default_cap=1.0, min_viable={"sync_main": 2.0})


@pytest.mark.anyio
async def test_caps_naming_no_task_of_the_first_run_are_warned_of_once_naming_them() -> None:
    graph = with_deadlines(async_main, caps={"adoubel": 1.0, "async_main": 3.0, "adouble": 1.0})
    with pytest.warns(UserWarning, match=r"caps=\.\.\.\) names \['adoubel'\], which no task") as w:
        assert await graph.ainvoke([1]) == {"doubled": [2], "n": 1}
    assert "tasks called: ['adouble']" in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await graph.ainvoke([2])  # told once


def test_caps_naming_the_tasks_called_are_not_warned_of() -> None:
    graph = with_deadlines(sync_main, caps={"double": 1.0}, min_viable={"sync_main": 0.1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert graph.invoke([1]) == {"doubled": [2], "n": 1}


def test_a_sync_entrypoints_min_viable_naming_no_task_is_warned_of() -> None:
    graph = with_deadlines(sync_main, min_viable={"dubble": 0.1})
    with pytest.warns(UserWarning, match=r"min_viable=\.\.\.\) names \['dubble'\]"):
        graph.invoke([1])
