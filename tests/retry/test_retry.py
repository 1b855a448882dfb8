"""`retry` and the tenacity adaptors: retries that share one deadline, never refresh it."""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
import tenacity
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.errors import GraphInterrupt

from langgraph_deadline import (
    Deadline,
    DeadlineExceeded,
    ManualClock,
    StepRecord,
    StepStatus,
    _retry,
    deadline_scope,
)
from langgraph_deadline._retry.retry import retry, stop_at_deadline, wait_within_deadline

NO_WAIT: dict[str, Any] = {"initial": 0.0, "jitter": 0.0}


class Transient(Exception):
    """A retryable failure of the fake functions below."""


class Flaky:
    """A fake function that fails `failures` times with `error`, then returns "ok"."""

    def __init__(
        self, failures: int = 10**6, error: Callable[[], BaseException] = Transient
    ) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error()
        return "ok"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the sleeps `retry` asks for instead of sleeping (sync and async)."""
    asked: list[float] = []

    async def asleep(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(_retry, "_sleep", asked.append)
    monkeypatch.setattr(_retry, "_asleep", asleep)
    return asked


def _status_error(status: int, retry_after: str | None = None) -> httpx.HTTPStatusError:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    request = httpx.Request("GET", "http://test/slow")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"{status}", request=request, response=response)


# -- plain bounded retries (no deadline) ----------------------------------------------------------


def test_transient_failures_are_retried_until_success(sleeps: list[float]) -> None:
    flaky = Flaky(failures=2)
    records: list[StepRecord] = []
    fetch = retry(flaky, on=Transient, attempts=3, on_attempt=records.append, **NO_WAIT)

    assert fetch() == "ok"
    assert flaky.calls == 3
    assert [(r.attempt, r.status) for r in records] == [
        (1, StepStatus.FAILED),
        (2, StepStatus.FAILED),
        (3, StepStatus.COMPLETED),
    ]
    assert all(r.kind == "tool" and r.name == "Flaky" for r in records)
    assert all(r.remaining_ms is None for r in records)  # no deadline in force
    assert sleeps == [0.0, 0.0]


def test_the_last_error_is_raised_unchanged_after_the_last_attempt(sleeps: list[float]) -> None:
    errors: list[Transient] = []

    def make() -> Transient:
        errors.append(Transient(len(errors)))
        return errors[-1]

    flaky = Flaky(error=make)
    with pytest.raises(Transient) as info:
        retry(flaky, on=Transient, attempts=4, **NO_WAIT)()
    assert flaky.calls == 4
    assert info.value is errors[-1]


def test_errors_that_on_rejects_are_not_retried() -> None:
    flaky = Flaky(error=KeyError)
    with pytest.raises(KeyError):
        retry(flaky, on=(Transient, ValueError), **NO_WAIT)()
    assert flaky.calls == 1


def test_a_predicate_decides_what_is_retryable(sleeps: list[float]) -> None:
    transient = Flaky(failures=1, error=lambda: ValueError("try again"))
    fatal = Flaky(failures=1, error=lambda: ValueError("bad input"))

    def on(exc: BaseException) -> bool:
        return "again" in str(exc)

    assert retry(transient, on=on, **NO_WAIT)() == "ok"
    with pytest.raises(ValueError, match="bad input"):
        retry(fatal, on=on, **NO_WAIT)()
    assert (transient.calls, fatal.calls) == (2, 1)


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


def test_decorator_and_wrapper_keep_the_signature_and_kind() -> None:
    def fetch(url: str, *, timeout: float = 1.0) -> str:
        """Fetch a page."""
        return url

    async def afetch(url: str) -> str:
        return url

    wrapped = retry(fetch, on=Transient)
    decorated = retry(on=Transient)(afetch)
    assert inspect.signature(wrapped) == inspect.signature(fetch)
    assert (wrapped.__name__, wrapped.__doc__) == ("fetch", "Fetch a page.")
    assert wrapped.__wrapped__ is fetch  # type: ignore[attr-defined]
    assert not inspect.iscoroutinefunction(wrapped)
    assert inspect.iscoroutinefunction(decorated)
    assert inspect.signature(decorated) == inspect.signature(afetch)
    assert wrapped("u", timeout=2.0) == "u"
    assert anyio.run(decorated, "v") == "v"


def test_an_object_with_an_async_call_is_awaited() -> None:
    class Client:
        async def __call__(self) -> str:
            return "ok"

    wrapped = retry(Client(), on=Transient, name="client")
    assert anyio.run(wrapped) == "ok"


def test_backoff_grows_exponentially_capped_with_bounded_jitter(sleeps: list[float]) -> None:
    flaky = Flaky()
    with pytest.raises(Transient):
        retry(
            flaky, on=Transient, attempts=5, initial=0.1, multiplier=2, max_backoff=0.3, jitter=0
        )()
    assert sleeps == pytest.approx([0.1, 0.2, 0.3, 0.3])

    sleeps.clear()
    with pytest.raises(Transient):
        retry(Flaky(), on=Transient, attempts=4, initial=0.1, max_backoff=10, jitter=0.05)()
    for got, base in zip(sleeps, [0.1, 0.2, 0.4], strict=True):
        assert base <= got <= base + 0.05


def test_huge_attempt_counts_do_not_overflow_the_backoff(sleeps: list[float]) -> None:
    with pytest.raises(Transient):
        retry(Flaky(), on=Transient, attempts=1200, initial=1.0, multiplier=10.0, max_backoff=0.5)()
    assert max(sleeps) == 0.5


# -- Retry-After ----------------------------------------------------------------------------------


def test_retry_after_seconds_replaces_the_backoff(sleeps: list[float]) -> None:
    flaky = Flaky(failures=1, error=lambda: _status_error(429, "1.5"))
    assert retry(flaky, on=httpx.HTTPStatusError, initial=0.1, max_backoff=5)() == "ok"
    assert sleeps == [1.5]


def test_retry_after_as_an_http_date(sleeps: list[float]) -> None:
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    flaky = Flaky(failures=1, error=lambda: _status_error(503, future))
    assert retry(flaky, on=httpx.HTTPStatusError, max_backoff=60)() == "ok"
    assert sleeps[0] == pytest.approx(30, abs=2)

    sleeps.clear()
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    flaky = Flaky(failures=1, error=lambda: _status_error(429, past))
    assert retry(flaky, on=httpx.HTTPStatusError)() == "ok"
    assert sleeps == [0.0]


@pytest.mark.parametrize(
    ("status", "header"),
    [(429, "soon"), (429, "-1"), (429, "nan"), (429, "inf"), (500, "1.5"), (429, None)],
)
def test_malformed_or_irrelevant_retry_after_falls_back_to_backoff(
    sleeps: list[float], status: int, header: str | None
) -> None:
    flaky = Flaky(failures=1, error=lambda: _status_error(status, header))
    retry(flaky, on=httpx.HTTPStatusError, initial=0.25, jitter=0)()
    assert sleeps == [0.25]


def test_a_retry_after_longer_than_max_backoff_is_not_retried(sleeps: list[float]) -> None:
    flaky = Flaky(error=lambda: _status_error(429, "30"))
    with pytest.raises(httpx.HTTPStatusError):
        retry(flaky, on=httpx.HTTPStatusError, max_backoff=2.0)()
    assert flaky.calls == 1
    assert sleeps == []


# -- the deadline ---------------------------------------------------------------------------------


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
    error = lambda: _status_error(429, "0.3")  # noqa: E731
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
    monkeypatch.setattr(_retry, "_sleep", lambda s: clock.advance(s + 1.0))  # a late wake-up
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
        mp.setattr(_retry, "_sleep", clock.advance)
        mp.setattr(_retry, "_asleep", asleep)
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


# -- bad input ------------------------------------------------------------------------------------


def test_on_is_required() -> None:
    untyped: Any = retry
    with pytest.raises(TypeError, match="'on'"):
        untyped(lambda: None)
    with pytest.raises(TypeError, match="'on'"):
        untyped()


@pytest.mark.parametrize(
    "on",
    [None, int, (), (ValueError, 3), "ValueError", [ValueError], 42],
)
def test_invalid_on_is_a_clear_type_error(on: Any) -> None:
    with pytest.raises(TypeError, match="on must be"):
        retry(on=on)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"attempts": 0}, ValueError, "attempts must be >= 1"),
        ({"attempts": -3}, ValueError, "attempts must be >= 1"),
        ({"attempts": 2.5}, TypeError, "attempts must be an int"),
        ({"attempts": True}, TypeError, "attempts must be an int"),
        ({"initial": -0.1}, ValueError, "initial must be >= 0"),
        ({"initial": math.nan}, ValueError, "initial must be a finite"),
        ({"max_backoff": -1}, ValueError, "max_backoff must be >= 0"),
        ({"jitter": -1}, ValueError, "jitter must be >= 0"),
        ({"min_attempt": math.inf}, ValueError, "min_attempt must be a finite"),
        ({"min_attempt": "1"}, TypeError, "min_attempt must be a number"),
        ({"multiplier": 0.5}, ValueError, "multiplier must be a finite number >= 1"),
        ({"multiplier": None}, TypeError, "multiplier must be a number"),
        ({"kind": "database"}, ValueError, "kind must be one of"),
        ({"on_attempt": 3}, TypeError, "on_attempt must be a callable"),
        ({"name": ""}, TypeError, "name must be a non-empty str"),
    ],
)
def test_bad_options_are_refused_when_retry_is_called(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        retry(on=Transient, **kwargs)
    with pytest.raises(error, match=match):
        retry(lambda: None, on=Transient, **kwargs)


def test_wrapping_something_not_callable_is_a_type_error() -> None:
    untyped: Any = retry
    with pytest.raises(TypeError, match="needs a function"):
        untyped(42, on=Transient)


def test_generator_functions_are_refused() -> None:
    def items() -> Iterator[int]:
        yield 1

    async def aitems() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match="cannot wrap the generator function items"):
        retry(items, on=Transient)
    with pytest.raises(TypeError, match="cannot wrap the generator function aitems"):
        retry(on=Transient)(aitems)


def test_keyboard_interrupt_is_not_retried_and_is_recorded_cancelled() -> None:
    flaky = Flaky(error=KeyboardInterrupt)
    records: list[StepRecord] = []
    with pytest.raises(KeyboardInterrupt):
        retry(flaky, on=BaseException, on_attempt=records.append, **NO_WAIT)()
    assert flaky.calls == 1
    assert [r.status for r in records] == [StepStatus.CANCELLED]


def test_bad_adaptor_options_are_refused() -> None:
    with pytest.raises(ValueError, match="min_attempt must be >= 0"):
        stop_at_deadline(min_attempt=-1)
    with pytest.raises(TypeError, match="wait must be a tenacity wait"):
        wait_within_deadline(3)  # type: ignore[arg-type]


# -- tenacity adaptors ----------------------------------------------------------------------------


def test_tenacity_stop_refuses_a_wait_that_does_not_fit() -> None:
    flaky = Flaky(failures=1, error=Transient)
    retrying = tenacity.Retrying(
        stop=stop_at_deadline(),
        wait=tenacity.wait_fixed(0.3),
        retry=tenacity.retry_if_exception_type(Transient),
        reraise=True,
    )
    t0 = time.monotonic()
    with deadline_scope(0.2), pytest.raises(Transient):
        retrying(flaky)
    assert time.monotonic() - t0 < 0.1  # stopped before sleeping, not after
    assert flaky.calls == 1


def test_tenacity_stop_lets_a_wait_that_fits_go_on() -> None:
    flaky = Flaky(failures=1, error=Transient)
    retrying = tenacity.Retrying(
        stop=stop_at_deadline(min_attempt=0.1), wait=tenacity.wait_fixed(0.1), reraise=True
    )
    t0 = time.monotonic()
    with deadline_scope(2.0):
        assert retrying(flaky) == "ok"
    assert time.monotonic() - t0 >= 0.09
    assert flaky.calls == 2


def test_tenacity_stop_min_attempt_and_deadline_exceeded() -> None:
    flaky = Flaky(failures=1, error=Transient)
    with deadline_scope(0.5), pytest.raises(Transient):
        tenacity.Retrying(stop=stop_at_deadline(min_attempt=0.6), reraise=True)(flaky)
    assert flaky.calls == 1

    inner = Flaky(error=lambda: DeadlineExceeded("inner"))
    with deadline_scope(5.0), pytest.raises(tenacity.RetryError) as info:
        tenacity.Retrying(stop=stop_at_deadline())(inner)  # default retry: any exception
    assert inner.calls == 1
    assert isinstance(info.value.last_attempt.exception(), DeadlineExceeded)


def test_tenacity_stop_without_a_deadline_defers_to_the_other_stop() -> None:
    for stop in (
        stop_at_deadline() | tenacity.stop_after_attempt(3),
        tenacity.stop_after_attempt(3) | stop_at_deadline(),
    ):
        flaky = Flaky(error=Transient)
        with pytest.raises(Transient):
            tenacity.Retrying(stop=stop, reraise=True)(flaky)
        assert flaky.calls == 3
    both = stop_at_deadline() & tenacity.stop_after_attempt(1)
    flaky = Flaky(failures=2, error=Transient)
    assert tenacity.Retrying(stop=both)(flaky) == "ok"  # no deadline: never both


def test_tenacity_wait_adaptor_ends_with_deadline_exceeded() -> None:
    flaky = Flaky(error=Transient)
    retrying = tenacity.Retrying(
        wait=wait_within_deadline(tenacity.wait_fixed(0.3)),
        stop=tenacity.stop_after_attempt(5),
    )
    t0 = time.monotonic()
    with deadline_scope(0.2), pytest.raises(DeadlineExceeded, match=r"wait of 0\.300s") as info:
        retrying(flaky)
    assert time.monotonic() - t0 < 0.1
    assert flaky.calls == 1
    assert isinstance(info.value.__cause__, Transient)
    assert info.value.step == "Flaky"


def test_tenacity_wait_adaptor_passes_the_wait_through_when_it_fits() -> None:
    flaky = Flaky(failures=2, error=Transient)
    wait = wait_within_deadline(tenacity.wait_fixed(0.05), min_attempt=0.1, name="fetch")
    with deadline_scope(2.0):
        assert tenacity.Retrying(wait=wait)(flaky) == "ok"
    flaky = Flaky(failures=2, error=Transient)
    assert tenacity.Retrying(wait=wait)(flaky) == "ok"  # no deadline: plain tenacity
    assert flaky.calls == 3


@pytest.mark.anyio
async def test_tenacity_async_retrying_with_both_adaptors() -> None:
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Transient("flaky")
        return "ok"

    def make() -> tenacity.AsyncRetrying:
        return tenacity.AsyncRetrying(
            stop=stop_at_deadline() | tenacity.stop_after_attempt(3),
            wait=wait_within_deadline(tenacity.wait_fixed(0.15)),
            reraise=True,
        )

    async with deadline_scope(1.0):
        assert await make()(fetch) == "ok"
    assert calls == 2

    async def iterate() -> None:
        async with deadline_scope(0.1):
            async for attempt in make():
                with attempt:
                    await fetch()

    calls = 0
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await iterate()
    assert time.monotonic() - t0 < 0.09
    assert calls == 1
