"""The LangGraph Agent Server on many worker processes, for `test_agent_server.py`: the open
PostgreSQL + Redis runtime (`langhost serve`, from `langgraph-runtime-pg`) in a venv of its own
(`make .venv-server/.installed`: it pins a `langgraph-api` older than the dev server's), a
throwaway Redis (Debian's `redis-server`, `scripts/ensure_redis.sh`), and which worker process
holds a client's connection (read from `/proc`: the workers share one listening socket)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
from langgraph_sdk.client import LangGraphClient

from tests.postgres import free_port, unavailable

from .langgraph_dev import ROOT, serving

__all__ = ["SERVER_VENV", "AgentServer", "client_on", "langhost", "redis_server"]

SERVER_VENV = ROOT / ".venv-server"


def _ping(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1.0) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")
    return False


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A throwaway Redis on a free loopback port, nothing saved to disk; its URL. Stopped by
    its PID."""
    program = shutil.which("redis-server")
    if program is None:
        unavailable("redis-server not found: run scripts/ensure_redis.sh")
    port = free_port()
    command = [program, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(workdir), "--logfile", "redis.log"]
    proc = subprocess.Popen(command, cwd=workdir)
    try:
        end = time.monotonic() + 20
        while not _ping(port):
            if proc.poll() is not None or time.monotonic() > end:
                unavailable(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


SCHEMA = """
import os
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore
from langgraph_runtime_pg.migrate import upgrade_head

upgrade_head(os.environ["DATABASE_URI"])  # the runtime's tables
for tables in (PostgresSaver, PostgresStore):  # the checkpoints', the store's
    with tables.from_conn_string(os.environ["DATABASE_URI"]) as db:
        db.setup()
"""
"""The schema, made once before the workers start (docs/howto/across-services.md has it): each
worker makes it on start, and two racing on an empty database fail."""


def _schema(database: str) -> None:
    python = SERVER_VENV / "bin" / "python"
    env = {**os.environ, "DATABASE_URI": database}
    subprocess.run([str(python), "-c", SCHEMA], env=env, check=True)


_STARTED = "Application startup complete"


@dataclasses.dataclass(frozen=True)
class AgentServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def workers(self) -> list[int]:
        """The PIDs of the worker processes (uvicorn spawns them as its children)."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = Path(entry.path, "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                cmdline = Path(entry.path, "cmdline").read_bytes()
                if ppid == self.process.pid and b"spawn_main" in cmdline:
                    found.append(int(entry.name))
        return sorted(found)

    def started(self) -> int:
        """How many worker processes have started so far (a dead one's successor included)."""
        return self.log.read_text(errors="replace").count(_STARTED)


@contextlib.contextmanager
def langhost(
    config: Path, workdir: Path, env: Mapping[str, str], *, database: str, redis: str, workers: int
) -> Iterator[AgentServer]:
    """`langhost serve` with `workers` processes of 4 run slots each, once every worker has
    started."""
    cli = SERVER_VENV / "bin" / "langhost"
    if not cli.exists():
        unavailable(f"{cli} not found: run `make {SERVER_VENV.name}/.installed`")
    _schema(database)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(cli), "serve", "--host", "127.0.0.1", "--port", str(port), "-c", str(config)]
    command += ["--workers", str(workers), "--n-jobs-per-worker", "4"]
    uris = {"DATABASE_URI": database, "REDIS_URI": redis}

    def started(log: str) -> bool:  # every worker's own start, not only the first one's
        return log.count(_STARTED) >= workers

    with serving(command, url, workdir, {**env, **uris}, ready=started, within=120) as proc:
        yield AgentServer(url, proc, workdir / "server.log")


def _owner(server_port: int, client_port: int, pids: list[int]) -> int | None:
    """The process whose file descriptors hold the server's end of a loopback connection."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(f.split(":")[1], 16) for f in fields[1:3])
        if (local, remote) == (server_port, client_port):
            inode = fields[9]
    if inode is None:
        return None
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) == f"socket:[{inode}]":
                        return pid
    return None


async def client_on(url: str, pid: int, pids: list[int]) -> LangGraphClient:
    """An SDK client whose requests all go to worker `pid`: one kept-alive connection, opened
    until that worker is the one that accepted it. Use it at once (idle connections close)."""
    port = int(url.rsplit(":", 1)[1])
    for _ in range(200):
        http = httpx.AsyncClient(base_url=url, timeout=30.0, limits=httpx.Limits(max_connections=1))
        response = await http.get("/ok")
        _, client_port = response.extensions["network_stream"].get_extra_info("client_addr")
        if _owner(port, client_port, pids) == pid:  # it answered: it holds the connection
            return LangGraphClient(http)
        await http.aclose()
    raise AssertionError(f"no connection to worker {pid} in 200 tries")
