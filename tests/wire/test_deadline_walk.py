"""The deadline's way, read as a newcomer reads it: from `with_deadlines(...)` to the header of
a node's outgoing httpx request, through how many of our modules (issue #31: at most 10)."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import httpx
import pytest
from langgraph.graph import START, StateGraph

from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline._core.deadline import Deadline
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.testing import SlowServer

MOST_MODULES = 10


class _State(DeadlineState):
    n: int


@pytest.mark.anyio
async def test_the_deadline_reaches_an_http_request_through_at_most_ten_modules() -> None:
    holding: list[str] = []  # our modules whose functions were handed the run's deadline

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or "/langgraph_deadline/" not in frame.f_code.co_filename:
            return
        module = frame.f_code.co_filename.split("/langgraph_deadline/")[-1]
        if module not in holding and any(isinstance(v, Deadline) for v in frame.f_locals.values()):
            holding.append(module)

    sent: list[str | None] = []
    with SlowServer() as server:
        async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:

            async def fetch(state: _State) -> dict[str, int]:
                answer = await client.get(server.url("/slow"), params={"delay": 0})
                sent.append(answer.request.headers.get("x-request-timeout-ms"))
                return {"n": state["n"] + 1}

            builder = StateGraph(_State)
            builder.add_node("fetch", fetch)
            builder.add_edge(START, "fetch")
            graph = with_deadlines(builder, timeout=5.0)
            await graph.ainvoke({"n": 0})  # warm: first-use imports are not the way
            sys.setprofile(watch)
            try:
                out = await graph.ainvoke({"n": 0})
            finally:
                sys.setprofile(None)
    assert out["n"] == 1 and sent[-1] is not None  # the request carried the deadline
    assert "_graph/inputs.py" in holding and "_core/headers.py" in holding  # entry, wire
    assert len(holding) <= MOST_MODULES, holding
