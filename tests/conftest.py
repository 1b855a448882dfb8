from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline.instrument import RunEvent, StepEvent, get_observers, set_observers
from langgraph_deadline.testing import FakeOpenAIServer, SlowServer
from tests.postgres import postgres  # noqa: F401  (the shared fixture)


def _keep_every_openai_client() -> None:
    """langchain-openai caches its default httpx clients by base URL in an LRU of 128. The
    suite starts more local model servers than that (a new port each): an evicted client is
    closed by its `__del__` on whatever event loop runs then, a later test's, while its idle
    connections belong to the closed loop of the test that made them ("Event loop is closed",
    raised into that later test). Unbounded here, no client is evicted mid-suite."""
    try:
        from langchain_openai.chat_models import _client_utils as utils
    except ImportError:
        return
    for name in ("_cached_async_httpx_client", "_cached_sync_httpx_client"):
        cached = getattr(utils, name, None)
        if cached is not None and hasattr(cached, "__wrapped__"):
            setattr(utils, name, functools.lru_cache(maxsize=None)(cached.__wrapped__))


_keep_every_openai_client()


@pytest.fixture(autouse=True)
def _collector_frozen() -> None:
    """What the tests before this one left is collected, and what lives on is frozen
    (`gc.freeze()`), as our docs tell a server to do after start-up. A worker of the suite
    holds about a million objects after a few hundred tests: a full pass of the collector over
    them took 0.5 to 0.8 s, long enough to push a timed test (a 0.6 s deadline, a 0.5 s
    margin) past its margin wherever it landed (measured with `gc.callbacks` in a full `make
    test`). Frozen, they are left out of every pass; the objects a test makes are not."""
    gc.collect()
    gc.freeze()


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


class Collect:
    """An observer that keeps what it is told: step events, their records, run events."""

    def __init__(self) -> None:
        self.events: list[StepEvent] = []
        self.records: list[StepRecord] = []
        self.runs: list[RunEvent] = []

    def on_step(self, event: StepEvent) -> None:
        self.events.append(event)
        self.records.append(event.record)

    def on_run(self, event: RunEvent) -> None:
        self.runs.append(event)


@contextmanager
def collecting() -> Iterator[Collect]:
    """The block's only observer is a `Collect` (the saved observers come back after it)."""
    collect = Collect()
    saved = get_observers()
    set_observers([collect])
    try:
        yield collect
    finally:
        set_observers(saved)


@pytest.fixture
def steps() -> Iterator[list[StepRecord]]:
    """Every step record emitted during the test (the ones that never reach state included)."""
    with collecting() as collect:
        yield collect.records


@pytest.fixture
def runs() -> Iterator[list[RunEvent]]:
    """Every run event told during the test."""
    with collecting() as collect:
        yield collect.runs


async def hang_then_close_slowly(close: float = 0.05) -> None:
    """A tool body's I/O: it waits until cut, then takes `close` seconds to close (shielded),
    longer than the hand-off between a tool's cut and its node's, so the node's cut reaches
    the tool mid-close."""
    try:
        await anyio.sleep(3600)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(close)
