"""One call's attempts: what is retried, how each attempt is recorded, none past the deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.errors import GraphInterrupt

import langgraph_deadline._retry.retry as retry_loop
from langgraph_deadline import (
    Deadline,
    DeadlineExceeded,
    StepRecord,
    deadline_scope,
)
from langgraph_deadline._retry.retry import retry
from langgraph_deadline.testing import ManualClock
from langgraph_deadline.types import StepStatus
from tests.retry.fakes import NO_WAIT, Flaky, Transient, status_error


@pytest.mark.parametrize("on", [TimeoutError, Exception, lambda exc: True])
def test_deadline_exceeded_is_never_retried_even_when_on_accepts_it(on: Any) -> None:
    flaky = Flaky(error=lambda: DeadlineExceeded("inner budget ran out", step="inner"))
    records: list[StepRecord] = []
    with pytest.raises(DeadlineExceeded, match="inner budget"):
        retry(flaky, on=on, on_attempt=records.append, **NO_WAIT)()
    assert flaky.calls == 1
    assert [r.status for r in records] == [StepStatus.TIMED_OUT]


def test_langgraph_interrupts_are_never_retried() -> None:
    flaky = Flaky(error=GraphInterrupt)
    with pytest.raises(GraphInterrupt):
        retry(flaky, on=Exception, **NO_WAIT)()
    assert flaky.calls == 1


@pytest.mark.anyio
async def test_a_cancelled_attempt_is_not_retried_and_is_recorded_cancelled() -> None:
    calls = 0
    records: list[StepRecord] = []

    @retry(on=BaseException, on_attempt=records.append, **NO_WAIT)
    async def slow() -> None:
        nonlocal calls
        calls += 1
        await anyio.sleep(5)

    t0 = time.monotonic()
    with anyio.move_on_after(0.05):
        await slow()
    assert time.monotonic() - t0 < 1.0
    assert calls == 1
    assert [r.status for r in records] == [StepStatus.CANCELLED]
    assert records[0].cancel_source == "caller"


@pytest.mark.anyio
async def test_a_raised_cancelled_error_passes_through_untouched() -> None:
    err = asyncio.CancelledError("stop")

    @retry(on=BaseException, **NO_WAIT)
    async def cancelled() -> None:
        raise err

    with pytest.raises(asyncio.CancelledError) as info:
        await cancelled()
    assert info.value is err


def test_keyboard_interrupt_is_not_retried_and_is_recorded_cancelled() -> None:
    flaky = Flaky(error=KeyboardInterrupt)
    records: list[StepRecord] = []
    with pytest.raises(KeyboardInterrupt):
        retry(flaky, on=BaseException, on_attempt=records.append, **NO_WAIT)()
    assert flaky.calls == 1
    assert [r.status for r in records] == [StepStatus.CANCELLED]


def test_a_retry_whose_backoff_does_not_fit_ends_at_once(sleeps: list[float]) -> None:
    clock = ManualClock()
    flaky = Flaky(failures=1)
    records: list[StepRecord] = []
    fetch = retry(
        flaky, on=Transient, initial=2.0, jitter=0, max_backoff=5, name="fetch",
        on_attempt=records.append,
    )  # fmt: skip
    with deadline_scope(Deadline.after(1.0, clock=clock)), pytest.raises(DeadlineExceeded) as info:
        fetch()
    err = info.value
    assert flaky.calls == 1
    assert sleeps == []  # it did not sleep into a deadline it could not meet
    assert err.step == "fetch"
    assert isinstance(err.__cause__, Transient)
    assert "backoff of 2.000s does not fit in the 1.000s left" in str(err)
    assert [(r.attempt, r.status) for r in records] == [
        (1, StepStatus.FAILED),
        (2, StepStatus.SKIPPED),
    ]
    assert records[0].remaining_ms == 1000.0


def test_min_attempt_counts_against_what_is_left(sleeps: list[float]) -> None:
    clock = ManualClock()
    opts: dict[str, Any] = {"on": Transient, "initial": 0.5, "jitter": 0.0}
    with deadline_scope(Deadline.after(1.0, clock=clock)):
        assert retry(Flaky(failures=1), min_attempt=0.4, **opts)() == "ok"
        with pytest.raises(DeadlineExceeded, match=r"\+ min_attempt 0.6s"):
            retry(Flaky(failures=1), min_attempt=0.6, **opts)()
    assert sleeps == [0.5]


def test_retry_after_is_honoured_only_when_it_fits(sleeps: list[float]) -> None:
    clock = ManualClock()
    error = lambda: status_error(429, "0.3")  # noqa: E731
    with deadline_scope(Deadline.after(0.2, clock=clock)):
        flaky = Flaky(failures=1, error=error)
        with pytest.raises(DeadlineExceeded, match=r"Retry-After of 0\.300s") as info:
            retry(flaky, on=httpx.HTTPStatusError)()
        assert isinstance(info.value.__cause__, httpx.HTTPStatusError)
        assert flaky.calls == 1
    with deadline_scope(Deadline.after(2.0, clock=clock)):
        assert retry(Flaky(failures=1, error=error), on=httpx.HTTPStatusError)() == "ok"
    assert sleeps == [0.3]


def test_no_attempt_starts_when_the_deadline_has_passed() -> None:
    clock = ManualClock()
    d = Deadline.after(0.5, clock=clock)
    clock.advance(0.5)
    flaky = Flaky(failures=0)
    records: list[StepRecord] = []
    with deadline_scope(d), pytest.raises(DeadlineExceeded, match="not started"):
        retry(flaky, on=Transient, on_attempt=records.append)()
    assert flaky.calls == 0
    assert [(r.attempt, r.status) for r in records] == [(1, StepStatus.SKIPPED)]


def test_no_attempt_starts_with_less_than_min_attempt_left() -> None:
    clock = ManualClock()
    flaky = Flaky(failures=0)
    with (
        deadline_scope(Deadline.after(0.1, clock=clock)),
        pytest.raises(DeadlineExceeded, match=r"less than min_attempt 0\.2s"),
    ):
        retry(flaky, on=Transient, min_attempt=0.2)()
    assert flaky.calls == 0


def test_a_backoff_that_overshoots_the_deadline_does_not_start_the_next_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock()
    monkeypatch.setattr(retry_loop, "_sleep", lambda s: clock.advance(s + 1.0))  # a late wake-up
    flaky = Flaky(failures=1)
    with (
        deadline_scope(Deadline.after(1.0, clock=clock)),
        pytest.raises(DeadlineExceeded, match="during the backoff") as info,
    ):
        retry(flaky, on=Transient, initial=0.1, jitter=0)()
    assert flaky.calls == 1
    assert isinstance(info.value.__cause__, Transient)


def test_an_error_raised_once_the_deadline_passed_is_recorded_timed_out() -> None:
    clock = ManualClock()
    records: list[StepRecord] = []

    def slow_then_fail() -> None:
        clock.advance(2.0)
        raise Transient("read timeout")

    with deadline_scope(Deadline.after(1.0, clock=clock)), pytest.raises(DeadlineExceeded):
        retry(slow_then_fail, on=Transient, on_attempt=records.append)()
    assert [(r.status, r.cancel_source) for r in records] == [
        (StepStatus.TIMED_OUT, "run_deadline"),
        (StepStatus.SKIPPED, None),
    ]
    assert all(r.status.ran_out for r in records)  # what a report counts as out of time


settings_fast = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@settings_fast
@given(
    total=st.floats(0.0, 5.0),
    attempts=st.integers(1, 8),
    initial=st.floats(0.0, 2.0),
    multiplier=st.floats(1.0, 4.0),
    max_backoff=st.floats(0.0, 3.0),
    jitter=st.floats(0.0, 1.0),
    min_attempt=st.floats(0.0, 1.0),
    work=st.floats(0.0, 1.0),
    fails=st.integers(0, 10),
    is_async=st.booleans(),
)
def test_no_attempt_starts_after_the_deadline_and_the_call_ends_by_it(
    total: float,
    attempts: int,
    initial: float,
    multiplier: float,
    max_backoff: float,
    jitter: float,
    min_attempt: float,
    work: float,
    fails: int,
    is_async: bool,
) -> None:
    """On a manual clock: attempts that take at most `min_attempt` each never outlive the deadline,
    and every attempt starts with at least `min_attempt` left (so strictly before the deadline)."""
    clock = ManualClock()
    work = min(work, min_attempt)
    deadline = Deadline.after(total, clock=clock)
    end = clock.monotonic() + total
    started: list[float] = []

    def attempt() -> str:
        started.append(deadline.remaining())
        clock.advance(work)
        if len(started) <= fails:
            raise Transient("flaky")
        return "ok"

    async def aattempt() -> str:
        return attempt()

    async def asleep(seconds: float) -> None:
        clock.advance(seconds)

    opts: dict[str, Any] = {
        "on": Transient,
        "attempts": attempts,
        "initial": initial,
        "multiplier": multiplier,
        "max_backoff": max_backoff,
        "jitter": jitter,
        "min_attempt": min_attempt,
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(retry_loop, "_sleep", clock.advance)
        mp.setattr(retry_loop, "_asleep", asleep)
        try:
            with deadline_scope(deadline):  # the async run sees it: tasks copy the context
                if is_async:
                    result = anyio.run(retry(aattempt, **opts))
                else:
                    result = retry(attempt, **opts)()
        except DeadlineExceeded:
            result = "deadline"
        except Transient:
            result = "gave up"

    assert len(started) <= attempts
    assert all(left > 0.0 and left >= min_attempt for left in started)
    assert clock.monotonic() <= end
    if result == "ok":
        assert len(started) == fails + 1
    elif result == "gave up":
        assert len(started) == attempts
    else:
        assert len(started) < attempts


@settings(max_examples=12, deadline=None)
@given(
    total=st.floats(0.01, 0.12),
    initial=st.floats(0.0, 0.08),
    multiplier=st.floats(1.0, 3.0),
    max_backoff=st.floats(0.0, 0.1),
    jitter=st.floats(0.0, 0.03),
    min_attempt=st.floats(0.0, 0.03),
)
def test_on_the_real_clock_no_attempt_starts_late_and_the_call_ends_in_time(
    total: float,
    initial: float,
    multiplier: float,
    max_backoff: float,
    jitter: float,
    min_attempt: float,
) -> None:
    starts: list[float] = []

    def always_fails() -> None:
        starts.append(time.monotonic())
        raise Transient("down")

    fetch = retry(
        always_fails,
        on=Transient,
        attempts=50,
        initial=initial,
        multiplier=multiplier,
        max_backoff=max_backoff,
        jitter=jitter,
        min_attempt=min_attempt,
    )
    t0 = time.monotonic()
    with deadline_scope(total) as d, pytest.raises((DeadlineExceeded, Transient)):
        fetch()
    end = time.monotonic()
    assert d is not None
    at = t0 + total  # the deadline, on the same clock, give or take the scope's own set-up
    assert all(s < at + 0.002 for s in starts)
    assert end - t0 <= total + 0.05
