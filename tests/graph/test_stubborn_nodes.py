"""A node that swallows a cancellation (as Python 3.11's `asyncio.wait_for` can) is still cut
at its budget: the cut delivers the cancellation again, as an anyio scope would."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, with_deadlines

pytestmark = pytest.mark.anyio


class _State(DeadlineState):
    log: Annotated[list[str], operator.add]


async def test_a_node_that_swallows_one_cancellation_is_still_cut_at_its_budget() -> None:
    # A real graph, a checkpointer: the node ignores the first cancellation and waits again.
    finished = []

    async def stubborn(state: _State) -> dict[str, Any]:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            finished.append(False)  # swallowed: goes on, as a buggy library would
        await asyncio.sleep(5)
        finished.append(True)
        return {"log": ["stubborn"]}

    b = StateGraph(_State)
    b.add_node("stubborn", stubborn)
    b.add_edge(START, "stubborn")
    b.add_edge("stubborn", END)
    graph = with_deadlines(b, timeout=0.3, checkpointer=InMemorySaver())
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await graph.ainvoke({"log": []}, {"configurable": {"thread_id": "t"}})
    assert loop.time() - started < 2.0  # not 5 s, not 10 s
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "stubborn"
    assert finished == [False]  # the first cancellation was swallowed, the second one ended it
