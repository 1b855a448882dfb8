"""`retry`: the decorator and its sync and async loops, plain bounded retries."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline._retry.retry import retry
from langgraph_deadline.types import StepStatus
from tests.retry.fakes import NO_WAIT, Flaky, Transient


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


def test_on_is_required() -> None:
    untyped: Any = retry
    with pytest.raises(TypeError, match="'on'"):
        untyped(lambda: None)
    with pytest.raises(TypeError, match="'on'"):
        untyped()


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
