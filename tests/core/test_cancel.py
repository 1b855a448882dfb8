"""The cancel signal: a tree, cancelled once, reaching every registered scope below it."""

from __future__ import annotations

import anyio
import pytest

from langgraph_deadline._core.cancel import CancelSignal


@pytest.mark.anyio
async def test_cancelling_a_signal_cancels_its_scopes_and_children_once() -> None:
    parent = CancelSignal()
    child = CancelSignal(parent)
    scope = anyio.CancelScope()
    child.register(scope)
    parent.cancel("caller")
    parent.cancel("deadline")  # only the first call counts
    assert scope.cancel_called
    assert (parent.source, child.source) == ("caller", "caller")


@pytest.mark.anyio
async def test_a_child_of_a_cancelled_signal_and_a_late_scope_are_cancelled_at_once() -> None:
    parent = CancelSignal()
    parent.cancel("deadline")
    child = CancelSignal(parent)
    scope = anyio.CancelScope()
    child.register(scope)
    assert child.cancelled and scope.cancel_called


@pytest.mark.anyio
async def test_an_unregistered_scope_is_left_alone() -> None:
    signal = CancelSignal()
    scope = anyio.CancelScope()
    signal.register(scope)
    signal.unregister(scope)
    signal.cancel()
    assert not scope.cancel_called
