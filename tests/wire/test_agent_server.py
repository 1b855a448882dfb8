"""The deadline on the LangGraph Agent Server with many worker processes: `langhost serve` (the
open PostgreSQL + Redis runtime for the stock `langgraph-api`) with 2 workers of 4 run slots,
on a throwaway PostgreSQL and Redis, driven with the SDK as users drive it. What only many
workers have: a cancel that reaches the run through the other process, a run resumed on the
other worker, a worker killed mid-run, one latency book for both.
docs/howto/across-services.md#deploy-on-many-workers is the recipe this checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from langgraph_deadline.testing import ServedRequest, SlowServer

from .agent_graphs import FLUSH_SECONDS, LEARNED_FROM, NAMESPACE, RESERVE
from .agent_server import AgentServer, client_on, langhost, redis_server
from .langgraph_dev import new_thread, sdk, statuses

WORKERS = 2
HEARTBEAT = 2  # s: a dead worker's runs are taken back within ~2-4 heartbeats (120 s by default)
SLACK = 1.0  # the answer's way back, and the queue's pickup, on a loaded 2-core machine
CONFIG = {
    "dependencies": ["."],
    "graphs": {
        "search": "tests.wire.agent_graphs:make_search",
        "approve": "tests.wire.agent_graphs:make_approve",
        # one module named twice: the server runs it twice per worker
        "learn": "tests.wire.agent_book:make_learn",
        "learn_again": "tests.wire.agent_book:make_learn",
    },
    "http": {"configurable_headers": {"includes": ["x-request-*"]}},
}


@pytest.fixture(scope="module")
def slow() -> Iterator[SlowServer]:
    with SlowServer(default_delay=0.0) as server:
        yield server


@pytest.fixture(scope="module")
def database(postgres: str) -> str:
    """A database of the server's own in the shared cluster (its schema is not ours)."""
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS agent_server")
        conn.execute("CREATE DATABASE agent_server")
    return postgres.rsplit("/", 1)[0] + "/agent_server"


@pytest.fixture(scope="module")
def server(
    database: str, slow: SlowServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AgentServer]:
    workdir = tmp_path_factory.mktemp("agent-server")
    config = workdir / "langgraph.json"
    config.write_text(json.dumps(CONFIG))
    env = {"SLOW_URL": slow.url("/slow"), "LG_BG_JOB_HEARTBEAT": str(HEARTBEAT)}
    with (
        redis_server(workdir) as redis,
        langhost(config, workdir, env, database=database, redis=redis, workers=WORKERS) as served,
    ):
        yield served


@pytest.fixture
def url(server: AgentServer) -> str:
    return server.url


@pytest.fixture
def pids(server: AgentServer) -> list[int]:
    found = server.workers()
    assert len(found) == WORKERS
    return found


@pytest.fixture
async def client(url: str, slow: SlowServer) -> AsyncIterator[LangGraphClient]:
    slow.requests.clear()
    async with sdk(url) as client:
        yield client


async def _values(client: LangGraphClient, thread: str) -> dict[str, Any]:
    values: dict[str, Any] = (await client.threads.get_state(thread))["values"]
    return values


def _asked(slow: SlowServer, query: str) -> ServedRequest:
    (request,) = [r for r in slow.requests if r.query.get("q") == query]
    return request


async def _asked_soon(slow: SlowServer, count: int) -> None:
    assert await asyncio.to_thread(slow.wait_for, lambda rs: len(rs) >= count, 30.0)


def _timeout_sent(request: ServedRequest) -> float:
    return int(request.headers["x-request-timeout-ms"]) / 1000


async def _search(
    client: LangGraphClient, thread: str, query: str, *, delay: float, timeout_ms: int
) -> dict[str, Any]:
    """A run of `search` asking the slow service to take `delay` s, sent with the header."""
    run: dict[str, Any] = await client.runs.create(
        thread,
        "search",
        input={"query": query, "delay": delay},
        headers={"X-Request-Timeout-Ms": str(timeout_ms)},
    )
    return run


# -- the header, on either worker -------------------------------------------------------------


@pytest.mark.anyio
async def test_the_header_bounds_a_run_and_its_http_call_and_the_thread_says_so(
    client: LangGraphClient, slow: SlowServer
) -> None:
    thread = await new_thread(client)
    t0 = time.monotonic()
    run = await _search(client, thread, "q", delay=10, timeout_ms=3000)
    out = await client.runs.join(thread, run["run_id"])
    took = time.monotonic() - t0
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert out["deadline_outcome"]["step"] == "search"
    assert 3.0 - RESERVE - 0.5 < took < 3.0 + SLACK
    request = _asked(slow, "q")
    assert _timeout_sent(request) <= 3.0 - RESERVE
    assert slow.wait_disconnected(1.0)
    assert request.disconnected is not None
    assert request.disconnected - t0 < 3.0 - RESERVE + 0.5  # the socket closed at the budget
    values = await _values(client, thread)
    assert values["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert statuses(values, "search") == ["timed_out"]
    assert (await client.runs.get(thread, run["run_id"]))["status"] == "success"
    assert (await client.threads.get(thread))["status"] == "interrupted"  # the cut step pending


@pytest.mark.anyio
async def test_concurrent_runs_on_both_workers_each_end_at_their_own_deadline(
    client: LangGraphClient, slow: SlowServer, pids: list[int]
) -> None:
    timeouts = [2.0 + 0.25 * i for i in range(2 * 4)]  # every run slot of both workers
    threads = [await new_thread(client) for _ in timeouts]
    t0 = time.monotonic()
    runs = await asyncio.gather(
        *(
            _search(client, thread, f"q{i}", delay=10, timeout_ms=int(s * 1000))
            for i, (thread, s) in enumerate(zip(threads, timeouts, strict=True))
        )
    )
    outs = await asyncio.gather(
        *(client.runs.join(t, r["run_id"]) for t, r in zip(threads, runs, strict=True))
    )
    assert [o["deadline_outcome"]["terminal"] for o in outs] == ["deadline_exceeded"] * len(outs)
    assert slow.wait_disconnected(2.0, count=len(timeouts))
    ran_on = set()
    for i, s in enumerate(timeouts):
        request = _asked(slow, f"q{i}")
        ran_on.add(int(request.query["pid"]))
        assert _timeout_sent(request) <= s - RESERVE
        assert request.disconnected is not None
        assert s - RESERVE - 0.5 < request.disconnected - t0 < s + SLACK  # its own deadline
    assert ran_on == set(pids)  # 8 runs, 4 slots a worker: both ran some


# -- cancel through the other worker ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_cancel_through_the_other_worker_closes_the_call_and_ends_cancelled(
    client: LangGraphClient, slow: SlowServer, url: str, pids: list[int]
) -> None:
    thread = await new_thread(client)
    run = await _search(client, thread, "q", delay=10, timeout_ms=20000)
    await _asked_soon(slow, 1)
    running_on = int(_asked(slow, "q").query["pid"])
    (other,) = set(pids) - {running_on}
    via_other = await client_on(url, other, pids)
    try:
        t0 = time.monotonic()
        await via_other.runs.cancel(thread, run["run_id"])
        assert slow.wait_disconnected(5.0)
        request = _asked(slow, "q")
        assert request.disconnected is not None
        assert request.disconnected - t0 < SLACK  # closed at once, not at the deadline
        joined = await via_other.runs.join(thread, run["run_id"])
    finally:
        await via_other.http.client.aclose()
    # A trap: a join answers a cancelled run without its outcome (the server's error, or the
    # values of the run's last checkpoint, written before the outcome).
    assert joined.get("deadline_outcome") is None
    values = await _values(client, thread)  # read the outcome here
    assert values["deadline_outcome"]["terminal"] == "cancelled"  # not deadline_exceeded
    assert statuses(values, "search") == ["cancelled"]
    assert (await client.runs.get(thread, run["run_id"]))["status"] == "interrupted"


# -- queue time ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_time_in_the_queue_is_taken_from_the_budget_and_a_run_late_there_never_starts(
    client: LangGraphClient, slow: SlowServer
) -> None:
    busy = [await new_thread(client) for _ in range(2 * 4)]
    fillers = [
        await client.runs.create(t, "search", input={"query": f"busy{i}", "delay": 2.5})
        for i, t in enumerate(busy)
    ]
    await _asked_soon(slow, len(busy))  # every run slot of both workers taken
    waiting, late = await new_thread(client), await new_thread(client)
    t0 = time.monotonic()
    queued = await _search(client, waiting, "queued", delay=10, timeout_ms=5000)
    never = await _search(client, late, "late", delay=10, timeout_ms=1000)
    out = await client.runs.join(waiting, queued["run_id"])
    took = time.monotonic() - t0
    too_late = await client.runs.join(late, never["run_id"])
    for thread, run in zip(busy, fillers, strict=True):
        await client.runs.join(thread, run["run_id"])  # (ended: its answer may lack the outcome)
        assert (await _values(client, thread))["deadline_outcome"]["terminal"] == "completed"
    picked_up = _asked(slow, "queued").started - t0
    assert picked_up > 1.0  # it did wait in the queue (else this test proves nothing)
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert took < 5.0 + SLACK  # counted from the request's arrival, not from the pickup
    assert _timeout_sent(_asked(slow, "queued")) < 5.0 - RESERVE - picked_up + 0.5
    # The run whose 1 s passed in the queue: ended without starting, its thread says so.
    assert too_late["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert "before it started" in too_late["deadline_outcome"]["reason"]
    assert not [r for r in slow.requests if r.query.get("q") == "late"]
    values = await _values(client, late)
    assert values["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert values["deadline_trace"] == []
    assert (await client.runs.get(late, never["run_id"]))["status"] == "success"
    # and a run that finished:
    values = await _values(client, busy[0])
    assert values["deadline_outcome"]["terminal"] == "completed"
    assert statuses(values, "search") == ["completed"]
    assert (await client.threads.get(busy[0]))["status"] == "idle"
    assert (await client.runs.get(busy[0], fillers[0]["run_id"]))["status"] == "success"


# -- an interrupt on one worker, the resume on the other ---------------------------------------


@contextlib.asynccontextmanager
async def _frozen(pid: int, slow: SlowServer, count: int) -> AsyncIterator[None]:
    """Worker `pid` stopped (SIGSTOP) until the slow service has seen `count` requests: it takes
    no run meanwhile. Briefly: uvicorn's supervisor replaces a worker that does not answer its
    health check for 5 s."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
        await _asked_soon(slow, count)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.mark.anyio
async def test_a_run_paused_on_one_worker_and_resumed_on_the_other_keeps_its_deadline(
    client: LangGraphClient, slow: SlowServer, url: str, pids: list[int]
) -> None:
    thread = await new_thread(client)
    t0 = time.monotonic()
    paused = await client.runs.wait(
        thread,
        "approve",
        input={"query": "q", "delay": 10},
        headers={"X-Request-Timeout-Ms": "6000"},
    )
    (asked,) = paused["__interrupt__"]
    first = int(asked["value"]["pid"])
    deadline = (await _values(client, thread))["deadline"]  # epoch seconds, as checkpointed
    await asyncio.sleep(1.0)  # the human thinks
    (other,) = set(pids) - {first}
    via_other = await client_on(url, other, pids)
    try:
        async with _frozen(first, slow, 1):  # so the resume runs on the other worker
            resumed = await via_other.runs.create(thread, "approve", command={"resume": True})
        out = await via_other.runs.join(thread, resumed["run_id"])  # (it sent no header)
        took = time.monotonic() - t0
    finally:
        await via_other.http.client.aclose()
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    assert out["deadline_outcome"]["step"] == "search"
    assert took < 6.0 + SLACK  # the first request's 6 s, not the graph's 30 s
    request = _asked(slow, "q")
    assert int(request.query["pid"]) == other
    assert int(request.headers["x-request-deadline"]) / 1000 <= deadline
    assert (await _values(client, thread))["deadline"] == deadline


# -- a worker killed mid-run --------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_run_whose_worker_died_comes_back_to_its_own_deadline_and_ends_in_its_thread(
    client: LangGraphClient,
    slow: SlowServer,
    server: AgentServer,
    url: str,
) -> None:
    thread = await new_thread(client)
    run = await _search(client, thread, "q", delay=30, timeout_ms=4000)
    await _asked_soon(slow, 1)
    deadline = (await _values(client, thread))["deadline"]
    os.kill(int(_asked(slow, "q").query["pid"]), signal.SIGKILL)
    # The runtime takes the run back once its heartbeat expires (after its deadline here) and
    # runs it again, same input, same run id: LangGraph resumes the pending node.
    async with sdk(url) as survivor:  # the connections the dead worker held died with it
        end = time.monotonic() + 20 * HEARTBEAT
        while (status := (await survivor.runs.get(thread, run["run_id"]))["status"]) in (
            "pending",
            "running",
        ):
            assert time.monotonic() < end, "the dead worker's run never came back"
            await asyncio.sleep(0.5)
        values = await _values(survivor, thread)
    assert (values["deadline_outcome"] or {}).get("terminal") == "deadline_exceeded"
    assert values["deadline"] == deadline  # the run's own, not a fresh budget
    assert status == "success"
    assert len(slow.requests) == 1  # the search did not run again
    # The supervisor starts a new worker in the dead one's place (for the tests after this).
    end = time.monotonic() + 60
    while len(server.workers()) < WORKERS or server.started() < WORKERS + 1:
        assert time.monotonic() < end, "no new worker in the dead one's place"
        await asyncio.sleep(0.5)


# -- one latency book for every worker --------------------------------------------------------


@pytest.mark.anyio
async def test_what_one_worker_learned_caps_a_hang_on_the_other_within_the_flush_interval(
    client: LangGraphClient, slow: SlowServer, url: str, pids: list[int]
) -> None:
    one, two = pids
    threads = [await new_thread(client) for _ in range(LEARNED_FROM)]
    via_one = await client_on(url, one, pids)
    try:
        async with _frozen(two, slow, LEARNED_FROM):  # every run on worker one
            runs = [
                await via_one.runs.create(t, "learn", input={"query": f"learn{i}", "delay": 0.01})
                for i, t in enumerate(threads)
            ]
        for t, r in zip(threads, runs, strict=True):
            await via_one.runs.join(t, r["run_id"])
    finally:
        await via_one.http.client.aclose()
    assert {int(r.query["pid"]) for r in slow.requests} == {one}
    await asyncio.sleep(2 * FLUSH_SECONDS + 0.5)  # one writes, two reads, on their timers
    hung = await new_thread(client)
    via_two = await client_on(url, two, pids)
    try:
        t0 = time.monotonic()
        async with _frozen(one, slow, LEARNED_FROM + 1):  # the hang on worker two
            run = await via_two.runs.create(hung, "learn", input={"query": "hang", "delay": 10})
        out = await via_two.runs.join(hung, run["run_id"])
    finally:
        await via_two.http.client.aclose()
    took = time.monotonic() - t0
    assert int(_asked(slow, "hang").query["pid"]) == two
    assert out["deadline_outcome"]["terminal"] == "deadline_exceeded"
    (cut,) = [r for r in out["deadline_trace"] if r["name"] == "lookup"]
    assert cut["status"] == "timed_out"
    assert cut["allocated_ms"] < 2000  # the learned cap, not the cold 5 s
    assert took < 2.0 + SLACK
    # Two books in each worker (the module ran twice), one entry each: each sample counts once.
    await asyncio.sleep(2 * FLUSH_SECONDS + 0.5)
    items = (await client.store.search_items(list(NAMESPACE), limit=100))["items"]
    sketches = [i["value"]["sketch"] for i in items if i["value"]["name"] == "lookup"]
    assert len(sketches) == 2  # one per worker process
    assert sum(sum(k["finished"]) + sum(k["censored"]) for k in sketches) == LEARNED_FROM + 1
