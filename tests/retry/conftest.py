"""The `sleeps` fixture: `retry`'s loops on a manual clock, without sleeping."""

from __future__ import annotations

import pytest

import langgraph_deadline._retry.retry as retry_loop


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the sleeps `retry` asks for instead of sleeping (sync and async)."""
    asked: list[float] = []

    async def asleep(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(retry_loop, "_sleep", asked.append)
    monkeypatch.setattr(retry_loop, "_asleep", asleep)
    return asked
