"""An agent run ends the same way whichever of its timers fires first: the tools step's own
cut, or the run's backstop (when the event loop stalls past both instants, or the step takes
longer than the hand-off to end). Either way: the step's record, the outcome, and an answer
for every open tool call, so the next turn sends the model a valid history.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_deadline import DeadlineExceeded, Terminal, with_deadlines
from langgraph_deadline._core.plan import HANDOFF
from langgraph_deadline._graph.messages import unanswered_tool_calls
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.agents.support import MARGIN, hang
from tests.chat_models import openai_chat

pytestmark = pytest.mark.anyio

TIMEOUT = 1.0
THREAD = {"configurable": {"thread_id": "t"}}


async def _ended(graph: Any, text: str) -> tuple[dict[str, Any], Any]:
    """The state and outcome of a run that ends early (create_agent's state has no deadline
    fields: it raises, with both)."""
    with pytest.raises(DeadlineExceeded) as caught:
        await graph.ainvoke({"messages": [HumanMessage(text)]}, THREAD)
    assert caught.value.state is not None
    return dict(caught.value.state), caught.value.outcome


async def _second_turn_roles(graph: Any, server: FakeOpenAIServer) -> list[str]:
    await graph.ainvoke({"messages": [HumanMessage("and now?")]}, THREAD)
    return [m["role"] for m in server.requests[-1].body["messages"]]


@pytest.mark.parametrize("stall", [0.02, 0.05])
@pytest.mark.parametrize("before", [0.0, 0.004, 0.008])
async def test_a_stall_as_the_tools_step_runs_out_still_answers_its_tool_call(
    before: float, stall: float
) -> None:
    replies = [ChatReply.tool_call("hang", {"query": "x"}, id="call_1"), ChatReply.text("ok")]
    with FakeOpenAIServer(replies) as server:
        agent = create_agent(openai_chat(server), [hang], checkpointer=InMemorySaver())
        graph = with_deadlines(agent, timeout=TIMEOUT)
        loop = asyncio.get_running_loop()
        step_end = loop.time() + TIMEOUT - HANDOFF  # where the tools step's budget ends
        # The loop blocks from just before the step's end to past the run's deadline: both
        # timers are due when it comes back.
        loop.call_at(step_end - before, time.sleep, stall)
        t0 = time.monotonic()
        state, outcome = await _ended(graph, "where is order 42?")
        assert time.monotonic() - t0 < TIMEOUT + stall + MARGIN
        assert outcome.terminal is Terminal.DEADLINE_EXCEEDED
        assert outcome.step == "tools"  # the step's own end, not "steps in flight"
        assert unanswered_tool_calls(state["messages"]) == []
        saved = await graph.aget_state(THREAD)
        assert unanswered_tool_calls(saved.values["messages"]) == []
        assert saved.next == ("tools",)  # pending, as when it ends itself: a grant re-runs it
        assert await _second_turn_roles(graph, server) == ["user", "assistant", "tool", "user"]


async def test_when_the_backstop_fires_first_the_open_tool_call_is_answered_all_the_same() -> None:
    @tool
    async def slow_to_stop(query: str) -> str:
        """A lookup whose clean-up outlasts the hand-off before the run's backstop."""
        try:
            await asyncio.sleep(3600)
        finally:
            with anyio.CancelScope(shield=True):
                await asyncio.sleep(0.2)
        return "never"

    replies = [
        ChatReply.tool_call("slow_to_stop", {"query": "x"}, id="call_1"),
        ChatReply.text("ok"),
    ]
    with FakeOpenAIServer(replies) as server:
        agent = create_agent(openai_chat(server), [slow_to_stop], checkpointer=InMemorySaver())
        graph = with_deadlines(agent, timeout=TIMEOUT)
        t0 = time.monotonic()
        state, outcome = await _ended(graph, "where is order 42?")
        assert time.monotonic() - t0 < TIMEOUT + 0.2 + MARGIN
        assert outcome.terminal is Terminal.DEADLINE_EXCEEDED
        (answer,) = [m for m in state["messages"] if m.type == "tool"]
        assert answer.tool_call_id == "call_1" and answer.status == "error"
        assert "timeout" in answer.text.lower() or "time" in answer.text.lower()
        saved = await graph.aget_state(THREAD)
        assert unanswered_tool_calls(saved.values["messages"]) == []
        assert saved.next == ("tools",)  # pending: a grant re-runs it, its answers removed
        assert await _second_turn_roles(graph, server) == ["user", "assistant", "tool", "user"]
