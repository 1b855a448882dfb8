"""Fixtures the conformance tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver


@pytest.fixture(params=["memory", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A real checkpointer: LangGraph's `InMemorySaver`, then `SqliteSaver` on a file."""
    if request.param == "memory":
        yield InMemorySaver()
        return
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as sqlite:
        yield sqlite
