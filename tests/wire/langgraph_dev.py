"""`langgraph dev` (in-memory, offline) on a free loopback port, for the tests that serve graphs
on LangGraph Server: started once per module, stopped with its process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def langgraph_dev(config: Path, workdir: Path, env: Mapping[str, str]) -> Iterator[str]:
    """The server's URL, once `/ok` answers; `env` is added to this process's environment
    (the repository is on `PYTHONPATH`). One job per worker, as `langgraph dev` defaults to."""
    cli = Path(sys.executable).with_name("langgraph")
    port = free_port()
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
    command = [str(cli), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n-jobs-per-worker", "1", "--config", str(config)]
    proc = subprocess.Popen(
        command, cwd=workdir, env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"langgraph dev did not start on port {port}:\n{tail}")
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()
