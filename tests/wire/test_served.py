"""Graphs served by LangGraph Server (`langgraph dev`, in memory, offline), driven as users drive
them, with the SDK client and `RemoteGraph`: the deadline counts from the request (its headers,
its time in the queue), every run says how it ended, in its answer and in its thread, and a
stale cache lives in the server's own store, per user. `examples/served/` is the deployment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from langgraph_deadline.testing import SlowServer

from .langgraph_dev import ROOT, langgraph_dev

CONFIG = ROOT / "examples" / "served" / "langgraph.json"
RESERVE = 0.2  # examples.served.graphs.make_search
SLACK = 0.6  # the answer's way back and a loaded 2-core machine
STALE = "[stale result"


@pytest.fixture(scope="module")
def slow() -> Iterator[SlowServer]:
    with SlowServer(default_delay=0.0) as server:
        yield server


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("langgraph-served")


@pytest.fixture(scope="module")
def url(slow: SlowServer, workdir: Path) -> Iterator[str]:
    with langgraph_dev(CONFIG, workdir, {"SLOW_URL": slow.url("/slow")}) as served:
        yield served


@pytest.fixture
async def client(url: str, slow: SlowServer) -> AsyncIterator[LangGraphClient]:
    slow.requests.clear()
    slow.default_delay = 0.0
    sdk = get_client(url=url)
    try:
        yield sdk
    finally:
        await sdk.http.client.aclose()


async def _thread(client: LangGraphClient) -> str:
    return str((await client.threads.create())["thread_id"])


def _statuses(values: dict[str, Any], name: str) -> list[str]:
    return [r["status"] for r in values["deadline_trace"] if r["name"] == name]


# -- 1. a run whose deadline passed while it waited -------------------------------------------


@pytest.mark.anyio
async def test_a_run_already_late_answers_deadline_exceeded_and_its_thread_says_so(
    client: LangGraphClient, slow: SlowServer, url: str
) -> None:
    thread = await _thread(client)
    late = {"query": "q", "deadline": time.time() - 1}
    out = await client.runs.wait(thread, "search", input=late)
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    state = await client.threads.get_state(thread)
    assert state["values"]["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert state["values"]["query"] == "q"
    remote = await RemoteGraph("search", url=url).ainvoke(late)
    assert remote["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert slow.requests == []  # nothing ran


# -- 2. the header alone --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_timeout_header_alone_bounds_a_served_run_and_its_http_call(
    client: LangGraphClient, slow: SlowServer
) -> None:
    thread = await _thread(client)
    t0 = time.monotonic()
    out = await client.runs.wait(
        thread,
        "search",
        input={"query": "q", "delay": 10},
        headers={"X-Request-Timeout-Ms": "2500"},  # room for a slow pickup on a busy machine
    )
    took = time.monotonic() - t0
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert out["deadline_outcome"]["step"] == "search"
    assert 2.5 - RESERVE - 0.5 < took < 2.5 + SLACK
    (request,) = slow.requests
    assert int(request.headers["x-request-timeout-ms"]) <= 2500 - RESERVE * 1000
    assert slow.wait_disconnected(1.0)
    assert request.disconnected is not None
    assert request.disconnected - t0 < 2.5 - RESERVE + 0.3  # the socket closed at the budget
    values = (await client.threads.get_state(thread))["values"]
    assert values["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert _statuses(values, "search") == ["timed_out"]
    # The server's own statuses cannot tell it from a pause: the cut step is pending.
    assert (await client.threads.get(thread))["status"] == "interrupted"


@pytest.mark.anyio
async def test_a_run_that_ran_out_says_so_in_the_servers_log(
    client: LangGraphClient, workdir: Path
) -> None:
    thread = await _thread(client)
    run = await client.runs.create(
        thread,
        "search",
        input={"query": "q", "delay": 10},
        headers={"X-Request-Timeout-Ms": "1500"},
    )
    out = await client.runs.join(thread, run["run_id"])
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    # The server's own line says the run succeeded; ours, a WARNING, says how it ended.
    expected = f"run {run['run_id']} ended deadline_exceeded at search after "
    end = time.monotonic() + 5.0
    while expected not in (log := (workdir / "server.log").read_text(errors="replace")):
        assert time.monotonic() < end, log[-3000:]
        await asyncio.sleep(0.1)
    (line,) = [line for line in log.splitlines() if expected in line]
    assert "warning" in line.lower()
    assert f"thread_id={thread}" in line
    assert "search cancelled at its budget" in line


@pytest.mark.anyio
async def test_remote_graph_headers_bound_the_served_run(
    client: LangGraphClient, slow: SlowServer, url: str
) -> None:
    remote = RemoteGraph("search", url=url, headers={"X-Request-Timeout-Ms": "2000"})
    t0 = time.monotonic()
    out = await remote.ainvoke({"query": "q", "delay": 10})
    assert time.monotonic() - t0 < 2.0 + SLACK
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert slow.wait_disconnected(1.0)


# -- 3. queue time ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_time_in_the_queue_is_taken_from_the_budget(
    client: LangGraphClient, slow: SlowServer
) -> None:
    busy, waiting = await _thread(client), await _thread(client)
    # One job per worker: a 1.5 s run first, so the next one waits in the queue behind it
    # (picking a run up takes the dev server up to a second too).
    first = await client.runs.create(busy, "search", input={"query": "busy", "delay": 1.5})
    t0 = time.monotonic()
    second = await client.runs.create(
        waiting,
        "search",
        input={"query": "queued", "delay": 10},
        headers={"X-Request-Timeout-Ms": "5000"},
    )
    out = await client.runs.join(waiting, second["run_id"])
    took = time.monotonic() - t0
    await client.runs.join(busy, first["run_id"])
    queued = next(r for r in slow.requests if r.query.get("q") == "queued")
    picked_up = queued.started - t0
    assert picked_up > 1.0  # it did wait in the queue (else this test proves nothing)
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    # Its deadline counted from the request's arrival, not from the pickup:
    assert took < 5.0 + SLACK
    sent = int(queued.headers["x-request-timeout-ms"]) / 1000
    assert sent < 5.0 - RESERVE - picked_up + 0.3  # not the 4.8 s counted from the pickup


# -- 4. the thread tells how each run ended ---------------------------------------------------


@pytest.mark.anyio
async def test_a_completed_run_says_so_in_its_answer_and_its_thread(
    client: LangGraphClient, url: str
) -> None:
    thread = await _thread(client)
    out = await client.runs.wait(thread, "search", input={"query": "q"})
    assert out["deadline_outcome"]["terminal"] == "completed"
    assert (await client.threads.get(thread))["status"] == "idle"
    values = (await client.threads.get_state(thread))["values"]
    assert values["deadline_outcome"]["terminal"] == "completed"
    assert _statuses(values, "search") == ["completed"]
    remote = await RemoteGraph("search", url=url).ainvoke({"query": "q"})
    assert remote["deadline_outcome"]["terminal"] == "completed"


@pytest.mark.anyio
async def test_a_cancelled_run_leaves_cancelled_and_its_step_record_in_its_thread(
    client: LangGraphClient, slow: SlowServer
) -> None:
    thread = await _thread(client)
    run = await client.runs.create(thread, "search", input={"query": "q", "delay": 10})
    assert await asyncio.to_thread(slow.wait_for, lambda rs: len(rs) == 1, 10.0)
    await client.runs.cancel(thread, run["run_id"], wait=True)
    assert slow.wait_disconnected(1.0)  # the search request was closed
    assert (await client.runs.get(thread, run["run_id"]))["status"] == "interrupted"
    values = (await client.threads.get_state(thread))["values"]
    assert values["deadline_outcome"]["terminal"] == "cancelled"
    assert _statuses(values, "search") == ["cancelled"]


# -- 5. a stale cache in the server's store ----------------------------------------------------


@pytest.mark.anyio
async def test_a_stale_answer_comes_from_the_servers_store_and_only_to_its_user(
    client: LangGraphClient, slow: SlowServer
) -> None:
    def as_user(name: str) -> dict[str, Any]:
        return {"configurable": {"user_id": name}}

    fresh = await client.runs.wait(None, "stock", input={"sku": "A1"}, config=as_user("alice"))
    assert fresh["answer"].startswith("A1:")
    items = await client.store.search_items(["langgraph_deadline", "stale", "user:alice"])
    assert len(items["items"]) == 1  # kept in the server's store, under alice's namespace

    slow.default_delay = 10.0  # the live call now times out
    stale = await client.runs.wait(None, "stock", input={"sku": "A1"}, config=as_user("alice"))
    assert stale["answer"].startswith(STALE)
    assert fresh["answer"] in stale["answer"]
    assert "stale" in _statuses(stale, "stock_level")
    assert stale["deadline_outcome"]["terminal"] == "completed"

    other = await client.runs.wait(None, "stock", input={"sku": "A1"}, config=as_user("bob"))
    assert not other["answer"].startswith(STALE)  # alice's answer is not bob's
    assert "This is a timeout" in other["answer"]
    assert (await client.store.search_items(["langgraph_deadline", "stale", "user:bob"]))[
        "items"
    ] == []
