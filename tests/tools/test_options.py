"""ToolOptions: a tool's options checked once, read back from the tool, never changed."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from langgraph_deadline import InMemoryStaleCache, deadline_tool
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
        (ToolOptions(retry_on=int), TypeError, "exception type"),  # type: ignore[arg-type]
        (ToolOptions(attempts=0), ValueError, "'search': attempts"),
        (ToolOptions(attempts=True), ValueError, "attempts"),
        (ToolOptions(idempotency_key="k"), TypeError, "idempotency_key"),  # type: ignore[arg-type]
    ],
)
def test_bad_options_name_the_tool_and_the_option(
    options: ToolOptions, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        options.checked("search")


def test_a_tool_reads_its_options_but_cannot_change_them() -> None:
    @deadline_tool(cap=3, retry_on=httpx.HTTPStatusError, attempts=2)
    def search(query: str) -> str:
        """Search."""
        return query

    assert (search.cap, search.attempts, search.retry_on) == (3.0, 2, httpx.HTTPStatusError)
    assert (search.read_only, search.side_effect, search.cache) == (False, False, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        search.options.cap = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        search.cap = 1.0  # type: ignore[misc]
