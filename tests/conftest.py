from __future__ import annotations

from collections.abc import Iterator

import pytest

from langgraph_deadline.testing import FakeOpenAIServer, SlowServer
from tests.postgres import postgres  # noqa: F401  (the shared fixture)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    with SlowServer() as server:
        yield server


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """A local OpenAI-compatible streaming server (script it with `server.enqueue(...)`)."""
    with FakeOpenAIServer() as s:
        yield s
