"""Running one step under its plan: completed, failed, cut (async) or abandoned (sync)."""

from __future__ import annotations

import time

import anyio
import pytest

from langgraph_deadline import Deadline, DeadlineExceeded
from langgraph_deadline._core import step
from langgraph_deadline._core.plan import RunTracker, Step
from langgraph_deadline._core.step import let_through, run_async, run_sync
from langgraph_deadline.testing import ManualClock
from langgraph_deadline.types import StepStatus


class Bubble(Exception):
    """A framework's control flow (LangGraph's interrupts): passed through untouched."""


@pytest.fixture(autouse=True)
def _bubble_is_control_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Bubble` is named control flow (`let_through`, as the graph layer names LangGraph's) for
    these tests only."""
    monkeypatch.setattr(step, "_control_flow", step._control_flow)
    let_through(Bubble)


@pytest.mark.anyio
async def test_an_async_step_in_time_completes_with_its_value() -> None:
    plan = Step("s", "node", 1.0).plan()

    async def body() -> int:
        return 42

    result = await run_async(plan, body)
    assert result.status is StepStatus.COMPLETED and result.value == 42


@pytest.mark.anyio
async def test_an_async_step_past_its_budget_is_cut_and_says_why() -> None:
    plan = Step("s", "node", 0.1).plan()
    t0 = time.monotonic()

    async def body() -> None:
        await anyio.sleep(5)

    result = await run_async(plan, body)
    assert time.monotonic() - t0 < 1.0
    assert result.status is StepStatus.TIMED_OUT
    assert result.record.cancel_source == "step_cap"
    assert isinstance(result.error, DeadlineExceeded)


@pytest.mark.anyio
async def test_a_steps_own_errors_are_returned_and_control_flow_passes_through() -> None:
    plan = Step("s", "node", 1.0).plan()

    async def broken() -> None:
        raise ValueError("mine")

    result = await run_async(plan, broken)
    assert result.status is StepStatus.FAILED and isinstance(result.error, ValueError)

    async def interrupted() -> None:
        raise Bubble

    with pytest.raises(Bubble):
        await run_async(plan, interrupted)


def test_a_sync_step_past_its_budget_is_abandoned_and_the_caller_goes_on() -> None:
    plan = Step("s", "node", 0.1).plan(sync=True)
    t0 = time.monotonic()
    result = run_sync(plan, lambda: time.sleep(1.0))
    assert time.monotonic() - t0 < 0.8
    assert result.status is StepStatus.ABANDONED


def test_a_sync_step_that_stops_itself_at_its_budget_is_timed_out() -> None:
    from langgraph_deadline import check

    plan = Step("s", "node", 0.1).plan(sync=True)

    def cooperative() -> None:
        while True:
            check()
            time.sleep(0.01)

    result = run_sync(plan, cooperative)
    assert result.status in (StepStatus.TIMED_OUT, StepStatus.ABANDONED)


def test_a_sync_steps_control_flow_passes_through() -> None:
    plan = Step("s", "node", 1.0).plan(sync=True)

    def interrupted() -> None:
        raise Bubble

    with pytest.raises(Bubble):
        run_sync(plan, interrupted)


def test_off_asyncio_a_step_is_cut_at_its_budget_too() -> None:
    """Under trio (no asyncio loop) the same rule holds, with an anyio cancel scope."""
    pytest.importorskip("trio")

    async def main() -> StepStatus:
        async def hang() -> None:
            await anyio.sleep(5)

        plan = Step("s", "node", 0.05).plan()
        return (await run_async(plan, hang)).status

    t0 = time.monotonic()
    assert anyio.run(main, backend="trio") is StepStatus.TIMED_OUT
    assert time.monotonic() - t0 < 2.0


@pytest.mark.anyio
@pytest.mark.parametrize("commit", [True, False], ids=["recorded", "left-to-the-caller"])
async def test_a_plan_below_what_its_step_needs_is_refused_and_its_body_never_runs(
    commit: bool,
) -> None:
    clock = ManualClock()
    run = RunTracker(deadline=Deadline.after(0.3, clock=clock))
    plan = Step("s", "tool", min_viable=1.0).plan(run=run)
    assert plan.skip
    ran: list[str] = []

    async def body() -> None:
        ran.append("async")

    def sync_body() -> None:
        ran.append("sync")

    refused = [
        await run_async(plan, body, run=run, commit=commit),
        run_sync(plan, sync_body, run=run, commit=commit),
    ]
    assert ran == []
    assert [r.status for r in refused] == [StepStatus.SKIPPED] * 2
    assert all(r.error is None and r.status.ran_out and not r.status.cut for r in refused)
    assert run.records == ([r.record for r in refused] if commit else [])
