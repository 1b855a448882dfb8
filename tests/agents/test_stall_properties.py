"""For any budget and any stall of the event loop near the end of the tools step, a small
tool-calling agent ends by its deadline (plus the stall and a margin) with every tool call
answered: in what the caller gets and in the checkpoint the next turn reads."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_deadline import DeadlineExceeded, Terminal, with_deadlines
from langgraph_deadline._core.plan import HANDOFF
from langgraph_deadline._graph.messages import unanswered_tool_calls
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall
from tests.agents.support import hang, orders
from tests.chat_models import openai_chat

MARGIN = 0.25  # holds on a loaded 2-core machine


async def _one_run(server: FakeOpenAIServer, timeout: float, at: float, stall: float) -> None:
    agent = create_agent(openai_chat(server), [hang, orders], checkpointer=InMemorySaver())
    graph = with_deadlines(agent, timeout=timeout)
    thread = {"configurable": {"thread_id": "t"}}
    loop = asyncio.get_running_loop()
    loop.call_at(loop.time() + timeout - HANDOFF + at, time.sleep, stall)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded) as ended:  # the hanging tool never answers
        await graph.ainvoke({"messages": [HumanMessage("hi")]}, thread)
    assert time.monotonic() - t0 < timeout + stall + MARGIN
    assert ended.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert ended.value.state is not None
    out: dict[str, Any] = dict(ended.value.state)
    assert unanswered_tool_calls(out["messages"]) == []
    saved = await graph.aget_state(thread)
    assert unanswered_tool_calls(saved.values["messages"]) == []


@settings(max_examples=6, deadline=None)
@given(
    timeout=st.floats(min_value=0.4, max_value=0.7),
    at=st.floats(min_value=-0.04, max_value=0.01),  # from the tools step's end
    stall=st.sampled_from([0.0, 0.005, 0.02, 0.05]),
)
def test_any_stall_near_the_end_leaves_no_tool_call_unanswered(
    timeout: float, at: float, stall: float
) -> None:
    calls = [
        ScriptedToolCall("hang", {"query": "a"}, "call_hang"),
        ScriptedToolCall("orders", {"query": "b"}, "call_orders"),
    ]
    # A server (so a client) per example: each example runs on an event loop of its own.
    with FakeOpenAIServer([ChatReply.tool_calls(*calls)]) as server:
        asyncio.run(_one_run(server, timeout, at, stall))
