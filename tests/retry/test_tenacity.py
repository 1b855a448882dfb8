"""Tenacity adaptors: `stop_at_deadline` and `wait_within_deadline` in tenacity loops."""

from __future__ import annotations

import time

import pytest
import tenacity

from langgraph_deadline import (
    DeadlineExceeded,
    deadline_scope,
)
from langgraph_deadline.tenacity import stop_at_deadline, wait_within_deadline
from tests.retry.fakes import Flaky, Transient


def test_bad_adaptor_options_are_refused() -> None:
    with pytest.raises(ValueError, match="min_attempt must be >= 0"):
        stop_at_deadline(min_attempt=-1)
    with pytest.raises(TypeError, match="wait must be a tenacity wait"):
        wait_within_deadline(3)  # type: ignore[arg-type]


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
