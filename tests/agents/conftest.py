"""Fixtures of the agent tests: a slow and a fast model server, for model fallback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langgraph_deadline.testing import ChatReply, FakeOpenAIServer

from .support import SLOW


@pytest.fixture
def slow() -> Iterator[FakeOpenAIServer]:
    """The main model's server: 200 tokens, one every 50 ms (10 s), unless scripted."""
    with FakeOpenAIServer(default_reply=ChatReply.counting(200, chunk_interval=SLOW)) as s:
        yield s


@pytest.fixture
def fast() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default_reply=ChatReply.text("fast answer")) as s:
        yield s
