"""ToolOptions: a tool's options checked once, read back from the tool, never changed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import httpx
import pytest

from langgraph_deadline import InMemoryStaleCache, Retries, deadline_tool
from langgraph_deadline._tools.options import ToolOptions


def test_checked_options_have_times_as_floats() -> None:
    checked = ToolOptions(cap=2, min_viable=1).checked("search")
    assert checked == ToolOptions(cap=2.0, min_viable=1.0)
    assert isinstance(checked.cap, float) and isinstance(checked.min_viable, float)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        (ToolOptions(cap=-1), ValueError, "cap"),
        (ToolOptions(cache=InMemoryStaleCache()), ValueError, "'search': a stale cache"),
        (ToolOptions(read_only=True, side_effect=True), ValueError, "exclude each other"),
        (ToolOptions(read_only=True, cache={}), TypeError, "StaleCache"),  # type: ignore[arg-type]
        (ToolOptions(message=3), TypeError, "format string"),  # type: ignore[arg-type]
        (ToolOptions(retries=httpx.HTTPError), TypeError, "Retries"),  # type: ignore[arg-type]
    ],
)
def test_bad_options_name_the_tool_and_the_option(
    options: ToolOptions, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        options.checked("search")


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Retries(int), TypeError, "exception type"),
        (lambda: Retries(httpx.HTTPError, attempts=0), ValueError, "attempts"),
        (lambda: Retries(httpx.HTTPError, attempts=True), ValueError, "attempts"),
        (lambda: Retries(httpx.HTTPError, idempotency_key="k"), TypeError, "idempotency_key"),
    ],
)
def test_bad_retries_are_refused_when_made(
    make: Callable[[], Retries], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        make()


def test_a_tool_shows_its_options_as_one_value_it_cannot_change() -> None:
    @deadline_tool(cap=3, retries=Retries(httpx.HTTPStatusError, attempts=2))
    def search(query: str) -> str:
        """Search."""
        return query

    opts = search.options
    assert (opts.cap, opts.retries) == (3.0, Retries(httpx.HTTPStatusError, attempts=2))
    assert (opts.read_only, opts.side_effect, opts.cache) == (False, False, None)
    assert not hasattr(search, "attempts")  # no property mirrors what the value shows
    with pytest.raises(dataclasses.FrozenInstanceError):
        search.options.cap = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="no field"):
        search.cap = 1.0  # type: ignore[misc]
