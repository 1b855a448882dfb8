"""`Cut`: one step's cancel scope on asyncio (what every node, tool and HTTP step opens)."""

from __future__ import annotations

import asyncio
from importlib.util import find_spec
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from langgraph_deadline._core.cut import GRACE, Cut
from langgraph_deadline._core.deadline import Deadline

pytestmark = pytest.mark.anyio


async def _cut_after(seconds: float, body: Any) -> tuple[Cut, Any]:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    cut = Cut(loop, task)
    cut.arm(Deadline.after(seconds))
    result = None
    with cut:
        result = await body()
    return cut, result


async def test_the_body_is_cancelled_at_the_time_and_the_cut_catches_it() -> None:
    cancelled = []

    async def body() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "finished"

    cut, result = await _cut_after(0.02, body)
    assert cut.caught and cancelled == [True] and result is None
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # every cancel it made is undone


async def test_a_body_that_finishes_in_time_is_left_alone() -> None:
    async def body() -> str:
        await asyncio.sleep(0)
        return "done"

    cut, result = await _cut_after(5.0, body)
    assert (cut.fired, cut.caught, result) == (False, False, "done")


async def test_a_body_that_swallows_the_cancellation_is_cancelled_again() -> None:
    # Python 3.11's asyncio.wait_for can swallow a cancellation: like an anyio scope, the cut
    # delivers it again at the body's next await instead of letting it run on.
    swallowed = []

    async def body() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.append(True)  # and goes on, as a buggy library would
        await asyncio.sleep(10)
        return "ran on"

    cut, result = await _cut_after(0.02, body)
    assert swallowed == [True] and cut.caught and result is None


async def test_a_clean_up_awaited_after_the_cancellation_is_not_cancelled_again() -> None:
    # psycopg answers a cancellation by cancelling the query in the server and waiting for it
    # to end, unshielded; cancelled again meanwhile, it closes the connection for good.
    ended = []

    async def body() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(GRACE / 8)  # its clean-up, in two awaits
            await asyncio.sleep(GRACE / 8)
            ended.append(True)
            raise
        return "finished"

    cut, result = await _cut_after(0.02, body)
    assert ended == [True] and cut.caught and result is None


async def test_an_outer_cut_does_not_cancel_a_clean_up_an_inner_cut_started() -> None:
    # A node's cut comes 10 ms before the run's own (the backstop): psycopg's clean-up of the
    # node's query, under way when the run's comes, must not be cancelled by it either.
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    ended = []

    async def body() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            for _ in range(4):  # a clean-up that outlasts the gap between the two cuts
                await asyncio.sleep(0.01)
            ended.append(True)
            raise

    outer = Cut(loop, task)
    outer.arm(Deadline.after(0.03))
    with outer:
        inner = Cut(loop, task)
        inner.arm(Deadline.after(0.02))
        with inner:
            await body()
    assert ended == [True]
    assert inner.caught and not outer.caught  # the node's cut ended it, as its own
    assert task.cancelling() == 0


async def test_a_body_that_swallows_is_cancelled_again_once_the_grace_has_passed() -> None:
    loop = asyncio.get_running_loop()
    swallowed: list[float] = []

    async def body() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.append(loop.time())  # and goes on, as a buggy library would
        await asyncio.sleep(10)
        return "ran on"

    cut, result = await _cut_after(0.02, body)
    assert result is None and cut.caught and len(swallowed) == 1
    assert loop.time() - swallowed[0] >= GRACE  # the second waited for the grace to pass


async def test_a_cancellation_from_elsewhere_passes_through() -> None:
    async def runner() -> Cut:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        cut = Cut(loop, task)
        cut.arm(Deadline.after(0.05))
        with cut:
            await asyncio.sleep(10)
        return cut

    task = asyncio.create_task(runner())
    await asyncio.sleep(0.01)
    task.cancel()  # the caller gives up before the cut's time
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outside_cancellation_at_the_same_instant_is_not_swallowed() -> None:
    seen: list[Cut] = []

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        cut = Cut(loop, task)
        seen.append(cut)
        with cut:
            await asyncio.sleep(10)

    task = asyncio.create_task(runner())
    await asyncio.sleep(0)
    seen[0].cancel()  # the cut fires...
    task.cancel()  # ...and the caller cancels in the same loop iteration
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not seen[0].caught


_UVLOOP = pytest.param(
    ("asyncio", {"use_uvloop": True}),
    id="uvloop",
    marks=pytest.mark.skipif(find_spec("uvloop") is None, reason="uvloop is not installed"),
)


@pytest.mark.parametrize("anyio_backend", [_UVLOOP])
async def test_a_cut_on_uvloop_never_comes_before_its_deadline() -> None:
    """uvloop's timers come up to about half a millisecond before the monotonic clock a
    deadline reads says they are due (measured: about every other one). A step cut then would
    be recorded as failed with time left instead of timed out; the cut waits for the deadline."""
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("uvloop")
    task = asyncio.current_task()
    assert task is not None
    early = 0
    for i in range(60):
        deadline = Deadline.after(0.001 + (i % 7) * 0.0013)
        cut = Cut(loop, task)
        cut.arm(deadline)
        with cut:
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                early += not deadline.expired
                raise
        assert cut.caught
    assert early == 0


# -- shields: a library's clean-up after the cut runs to its end --------------------------------


async def test_a_shielded_anyio_clean_up_in_the_body_is_not_cancelled_again() -> None:
    # httpcore closes a cancelled request inside `anyio.CancelScope(shield=True)`, waiting on a
    # lock: delivering the cancellation again there would leave the connection in use.
    cleaned = []

    async def body() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                await asyncio.sleep(0.05)  # a wait on a future, several loop iterations
                cleaned.append(True)
            raise
        return "finished"

    cut, result = await _cut_after(0.02, body)
    assert cleaned == [True] and cut.caught and result is None


async def test_a_cut_that_comes_inside_a_shield_waits_for_the_body_to_leave_it() -> None:
    shielded = []

    async def body() -> str:
        with anyio.CancelScope(shield=True):
            await asyncio.sleep(0.08)  # the cut's time passes in here
            shielded.append("done")
        await asyncio.sleep(10)  # cut here
        return "ran on"

    cut, result = await _cut_after(0.02, body)
    assert shielded == ["done"] and cut.caught and result is None


async def test_a_shield_around_the_cut_does_not_stop_it() -> None:
    with anyio.CancelScope(shield=True):
        cut, result = await _cut_after(0.02, lambda: asyncio.sleep(10, "ran on"))
    assert cut.caught and result is None


async def test_a_task_the_body_awaits_is_cancelled_once_and_its_clean_up_runs() -> None:
    # LangChain runs a tool's coroutine in a task of its own: the cut reaches it through the
    # await, once; cancelling it again would cancel its (shielded or not) clean-up.
    cleaned = []

    async def worker(shield: bool) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=shield):
                await asyncio.sleep(0.05)
                cleaned.append(shield)
            raise
        return "finished"

    for shield in (True, False):
        cut, result = await _cut_after(0.02, lambda s=shield: asyncio.create_task(worker(s)))
        assert cut.caught and result is None
    assert cleaned == [True, False]


async def test_a_task_the_body_awaits_starts_before_the_first_cancellation_reaches_it() -> None:
    # LangGraph unwinds a run's loop (its exit stack) in a task it awaits at once: cancelled
    # before its first step, that task never runs, and the loop is left in a reference cycle
    # for the garbage collector (the run's backstop, in a saturated loop, came at that moment).
    ran = []

    async def unwind() -> None:
        ran.append("started")
        try:
            await asyncio.sleep(10)
        finally:
            ran.append("finished")

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    with Cut(loop, task) as cut:
        loop.call_soon(cut.cancel)  # due before the awaited task's first step
        await asyncio.create_task(unwind())
    assert cut.caught
    assert ran == ["started", "finished"]


async def test_a_cut_waits_while_a_task_the_body_awaits_is_inside_a_shield() -> None:
    # The task a tool's coroutine runs in is the body too: httpcore takes a new connection's
    # lock inside a shield, and a request cancelled there leaves the connection NEW in the pool,
    # never used or closed again (tests/tools/test_shared_client.py).
    shielded = []

    async def worker() -> str:
        with anyio.CancelScope(shield=True):
            await asyncio.sleep(0.08)  # the cut's time passes in here
            shielded.append("done")
        await asyncio.sleep(10)  # cut here
        return "ran on"

    cut, result = await _cut_after(0.02, lambda: asyncio.create_task(worker()))
    assert shielded == ["done"] and cut.caught and result is None


@pytest.mark.parametrize("in_task", [False, True], ids=["body", "awaited_task"])
async def test_a_task_about_to_wake_with_a_result_gets_it_before_the_cut(in_task: bool) -> None:
    # As anyio does, a task whose waiter is done is not cancelled: the result would be lost.
    # httpcore hands a queued request its new connection so: a request cancelled then leaves
    # the connection CONNECTING in the pool, never used or closed again.
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    handed: asyncio.Future[str] = loop.create_future()
    took = []

    async def worker() -> str:
        took.append(await handed)
        await asyncio.sleep(10)  # cut here
        return "ran on"

    cut = Cut(loop, task)

    def hand_over_and_cut() -> None:
        handed.set_result("connection")
        cut.cancel()  # in the same loop iteration: the worker has not woken yet

    loop.call_later(0.02, hand_over_and_cut)
    result = None
    with cut:
        result = await (asyncio.create_task(worker()) if in_task else worker())
    assert took == ["connection"] and cut.caught and result is None


async def test_an_asyncio_shield_in_the_body_keeps_its_work_running() -> None:
    finished = []

    async def work() -> None:
        await asyncio.sleep(0.06)
        finished.append(True)

    inner = asyncio.ensure_future(work())
    cut, result = await _cut_after(0.02, lambda: asyncio.shield(inner))
    assert cut.caught and result is None and not inner.done()
    await inner
    assert finished == [True]


@pytest.mark.anyio
async def test_anyio_still_keeps_the_task_states_a_cut_reads_its_shields_from() -> None:
    """`cut._shielded` reads anyio's private per-task states (asyncio backend): when anyio
    changes them, this fails here, not as a cut that cancels a library's shielded clean-up."""
    from langgraph_deadline._core import cut

    task = asyncio.current_task()
    assert task is not None
    with anyio.CancelScope() as outer:
        await anyio.lowlevel.checkpoint()
        assert cut._anyio_scope(task) is outer
        with anyio.CancelScope(shield=True) as shield:
            await anyio.lowlevel.checkpoint()
            assert cut._anyio_scope(task) is shield
            assert shield._parent_scope is outer  # type: ignore[attr-defined]
            assert cut._shielded(task, outer)
        assert not cut._shielded(task, outer)
