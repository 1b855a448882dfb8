"""`terminal_of`: how a run ended, from what it returned or raised."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.errors import GraphRecursionError

from langgraph_deadline import DeadlineExceeded, Outcome, Terminal, terminal_of


@pytest.mark.parametrize(
    ("result", "terminal"),
    [
        (None, Terminal.COMPLETED),
        ({"x": 1}, Terminal.COMPLETED),
        (
            {"deadline_outcome": Outcome(terminal=Terminal.DEADLINE_EXCEEDED)},
            Terminal.DEADLINE_EXCEEDED,
        ),
        ({"__interrupt__": ()}, None),
        (DeadlineExceeded("late"), Terminal.DEADLINE_EXCEEDED),
        (TimeoutError(), Terminal.DEADLINE_EXCEEDED),
        (asyncio.CancelledError(), Terminal.CANCELLED),
        (GraphRecursionError("limit"), Terminal.STEP_LIMIT),
        (ValueError("mine"), Terminal.FAILED),
    ],
)
def test_each_ending_has_its_terminal(result: object, terminal: Terminal | None) -> None:
    assert terminal_of(result) is terminal  # type: ignore[arg-type]


def test_trio_cancellation_is_cancelled_without_importing_trio_here() -> None:
    trio = pytest.importorskip("trio")
    assert terminal_of(trio.Cancelled._create()) is Terminal.CANCELLED
