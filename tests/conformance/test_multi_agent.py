"""Multi-agent systems this project did not write, under one deadline per user turn:
`langgraph-swarm` (agents with `DeadlineMiddleware`) and `langgraph-supervisor` (under
`with_deadlines`), driving a real `ChatOpenAI` against the local OpenAI-compatible server."""

from __future__ import annotations

import time
import warnings
from typing import Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_swarm import SwarmState, create_handoff_tool, create_swarm

from langgraph_deadline import DeadlineState, Terminal, budgeted_model, terminal_of, with_deadlines
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.agents.support import MARGIN, ask, assert_valid_history
from tests.chat_models import openai_chat as chat
from tests.conformance.support import shape

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # it imports create_react_agent
    from langgraph.prebuilt.chat_agent_executor import AgentState
    from langgraph_supervisor import create_supervisor

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


class SwarmDeadlineState(SwarmState, DeadlineState):
    """The swarm's state with the deadline fields: the parent learns how the turn ended."""


class SupervisorDeadlineState(AgentState, DeadlineState):  # type: ignore[misc]
    """The supervisor's state with the deadline fields."""


def _swarm(
    server: FakeOpenAIServer, *, middleware: bool, checkpointer: Any = None, timeout: float = 2.0
) -> Any:
    def agent(name: str, other: str) -> Any:
        extra = [DeadlineMiddleware(timeout=timeout)] if middleware else []
        tools = [create_handoff_tool(agent_name=other)]
        return create_agent(chat(server), tools, middleware=extra, name=name)

    builder = create_swarm(
        [agent("alice", "bob"), agent("bob", "alice")],
        default_active_agent="alice",
        state_schema=SwarmDeadlineState if middleware else SwarmState,
    )
    return builder.compile(checkpointer=checkpointer)


def _swarm_builder(server: FakeOpenAIServer, *, timeout: float) -> Any:
    return _swarm(server, middleware=True, timeout=timeout).builder


@pytest.mark.anyio
async def test_a_swarm_with_plenty_of_time_answers_as_without_the_middleware(
    server: FakeOpenAIServer,
) -> None:
    outs = []
    for middleware in (False, True):
        server.enqueue(ChatReply.tool_call("transfer_to_bob"), ChatReply.text("bob: shipped"))
        outs.append(await _swarm(server, middleware=middleware).ainvoke(ask()))
    plain, budgeted = outs
    assert shape(budgeted["messages"]) == shape(plain["messages"])
    assert budgeted["active_agent"] == plain["active_agent"] == "bob"
    assert terminal_of(budgeted) is Terminal.COMPLETED


@pytest.mark.anyio
async def test_a_swarm_handoff_keeps_the_turns_deadline_and_the_parent_learns_it_ran_out(
    server: FakeOpenAIServer,
) -> None:
    # alice takes 1.2 s to hand off; bob's model hangs. One 2 s turn, not 1.2 s + a fresh 2 s.
    server.enqueue(ChatReply.tool_call("transfer_to_bob", delay=1.2), ChatReply.hang())
    t0 = time.monotonic()
    out = await _swarm(server, middleware=True).ainvoke(ask())
    assert time.monotonic() - t0 < 2.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "model"
    assert server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])
    names = [r.name for r in out["deadline_trace"]]
    assert names == ["model", "transfer_to_bob", "model"]  # alice's steps, then bob's


@pytest.mark.anyio
@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "with_deadlines"])
async def test_a_swarm_gives_the_next_user_turn_a_fresh_deadline(
    server: FakeOpenAIServer, wrapped: bool
) -> None:
    saver = InMemorySaver()
    swarm = (
        with_deadlines(_swarm_builder(server, timeout=0.5), checkpointer=saver)
        if wrapped
        else _swarm(server, middleware=True, checkpointer=saver, timeout=0.5)
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    server.enqueue(ChatReply.tool_call("transfer_to_bob"), ChatReply.text("first"))
    first = await swarm.ainvoke(ask(), config)
    await anyio.sleep(0.6)  # the first turn's deadline has passed
    server.enqueue(ChatReply.text("second", delay=0.2))
    second = await swarm.ainvoke({"messages": [HumanMessage("and now?")]}, config)
    assert terminal_of(first) is terminal_of(second) is Terminal.COMPLETED
    assert second["messages"][-1].text == "second"
    if wrapped:  # a plain parent keeps the earliest deadline it saw: it has no turn start
        assert second["deadline"] > first["deadline"]


def _supervisor(server: FakeOpenAIServer, *, middleware: bool, tools: Any = ()) -> Any:
    extra = [DeadlineMiddleware(timeout=2.0)] if middleware else []
    worker = create_agent(chat(server), list(tools), middleware=extra, name="worker")
    return create_supervisor(
        [worker],
        model=chat(server),
        state_schema=SupervisorDeadlineState if middleware else None,
    )


@tool
async def lookup(query: str) -> str:
    """Look up an order (async)."""
    return f"order 42 shipped ({query})"


def _supervisor_script(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ChatReply.tool_call("transfer_to_worker"),
        ChatReply.tool_call("lookup", {"query": "42"}),
        ChatReply.text("worker: shipped"),
        ChatReply.text("supervisor: it shipped"),
    )


@pytest.mark.anyio
async def test_a_supervisor_with_plenty_of_time_answers_as_without_deadlines(
    server: FakeOpenAIServer,
) -> None:
    _supervisor_script(server)
    plain = await _supervisor(server, middleware=False, tools=[lookup]).compile().ainvoke(ask())
    _supervisor_script(server)
    graph = with_deadlines(_supervisor(server, middleware=True, tools=[lookup]), timeout=10.0)
    budgeted = await graph.ainvoke(ask())
    assert shape(budgeted["messages"]) == shape(plain["messages"])
    assert terminal_of(budgeted) is Terminal.COMPLETED


@tool
def lookup_sync(query: str) -> str:
    """Look up an order."""
    return f"order 42 shipped ({query})"


def test_a_supervisor_runs_its_sync_bodies_under_invoke(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ChatReply.tool_call("transfer_to_worker"),
        ChatReply.tool_call("lookup_sync", {"query": "42"}),
        ChatReply.text("worker: shipped"),
        ChatReply.text("supervisor: it shipped"),
    )
    graph = with_deadlines(_supervisor(server, middleware=True, tools=[lookup_sync]), timeout=10.0)
    out = graph.invoke(ask())
    assert out["messages"][-1].text == "supervisor: it shipped"
    assert terminal_of(out) is Terminal.COMPLETED


async def _worker_runs_out(server: FakeOpenAIServer) -> tuple[dict[str, Any], float]:
    server.enqueue(ChatReply.tool_call("transfer_to_worker", delay=1.2), ChatReply.hang())
    graph = with_deadlines(_supervisor(server, middleware=True), timeout=2.0, reserve=0.3)
    t0 = time.monotonic()
    out = await graph.ainvoke(ask())
    return out, time.monotonic() - t0


@pytest.mark.anyio
async def test_a_supervisors_worker_that_runs_out_ends_the_turn_as_deadline_exceeded(
    server: FakeOpenAIServer,
) -> None:
    out, elapsed = await _worker_runs_out(server)
    assert elapsed < 2.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "model"  # the worker's model call
    assert server.wait_disconnected(MARGIN)
    assert_valid_history([*out["messages"], AIMessage("end")])  # every tool call answered
    replies = [m for m in out["messages"] if isinstance(m, AIMessage) and not m.tool_calls]
    assert "ran out of time" in replies[-1].text  # the worker's closing reply


@pytest.mark.anyio
async def test_a_supervisors_worker_that_runs_out_leaves_a_final_ai_message(
    server: FakeOpenAIServer,
) -> None:
    out, _ = await _worker_runs_out(server)
    assert_valid_history(out["messages"])


@pytest.mark.anyio
@pytest.mark.parametrize("budgeted", [False, True], ids=["model", "budgeted_model"])
async def test_a_supervisors_own_model_is_closed_at_the_deadline(
    server: FakeOpenAIServer, budgeted: bool
) -> None:
    server.enqueue(ChatReply.hang())
    builder = _supervisor(server, middleware=True)
    if budgeted:
        worker = create_agent(chat(server), [], name="worker")
        builder = create_supervisor(
            [worker], model=budgeted_model(chat(server)), state_schema=SupervisorDeadlineState
        )
    graph = with_deadlines(builder, timeout=1.0, reserve=0.2)
    t0 = time.monotonic()
    out = await graph.ainvoke(ask())
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])  # the reserve buys a closing reply
