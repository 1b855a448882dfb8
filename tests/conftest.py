from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline.instrument import StepEvent, get_observers, set_observers
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


@pytest.fixture
def steps() -> Iterator[list[StepRecord]]:
    """Every step record emitted during the test (the ones that never reach state included)."""
    seen: list[StepRecord] = []

    class Collect:
        def on_step(self, event: StepEvent) -> None:
            seen.append(event.record)

        def on_run(self, event: Any) -> None:
            pass

    saved = get_observers()
    set_observers([Collect()])
    try:
        yield seen
    finally:
        set_observers(saved)
