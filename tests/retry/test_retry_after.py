"""A server's `Retry-After`: honoured in place of the backoff, parsed as seconds or a date."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from langgraph_deadline._retry.retry import retry
from langgraph_deadline._retry.retry_after import parse_retry_after, retry_after
from tests.retry.fakes import Flaky, Transient, status_error


def test_retry_after_seconds_replaces_the_backoff(sleeps: list[float]) -> None:
    flaky = Flaky(failures=1, error=lambda: status_error(429, "1.5"))
    assert retry(flaky, on=httpx.HTTPStatusError, initial=0.1, max_backoff=5)() == "ok"
    assert sleeps == [1.5]


def test_retry_after_as_an_http_date(sleeps: list[float]) -> None:
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    flaky = Flaky(failures=1, error=lambda: status_error(503, future))
    assert retry(flaky, on=httpx.HTTPStatusError, max_backoff=60)() == "ok"
    assert sleeps[0] == pytest.approx(30, abs=2)

    sleeps.clear()
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    flaky = Flaky(failures=1, error=lambda: status_error(429, past))
    assert retry(flaky, on=httpx.HTTPStatusError)() == "ok"
    assert sleeps == [0.0]


@pytest.mark.parametrize(
    ("status", "header"),
    [(429, "soon"), (429, "-1"), (429, "nan"), (429, "inf"), (500, "1.5"), (429, None)],
)
def test_malformed_or_irrelevant_retry_after_falls_back_to_backoff(
    sleeps: list[float], status: int, header: str | None
) -> None:
    flaky = Flaky(failures=1, error=lambda: status_error(status, header))
    retry(flaky, on=httpx.HTTPStatusError, initial=0.25, jitter=0)()
    assert sleeps == [0.25]


def test_a_retry_after_longer_than_max_backoff_is_not_retried(sleeps: list[float]) -> None:
    flaky = Flaky(error=lambda: status_error(429, "30"))
    with pytest.raises(httpx.HTTPStatusError):
        retry(flaky, on=httpx.HTTPStatusError, max_backoff=2.0)()
    assert flaky.calls == 1
    assert sleeps == []


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("120", 120.0), (" 0.3 ", 0.3), ("0", 0.0), ("-1", None), ("nan", None), ("soon", None)],
)
def test_retry_after_is_parsed_as_seconds_or_refused(header: str, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


def test_retry_after_as_a_date_is_seconds_from_now_and_never_negative() -> None:
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert parse_retry_after(future) == pytest.approx(30, abs=2)
    assert parse_retry_after(past) == 0.0


def test_retry_after_is_read_only_from_a_429_or_503() -> None:
    assert retry_after(status_error(429, "2")) == 2.0
    assert retry_after(status_error(503, "2")) == 2.0
    assert retry_after(status_error(500, "2")) is None
    assert retry_after(status_error(429)) is None
    assert retry_after(Transient("no response")) is None
