"""The cancel signal: a tree, cancelled once, reaching every registered scope below it."""

from __future__ import annotations

import anyio
import pytest

from langgraph_deadline._core.context import CancelSignal


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


class _Scope:
    def __init__(self) -> None:
        self.cancelled = 0

    def cancel(self) -> None:
        self.cancelled += 1


@pytest.mark.parametrize("leaves", [(), (0,), (1,), (0, 2), (0, 1, 2), (2, 0, 1)])
def test_it_cancels_exactly_the_scopes_still_registered(leaves: tuple[int, ...]) -> None:
    """One scope or several, in any order of leaving: the first is kept apart from the others
    (a run mostly has one step at a time), which must not change what is cancelled."""
    signal = CancelSignal()
    scopes = [_Scope() for _ in range(3)]
    for scope in scopes:
        signal.register(scope)
    signal.register(scopes[0])  # registered twice: still one scope, as in a set
    for i in leaves:
        signal.unregister(scopes[i])
    late = _Scope()
    signal.register(late)  # takes a place left free
    expected = [0 if i in leaves else 1 for i in range(3)]
    assert sorted(map(id, signal.registered())) == sorted(
        id(s) for i, s in enumerate([*scopes, late]) if i not in leaves
    )
    signal.cancel()
    assert [s.cancelled for s in scopes] == expected and late.cancelled == 1
