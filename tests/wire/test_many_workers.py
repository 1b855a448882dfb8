"""Many workers, one deadline: a run interrupted on one worker process and resumed on another,
both behind DeadlineASGIMiddleware, sharing a real PostgreSQL (a throwaway cluster on loopback)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from langgraph_deadline.testing import SlowServer
from tests.postgres import free_port

ROOT = Path(__file__).resolve().parents[2]
RESERVE = 0.05  # the worker's middleware reserve (the default)
LATE = 0.4


@pytest.fixture(scope="module")
def search() -> Iterator[SlowServer]:
    with SlowServer() as server:
        yield server


@pytest.fixture(scope="module")
def workers(postgres: str, search: SlowServer) -> Iterator[tuple[str, str]]:
    """Two worker processes of examples/across_services/worker.py, one database."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(postgres) as saver:
        saver.setup()  # once, before two workers race to do it
    env = {
        **os.environ,
        "DATABASE_URL": postgres,
        "SEARCH_URL": search.url("/slow?delay=10"),
        "PYTHONPATH": str(ROOT),
    }
    uvicorn = [sys.executable, "-m", "uvicorn", "--factory"]
    uvicorn += ["examples.across_services.worker:from_env", "--host", "127.0.0.1"]
    uvicorn += ["--log-level", "warning"]
    ports = [free_port(), free_port()]
    procs = [
        subprocess.Popen(
            [*uvicorn, "--port", str(port)],
            cwd=ROOT,
            env=env,
        )
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url, proc in zip(urls, procs, strict=True):
            end = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > end:
                    pytest.fail(f"worker {url} did not start")
                time.sleep(0.1)
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def test_a_run_resumed_by_another_worker_keeps_its_original_deadline(
    workers: tuple[str, str], search: SlowServer
) -> None:
    one, two = workers
    pids = {httpx.get(f"{url}/health").json()["worker"] for url in workers}
    assert len(pids) == 2  # two processes

    # Worker one: the run starts with 4 s and stops for approval.
    sent = time.time()
    r = httpx.post(
        f"{one}/runs/t-1",
        json={"query": "late order"},
        headers={"X-Request-Timeout-Ms": "4000"},
        timeout=10,
    )
    answered = time.time()
    assert r.status_code == 200
    started = r.json()
    assert started["interrupted"]
    deadline = started["deadline"]  # epoch seconds, as checkpointed
    assert sent + 4.0 - RESERVE - 0.3 < deadline <= answered + 4.0 - RESERVE

    time.sleep(1.0)  # the human thinks

    # Worker two resumes it: no deadline header, so its own default would be 30 s.
    resumed = time.time()
    r = httpx.post(f"{two}/runs/t-1/resume", json={"approved": True}, timeout=40)
    ended = time.time()
    assert r.status_code == 504
    assert r.json()["step"] == "search"
    assert deadline - 0.05 < ended < deadline + LATE  # the original deadline, not 30 s

    # The search request of the resumed run was told only what was left, and closed at it.
    assert search.wait_disconnected(2.0)
    (request,) = search.requests
    assert int(request.headers["x-request-timeout-ms"]) <= (deadline - resumed) * 1000 + 10
    # (the step's own deadline: the checkpointed one, less a few ms kept for handing over)
    assert deadline - 0.05 < int(request.headers["x-request-deadline"]) / 1000 <= deadline

    # The checkpoint, as worker one now reads it: same deadline, the outcome, the records.
    view = httpx.get(f"{one}/runs/t-1").json()
    assert view["deadline"] == deadline
    assert view["outcome"]["terminal"] == "deadline_exceeded"
    assert view["outcome"]["step"] == "search"
    cut = [s for s in view["trace"] if s["name"] == "search"]
    assert cut
    assert {s["status"] for s in cut} == {"timed_out"}
    assert cut[-1]["allocated_ms"] <= (deadline - resumed) * 1000 + 10
