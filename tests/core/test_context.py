from __future__ import annotations

import asyncio
import math

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_deadline import (
    Deadline,
    DeadlineExceeded,
    check,
    client_timeout,
    current_deadline,
    deadline_scope,
    remaining,
)
from langgraph_deadline.testing import ManualClock


def test_no_deadline_means_infinite_remaining() -> None:
    assert current_deadline() is None
    assert remaining() == math.inf
    check()  # does not raise
    assert client_timeout() is None
    assert client_timeout(3.0) == 3.0


def test_sync_scope_sets_and_restores_the_contextvar() -> None:
    with deadline_scope(10, name="outer") as d:
        assert current_deadline() is d
        assert 9 < remaining() <= 10
    assert current_deadline() is None


def test_nested_scopes_only_shorten() -> None:
    with deadline_scope(1.0, name="outer") as outer:
        with deadline_scope(60.0, name="inner") as inner:
            assert inner is outer  # the later request is clamped to the outer deadline
        with deadline_scope(0.5, name="short") as short:
            assert short is not None
            assert outer is not None
            assert short < outer
        assert current_deadline() is outer


@given(st.lists(st.floats(min_value=0, max_value=1e5), min_size=1, max_size=6))
def test_nested_scope_is_the_earliest_of_all_requests(requests: list[float]) -> None:
    clock = ManualClock()
    deadlines = [Deadline.after(s, clock=clock) for s in requests]
    scopes = [deadline_scope(d) for d in deadlines]
    for s in scopes:
        s.__enter__()
    try:
        assert current_deadline() == min(deadlines)
    finally:
        for s in reversed(scopes):
            s.__exit__(None, None, None)
    assert current_deadline() is None


def test_none_scope_adds_nothing() -> None:
    with deadline_scope(5) as outer, deadline_scope(None) as same:
        assert same is outer


def test_check_and_client_timeout_raise_when_nothing_is_left() -> None:
    clock = ManualClock()
    with deadline_scope(Deadline.after(1, clock=clock), name="job"):
        assert client_timeout() == 1
        assert client_timeout(0.25) == 0.25
        clock.advance(1)
        with pytest.raises(DeadlineExceeded):
            check("loop")
        with pytest.raises(DeadlineExceeded):
            client_timeout()  # never hands a client 0


def test_client_timeout_keeps_the_reserve() -> None:
    clock = ManualClock()
    with deadline_scope(Deadline.after(1, clock=clock)):
        assert client_timeout(reserve=0.25) == 0.75
        with pytest.raises(DeadlineExceeded):
            client_timeout(reserve=1.0)


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "3", object()])
def test_scope_rejects_bad_input(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="deadline"):
        deadline_scope(bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_async_scope_cancels_at_the_deadline_and_raises_deadline_exceeded() -> None:
    start = anyio.current_time()
    with pytest.raises(DeadlineExceeded) as info:
        async with deadline_scope(10, name="outer"), deadline_scope(0.1, name="inner"):
            await anyio.sleep(5)
    assert anyio.current_time() - start < 2
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.step == "inner"
    assert [f.name for f in err.scopes] == ["outer", "inner"]
    assert not err.scopes[1].clamped
    assert err.scopes[1].effective < err.scopes[0].effective


@pytest.mark.anyio
async def test_a_clamped_inner_scope_says_so() -> None:
    with pytest.raises(DeadlineExceeded) as info:
        async with deadline_scope(0.1, name="outer"), deadline_scope(30, name="inner"):
            await anyio.sleep(5)
    err = info.value
    assert err.step == "outer"  # the outer deadline is the one that fired
    assert [f.name for f in err.scopes] == ["outer", "inner"]
    assert err.scopes[-1].clamped
    assert not err.scopes[0].clamped


@pytest.mark.anyio
async def test_async_scope_that_finishes_in_time_raises_nothing() -> None:
    async with deadline_scope(5) as d:
        await anyio.lowlevel.checkpoint()
    assert d is not None
    assert current_deadline() is None


@pytest.mark.anyio
async def test_user_timeout_and_cancellation_pass_through_untouched() -> None:
    mine = TimeoutError("mine")
    with pytest.raises(TimeoutError) as info:
        async with deadline_scope(5):
            raise mine
    assert info.value is mine
    assert not isinstance(info.value, DeadlineExceeded)

    async def cancelled_from_outside() -> None:
        async with deadline_scope(5):
            await asyncio.sleep(5)

    task = asyncio.ensure_future(cancelled_from_outside())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_deadline_reaches_child_tasks() -> None:
    seen: list[float] = []

    async def child() -> None:
        seen.append(remaining())

    async with deadline_scope(3):
        await asyncio.gather(child(), asyncio.create_task(child()))
    assert len(seen) == 2
    assert all(0 < s <= 3 for s in seen)
