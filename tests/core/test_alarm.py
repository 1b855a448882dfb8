"""`RunAlarm`: one timer per run for the instant its nodes end at."""

from __future__ import annotations

import asyncio
import contextlib
import time

import anyio
import pytest

from langgraph_deadline._core.context import CancelSignal
from langgraph_deadline._core.cut import Cut
from langgraph_deadline._core.deadline import Deadline
from langgraph_deadline._core.plan import RunAlarm

pytestmark = pytest.mark.anyio


async def test_the_cuts_that_joined_are_cancelled_at_its_time() -> None:
    loop = asyncio.get_running_loop()
    signal = CancelSignal()
    alarm = RunAlarm(loop, Deadline.after(0.05), signal)
    caught = []

    async def step(joins: bool) -> None:
        task = asyncio.current_task()
        assert task is not None
        with Cut(loop, task) as cut:
            cut.joined = joins
            signal.register(cut)
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(0.5):  # a step that did not join: not cut
                    await asyncio.sleep(5)
        signal.unregister(cut)
        caught.append(cut.caught)

    started = loop.time()
    await asyncio.gather(step(True), step(True), step(False))
    assert caught == [True, True, False] and alarm.fired
    assert loop.time() - started < 2.0
    assert not signal.cancelled  # the alarm is not the caller giving up


async def test_it_goes_on_to_a_later_deadline() -> None:
    loop = asyncio.get_running_loop()
    seen: list[tuple[bool, bool]] = []
    called = asyncio.Event()
    later = Deadline.after(0.15)

    def backstop(note: list[tuple[bool, bool]]) -> None:
        note.append((alarm.fired, later.expired))
        called.set()

    alarm = RunAlarm(loop, Deadline.after(0.05), CancelSignal(), (later, backstop, seen))
    with anyio.fail_after(5):
        await called.wait()
    assert seen == [(True, True)]  # after the alarm, and not before its own deadline


async def test_closing_it_drops_the_timer() -> None:
    loop = asyncio.get_running_loop()
    signal = CancelSignal()
    alarm = RunAlarm(loop, Deadline.after(0.05), signal, (Deadline.after(0.06), signal.cancel))
    alarm.close()
    task = asyncio.current_task()
    assert task is not None
    with Cut(loop, task) as cut:
        cut.joined = True
        signal.register(cut)
        await asyncio.sleep(0.1)  # past its time: nothing fires
    assert not cut.fired


async def test_a_late_alarm_gives_the_cuts_it_fires_the_hand_off_before_the_backstop() -> None:
    # The loop stalls past both instants: without a hand-off the backstop would come in the
    # very next iteration, while the step cut at its end is still delivering its answer.
    loop = asyncio.get_running_loop()
    signal = CancelSignal()
    order: list[str] = []
    called = asyncio.Event()

    def backstop() -> None:
        order.append("backstop")
        called.set()

    alarm = RunAlarm(loop, Deadline.after(0.02), signal, (Deadline.after(0.03), backstop))

    async def step() -> None:
        task = asyncio.current_task()
        assert task is not None
        with Cut(loop, task) as cut:
            cut.joined = True
            signal.register(cut)
            try:
                await asyncio.sleep(5)
            finally:
                for _ in range(20):  # a few loop iterations to give its answer
                    await asyncio.sleep(0)
                order.append("step answered")
        signal.unregister(cut)

    runner = asyncio.create_task(step())
    await asyncio.sleep(0)
    time.sleep(0.05)  # noqa: ASYNC251 - the stall: both deadlines pass
    with anyio.fail_after(5):
        await runner
        await called.wait()
    assert alarm.fired and order == ["step answered", "backstop"]


async def test_a_late_alarm_with_no_cut_to_wait_for_fires_the_backstop_at_once() -> None:
    loop = asyncio.get_running_loop()
    called = asyncio.Event()
    alarm = RunAlarm(loop, Deadline.after(0.01), CancelSignal(), (Deadline.after(0.02), called.set))
    time.sleep(0.03)  # noqa: ASYNC251 - the stall
    with anyio.fail_after(0.5):
        await called.wait()
    assert alarm.fired
