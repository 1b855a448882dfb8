"""A throwaway PostgreSQL cluster for tests: in a temp dir, on a free loopback port.

Shared through `tests/conftest.py` (the `postgres` fixture: its URL). Needs the server programs
(`scripts/ensure_postgres.sh`); skipped without them, failed without them on CI.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["free_port", "postgres", "unavailable"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unavailable(message: str) -> NoReturn:
    """Skip a test for want of a server program; on CI (`CI=true`), where `.ci/run` installs
    them all, fail it instead: CI never skips quietly."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def _postgres_bin() -> Path | None:
    """The directory of initdb and pg_ctl: Debian's newest, else whatever is on PATH."""
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if debian:
        return Path(debian[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster in a temp dir, on a free loopback port; its URL."""
    bindir = _postgres_bin()
    if bindir is None:
        unavailable("PostgreSQL server programs not found: run scripts/ensure_postgres.sh")
    run_as: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="langgraph-deadline-pg-"))
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root: a 'postgres' user is needed to run the server")
        os.chown(base, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = base / "data", free_port()
    pg_ctl = [*run_as, str(bindir / "pg_ctl"), "-D", str(data)]
    initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
    subprocess.run([*run_as, *initdb, "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    options = (
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    subprocess.run(
        [*pg_ctl, "-l", str(base / "server.log"), "-w", "-t", "30", "-o", options, "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
