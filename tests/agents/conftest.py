"""Fixtures of the agent tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline.instrument import StepEvent, get_observers, set_observers


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
