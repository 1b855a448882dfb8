"""`deadline_tool(idle_cap=...)`: a tool whose HTTP response body stops arriving (read through an
httpx client with `deadline_hooks`) is cut as stalled near its idle cap, answers the model that
it stalled, and the server sees the connection closed; a body that keeps trickling is not cut.
"""

from __future__ import annotations

import math
import time

import httpx
import pytest
from langchain_core.messages import ToolMessage

from langgraph_deadline import StepRecord, deadline_scope, deadline_tool
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

IDLE = 0.3
MARGIN = 0.5


def _fetcher(server: SlowServer, query: str) -> object:
    @deadline_tool(cap=5.0, idle_cap=IDLE)
    async def fetch(q: str) -> str:
        """Fetch a long document."""
        hooks: dict[str, list[object]] = dict(deadline_hooks())  # type: ignore[arg-type]
        async with (
            httpx.AsyncClient(event_hooks=hooks) as client,  # type: ignore[arg-type]
            client.stream("GET", server.url(f"/trickle?{query}")) as response,
        ):
            return "".join([chunk async for chunk in response.aiter_text()])

    return fetch


def _call(q: str = "x") -> dict[str, object]:
    return {"name": "fetch", "args": {"q": q}, "id": "call-1", "type": "tool_call"}


@pytest.mark.anyio
async def test_a_response_body_that_stops_is_cut_as_stalled(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    fetch = _fetcher(slow_server, "chunks=40&interval=0.01&stall_after=5")
    start = time.monotonic()
    async with deadline_scope(5.0):
        message = await fetch.ainvoke(_call())  # type: ignore[attr-defined]
    took = time.monotonic() - start

    assert isinstance(message, ToolMessage) and message.status == "error"
    assert "no progress for 0.3 s" in str(message.content)
    assert message.artifact["langgraph_deadline"]["stalled"] is True
    (record,) = [r for r in steps if r.kind == "tool"]
    assert (record.status, record.cancel_source) == (StepStatus.TIMED_OUT, "stalled")
    assert took < IDLE + MARGIN + 0.5  # cut near its idle cap, far from its 5 s cap
    assert slow_server.wait_disconnected(2.0)  # the connection was really closed


@pytest.mark.anyio
async def test_a_body_that_keeps_trickling_is_not_cut(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    fetch = _fetcher(slow_server, f"chunks=6&interval={IDLE * 0.5}")
    async with deadline_scope(5.0):
        message = await fetch.ainvoke(_call())  # type: ignore[attr-defined]
    assert "chunk 5" in str(message.content)
    (record,) = [r for r in steps if r.kind == "tool"]
    assert record.status is StepStatus.COMPLETED and not record.stalled
    assert record.gap_ms is not None and record.gap_ms < IDLE * 1000


@pytest.mark.parametrize("bad", [-0.5, 0.0, math.nan, math.inf])
def test_a_bad_idle_cap_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match="idle_cap"):

        @deadline_tool(idle_cap=bad)
        async def fetch(q: str) -> str:
            """Fetch."""
            return q
