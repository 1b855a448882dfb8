from __future__ import annotations

from collections.abc import Iterator

import pytest

from langgraph_deadline.testing import SlowServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    with SlowServer() as server:
        yield server
