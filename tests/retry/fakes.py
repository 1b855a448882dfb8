"""Fakes shared by the retry tests: a flaky function, its error, an HTTP status error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

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


def status_error(status: int, retry_after: str | None = None) -> httpx.HTTPStatusError:
    """The error `httpx` raises for a `status` response, with a `Retry-After` when given."""
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    request = httpx.Request("GET", "http://test/slow")
    response = httpx.Response(status, headers=headers, request=request)
    return httpx.HTTPStatusError(f"{status}", request=request, response=response)
