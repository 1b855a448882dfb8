"""LangGraph Server processes for the tests that serve graphs on it: `langgraph dev` (in-memory,
offline) here, the Agent Server on many workers in `agent_server.py`; each on a free loopback
port, started once per module, stopped with its process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.postgres import free_port

__all__ = ["ROOT", "free_port", "langgraph_dev", "new_thread", "sdk", "serving", "statuses"]

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(
    command: Sequence[str],
    url: str,
    workdir: Path,
    env: Mapping[str, str],
    *,
    ready: Callable[[str], bool] = lambda log: True,
    within: float = 60.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """A LangGraph Server process (its own session), once `url`'s `/ok` answers and `ready` says
    yes to its log so far (`workdir/server.log`); `env` is added to this process's environment
    (the repository is on `PYTHONPATH`, analytics and tracing off). Stopped with its group."""
    full = {
        **os.environ,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    log_path = workdir / "server.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        command, cwd=workdir, env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        end = time.monotonic() + within
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200 and ready(
                    log_path.read_text(errors="replace")
                ):
                    break
            if proc.poll() is not None or time.monotonic() > end:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"{Path(command[0]).name} did not start at {url}:\n{tail}")
            time.sleep(0.2)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


@contextlib.contextmanager
def langgraph_dev(config: Path, workdir: Path, env: Mapping[str, str]) -> Iterator[str]:
    """`langgraph dev`'s URL, once `/ok` answers. One job per worker, as it defaults to."""
    cli = Path(sys.executable).with_name("langgraph")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(cli), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n-jobs-per-worker", "1", "--config", str(config)]
    with serving(command, url, workdir, env):
        yield url


@contextlib.asynccontextmanager
async def sdk(url: str) -> AsyncIterator[LangGraphClient]:
    """The SDK's client for the server at `url`, its connections closed on leaving."""
    client = get_client(url=url)
    try:
        yield client
    finally:
        await client.http.client.aclose()


async def new_thread(client: LangGraphClient) -> str:
    return str((await client.threads.create())["thread_id"])


def statuses(values: Mapping[str, Any], name: str) -> list[str]:
    """The statuses of step `name`'s records in a thread's values (JSON), in order."""
    return [r["status"] for r in values["deadline_trace"] if r["name"] == name]
