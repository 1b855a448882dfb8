"""`RunAlarm`: one timer per run for the instant its nodes end at."""

from __future__ import annotations

import asyncio

import pytest

from langgraph_deadline._core.alarm import RunAlarm
from langgraph_deadline._core.cut import Cut
from langgraph_deadline._core.deadline import Deadline

pytestmark = pytest.mark.anyio


async def test_the_cuts_that_joined_are_cancelled_at_its_time() -> None:
    loop = asyncio.get_running_loop()
    alarm = RunAlarm(loop, Deadline.after(0.05))
    caught = []

    async def step() -> None:
        task = asyncio.current_task()
        assert task is not None
        with Cut(loop, task) as cut:
            alarm.cuts.add(cut)
            await asyncio.sleep(5)
        alarm.cuts.discard(cut)
        caught.append(cut.caught)

    started = loop.time()
    await asyncio.gather(step(), step(), step())
    assert caught == [True, True, True] and alarm.fired
    assert loop.time() - started < 1.0


async def test_closing_it_drops_the_timer() -> None:
    loop = asyncio.get_running_loop()
    alarm = RunAlarm(loop, Deadline.after(0.05))
    alarm.close()
    task = asyncio.current_task()
    assert task is not None
    with Cut(loop, task) as cut:
        alarm.cuts.add(cut)
        await asyncio.sleep(0.1)  # past its time: nothing fires
    assert not cut.fired
