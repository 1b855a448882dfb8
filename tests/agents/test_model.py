"""`budgeted_model`: a chat model inside a graph node (or any code under a deadline) whose calls
are refused, cut and recorded by the same rules as the agent middleware's."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import SecretStr

from langgraph_deadline import (
    Deadline,
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    budgeted_model,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline.agents import ModelLimits
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.testing._quiet import assert_nothing_sent_after, await_nothing_sent_after
from langgraph_deadline.types import StepStatus
from tests.chat_models import openai_chat as chat

MARGIN = 0.5
SLOW = 0.05


class State(MessagesState, DeadlineState):
    pass


def _graph(llm: Any) -> StateGraph[Any, Any, Any, Any]:
    async def respond(state: State) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    return builder


@pytest.mark.anyio
async def test_in_a_graph_node_the_model_is_cut_with_the_node_and_the_stream_stops(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    graph = with_deadlines(_graph(budgeted_model(chat(server))), timeout=1.0)

    t0 = time.monotonic()
    out = await graph.ainvoke({"messages": [HumanMessage("count")]})

    assert time.monotonic() - t0 < 1.0 + MARGIN
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "respond"
    kinds = {(r.kind, r.name): r.status for r in out["deadline_trace"]}
    assert kinds == {
        ("model", "gpt-fake"): StepStatus.TIMED_OUT,
        ("node", "respond"): StepStatus.TIMED_OUT,  # timed out with its node, not failed
    }
    await await_nothing_sent_after(server, Deadline.at(out["deadline"]), within=MARGIN)
    assert server.requests[0].disconnected is not None


@pytest.mark.anyio
async def test_a_call_that_fits_completes_and_is_recorded(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.text("hello there"))
    graph = with_deadlines(_graph(budgeted_model(chat(server), name="llm")), timeout=5.0)
    out = await graph.ainvoke({"messages": [HumanMessage("hi")]})
    assert out["messages"][-1].content == "hello there"
    (model,) = [r for r in out["deadline_trace"] if r.kind == "model"]
    assert (model.name, model.status) == ("llm", StepStatus.COMPLETED)
    assert server.requests[0].read_timeout is not None
    assert server.requests[0].read_timeout <= 5.0


@pytest.mark.anyio
async def test_below_min_viable_no_request_is_made(server: FakeOpenAIServer) -> None:
    llm = budgeted_model(chat(server), min_viable=1.0)
    async with deadline_scope(0.3):
        with pytest.raises(DeadlineExceeded, match="not started") as refused:
            await llm.ainvoke("hi")
    assert refused.value.step == "gpt-fake"
    assert server.requests == []


@pytest.mark.anyio
async def test_the_cap_cuts_a_call_without_any_deadline(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    llm = budgeted_model(chat(server), cap=0.5)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await llm.ainvoke("count")
    cut = time.monotonic()
    assert 0.5 <= cut - t0 < 0.5 + MARGIN
    await await_nothing_sent_after(server, t0 + 0.5, within=MARGIN)
    assert server.requests[0].read_timeout == pytest.approx(0.5, abs=0.01)


def test_sync_calls_stop_the_stream_at_the_next_chunk(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    llm = budgeted_model(chat(server), cap=0.5)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        llm.invoke("count")
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert server.wait_disconnected(MARGIN * 2)
    assert_nothing_sent_after(server, t0 + 0.5, chunks=1, within=MARGIN)


@pytest.mark.anyio
async def test_tools_can_be_bound_and_stay_budgeted(server: FakeOpenAIServer) -> None:
    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return order_id

    server.enqueue(ChatReply.tool_call("lookup", {"order_id": "42"}))
    llm = budgeted_model(chat(server), cap=3.0).bind_tools([lookup])
    reply = await llm.ainvoke("where is 42?")
    assert isinstance(reply, AIMessage) and reply.tool_calls[0]["args"] == {"order_id": "42"}
    assert server.requests[0].body["tools"][0]["function"]["name"] == "lookup"
    assert server.requests[0].read_timeout == pytest.approx(3.0)
    assert llm.limits.cap == 3.0


def test_bad_arguments_get_clear_errors() -> None:
    with pytest.raises(ValueError, match="cap"):
        budgeted_model(ChatOpenAI(api_key=SecretStr("test")), cap=-1)
    with pytest.raises(TypeError, match="chat model"):
        budgeted_model("gpt-4o")  # type: ignore[arg-type]


def test_a_models_limits_are_checked_when_made_and_read_back() -> None:
    assert ModelLimits(cap=2, min_viable=1) == ModelLimits(cap=2.0, min_viable=1.0)
    with pytest.raises(TypeError, match="min_viable"):
        ModelLimits(min_viable="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"min_viable \(3.0 s\) is more than cap \(2.0 s\)"):
        ModelLimits(cap=2, min_viable=3)
    llm = budgeted_model(ChatOpenAI(api_key=SecretStr("test")), cap=4, min_viable=1)
    assert llm.limits == ModelLimits(cap=4.0, min_viable=1.0)
    assert not hasattr(llm, "cap")  # no property mirrors what the value shows (#49)


@pytest.mark.anyio
async def test_the_quiet_assertions_fail_with_what_each_request_did(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(5))
    before = time.monotonic()
    await chat(server).ainvoke("count to five")
    await await_nothing_sent_after(server, time.monotonic())  # all of it came before
    with pytest.raises(AssertionError, match=r"5 token chunk\(s\) sent after it") as failed:
        await await_nothing_sent_after(server, before)
    assert "request 0: started +" in str(failed.value)
    with pytest.raises(AssertionError, match=r"1 request\(s\) started after it"):
        assert_nothing_sent_after(server, before, chunks=5)
