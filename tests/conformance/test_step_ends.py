"""How a step ends early, on the graphs people write (issue #10): one test per case.

Each case runs real LangGraph pieces (`ToolNode`, `create_agent`, `Send`, parallel branches,
checkpointers) under `with_deadlines`, and checks what a user would: the run returns a named
terminal, routers do not run on missing output, the checkpoint can be continued, every tool call
has an answer, finished work is kept, a write is never sent twice, the user gets a reply.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import time
from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, RetryPolicy, Send
from typing_extensions import TypedDict

from langgraph_deadline import (
    Closing,
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    budgeted_model,
    deadline_input,
    deadline_tool,
    retry,
    with_deadlines,
)
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall, SlowServer
from langgraph_deadline.types import StepStatus
from tests.agents.support import assert_valid_history, hang, orders
from tests.chat_models import ScriptedChatModel
from tests.chat_models import openai_chat as chat

MARGIN = 1.0  # a loaded 2-core machine


class Chat(MessagesState, DeadlineState):
    pass


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


# 1 ------------------------------------------------------------------------------------------------


def _tutorial_router_graph() -> StateGraph[Any, Any, Any, Any]:
    async def agent(state: Chat) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"messages": [AIMessage("hello")]}

    b = StateGraph(Chat)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode([orders]))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    b.add_edge("tools", "agent")
    return b


@pytest.mark.anyio
@pytest.mark.parametrize("saver", [None, "memory"])
async def test_1_the_tutorial_router_does_not_run_on_a_cut_nodes_missing_output(
    saver: str | None,
) -> None:
    graph = with_deadlines(
        _tutorial_router_graph(),
        timeout=0.3,
        checkpointer=InMemorySaver() if saver else None,
    )
    t0 = time.monotonic()
    out = await graph.ainvoke({"messages": [("user", "hi")]}, _thread("router"))
    assert time.monotonic() - t0 < 0.3 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "agent"
    assert [m.type for m in out["messages"]] == ["human"]


# 2 ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_2_a_turn_cut_in_the_tools_node_leaves_every_tool_call_answered(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(
        ChatReply.tool_calls(
            ScriptedToolCall("orders", {"query": "42"}), ScriptedToolCall("hang", {"query": "42"})
        ),
        ChatReply.text("Order 42 shipped on Monday; I could not check the rest."),
    )
    agent = create_agent(chat(server), [orders, hang], checkpointer=InMemorySaver())
    graph = with_deadlines(agent, timeout=1.0)
    cfg = _thread("poison")

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded) as caught:  # AgentState has no deadline fields
        await graph.ainvoke({"messages": [HumanMessage("where is order 42?")]}, cfg)
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert caught.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert caught.value.outcome.step == "tools"

    for messages in (
        caught.value.state["messages"],
        (await graph.aget_state(cfg)).values["messages"],
    ):
        answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        assert len(answers) == 2
        finished, cut = sorted(answers.values(), key=lambda m: m.name != "orders")
        assert finished.status == "success" and "shipped" in finished.text  # kept
        assert cut.status == "error" and "timeout, not an empty result" in cut.text

    # Turn 2 on the same thread: the model is sent a valid history (no 400 from a real API).
    out = await with_deadlines(agent, timeout=5.0).ainvoke(
        {"messages": [HumanMessage("and the rest?")]}, cfg
    )
    sent = server.requests[-1].body["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert sorted(calls) == sorted(answered)
    assert_valid_history(out["messages"])


# 3 ------------------------------------------------------------------------------------------------


class Log(DeadlineState):
    log: Annotated[list[str], operator.add]


def _chain(*, sync: bool = False) -> StateGraph[Any, Any, Any, Any]:
    """a -> b -> c, where b's first run takes 1 s (async nodes, or sync ones for `invoke`)."""
    slow = {"on": True}

    def a(state: Log) -> dict[str, Any]:
        return {"log": ["a"]}

    def b(state: Log) -> dict[str, Any]:
        if slow["on"]:
            slow["on"] = False
            time.sleep(1.0)
        return {"log": ["b"]}

    async def ab(state: Log) -> dict[str, Any]:
        if slow["on"]:
            slow["on"] = False
            await asyncio.sleep(1.0)
        return {"log": ["b"]}

    def c(state: Log) -> dict[str, Any]:
        return {"log": ["c"]}

    g = StateGraph(Log)
    for name, fn in (("a", a), ("b", b if sync else ab), ("c", c)):
        g.add_node(name, fn)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_3_a_cut_step_stays_pending_and_granting_time_runs_it(kind: str) -> None:
    saver: Any = (
        InMemorySaver()
        if kind == "memory"
        else SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    )
    graph = with_deadlines(_chain(sync=kind == "sqlite"), timeout=0.5, checkpointer=saver)
    cfg = _thread("pending")
    if kind == "sqlite":  # the sync API, as a SqliteSaver user would call it
        out = await asyncio.to_thread(graph.invoke, {"log": []}, cfg)
        snapshot = graph.get_state(cfg)
    else:
        out = await graph.ainvoke({"log": []}, cfg)
        snapshot = await graph.aget_state(cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["log"] == ["a"]
    assert snapshot.next == ("b",)  # not done
    assert snapshot.values["deadline_outcome"].step == "b"  # the outcome is in the checkpoint
    assert [r.name for r in snapshot.values["deadline_trace"]] == ["a", "b"]

    grant = Command(update=deadline_input(5.0))
    if kind == "sqlite":
        again = await asyncio.to_thread(graph.invoke, grant, cfg)
    else:
        again = await graph.ainvoke(grant, cfg)
    assert again["log"] == ["a", "b", "c"]
    assert again["deadline_outcome"].terminal is Terminal.COMPLETED


# 4 ------------------------------------------------------------------------------------------------


class Fan(DeadlineState):
    items: list[int]
    results: Annotated[list[int], operator.add]


class Item(TypedDict):
    item: int


def _fan_out() -> StateGraph[Any, Any, Any, Any]:
    async def worker(payload: Item) -> dict[str, Any]:
        if payload["item"] == 3:
            await asyncio.sleep(30)
        return {"results": [payload["item"]]}

    g = StateGraph(Fan)
    g.add_node("worker", worker)
    g.add_conditional_edges(START, lambda s: [Send("worker", {"item": i}) for i in s["items"]])
    g.add_edge("worker", END)
    return g


@pytest.mark.anyio
@pytest.mark.parametrize("saver", [None, "memory"])
async def test_4_send_fan_out_returns_the_outcome_and_keeps_the_finished_workers(
    saver: str | None,
) -> None:
    graph = with_deadlines(
        _fan_out(),
        timeout=5.0,
        caps={"worker": 0.5},
        checkpointer=InMemorySaver() if saver else None,
    )
    cfg = _thread("fan")
    out = await graph.ainvoke({"items": [1, 2, 3, 4], "results": []}, cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert sorted(out["results"]) == [1, 2, 4]
    statuses = sorted(r.status for r in out["deadline_trace"])
    assert statuses.count(StepStatus.COMPLETED) == 3 and StepStatus.TIMED_OUT in statuses
    if saver:
        stored = (await graph.aget_state(cfg)).values
        assert sorted(stored["results"]) == [1, 2, 4]
        assert len(stored["deadline_trace"]) == 4


@pytest.mark.anyio
async def test_4_parallel_branches_one_failing_one_hanging_keep_their_records() -> None:
    async def broken(state: Log) -> dict[str, Any]:
        raise ValueError("broken")

    async def slow(state: Log) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"log": ["slow"]}

    g = StateGraph(Log)
    g.add_node("broken", broken)
    g.add_node("slow", slow)
    g.add_edge(START, "broken")
    g.add_edge(START, "slow")
    graph = with_deadlines(g, timeout=2.0, checkpointer=InMemorySaver())
    cfg = _thread("branches")
    with pytest.raises(ValueError, match="broken"):
        await graph.ainvoke({"log": []}, cfg)
    stored = (await graph.aget_state(cfg)).values
    names = sorted((r.name, r.status) for r in stored["deadline_trace"])
    assert ("broken", StepStatus.FAILED) in names
    assert any(name == "slow" for name, _ in names)


# 5 ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_5_a_retry_that_cannot_fit_ends_the_run_with_the_outcome(
    slow_server: SlowServer,
) -> None:
    @retry(on=httpx.HTTPStatusError, attempts=3)
    async def fetch() -> str:
        async with httpx.AsyncClient() as client:
            r = await client.get(slow_server.url("/slow?delay=0&status=429&retry_after=5"))
            r.raise_for_status()
            return r.text

    async def node(state: Log) -> dict[str, Any]:
        return {"log": [await fetch()]}

    g = StateGraph(Log)
    g.add_node("fetch", node)
    g.add_edge(START, "fetch")
    graph = with_deadlines(g, timeout=1.0, checkpointer=InMemorySaver())
    cfg = _thread("retry-after")
    out = await graph.ainvoke({"log": []}, cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "fetch"
    assert len(slow_server.requests) == 1  # the 5 s Retry-After did not fit: no second request
    stored = (await graph.aget_state(cfg)).values
    assert stored["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert stored["deadline_trace"]


@pytest.mark.anyio
async def test_5_a_model_call_that_cannot_fit_ends_the_run_with_the_outcome() -> None:
    model = budgeted_model(ScriptedChatModel(), min_viable=5.0)

    async def answer(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(Chat)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    graph = with_deadlines(g, timeout=1.0, checkpointer=InMemorySaver())
    cfg = _thread("model")
    out = await graph.ainvoke({"messages": [HumanMessage("hi")]}, cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    stored = (await graph.aget_state(cfg)).values
    assert stored["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


# 6 ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_6_a_write_that_may_have_left_is_never_sent_again(slow_server: SlowServer) -> None:
    @deadline_tool(cap=2.0, side_effect=True)
    async def place_order(item: str) -> str:
        """Place an order."""
        async with httpx.AsyncClient() as client:
            r = await client.post(slow_server.url("/drop"), json={"item": item})
        return r.text

    model = ScriptedChatModel(
        script=[
            AIMessage(
                "",
                tool_calls=[{"name": "place_order", "args": {"item": "tea"}, "id": "o1"}],
            ),
            AIMessage("I could not confirm the order."),
        ]
    )

    async def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([place_order]), retry_policy=RetryPolicy(max_attempts=3))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    out = await with_deadlines(g, timeout=10.0).ainvoke({"messages": [HumanMessage("tea")]})

    orders_sent = [r for r in slow_server.requests if r.path == "/drop"]
    assert len(orders_sent) == 1  # not by the tool's retry, not by LangGraph's RetryPolicy
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error"
    assert "may already have happened" in answer.text
    assert answer.artifact["langgraph_deadline"]["side_effect_started"] is True


# 7 ------------------------------------------------------------------------------------------------


class Plain(TypedDict):
    log: Annotated[list[str], operator.add]


@pytest.mark.anyio
async def test_7_budgeted_nodes_in_a_hand_built_graph_say_which_step_ran_out() -> None:
    from langgraph_deadline import budgeted, deadline_scope

    @budgeted(cap=0.3)
    async def slow(state: Any) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"log": ["slow"]}

    def graph(schema: Any) -> Any:
        g = StateGraph(schema)
        g.add_node("slow", slow)
        g.add_node("after", lambda s: {"log": ["after"]})
        g.add_edge(START, "slow")
        g.add_edge("slow", "after")
        return g.compile()

    # No deadline fields: DeadlineExceeded names the step (never LangGraph's GraphDrained).
    with pytest.raises(DeadlineExceeded) as caught:
        async with deadline_scope(5.0):
            await graph(Plain).ainvoke({"log": []})
    assert caught.value.outcome.step == "slow"
    assert caught.value.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    # With them, the outcome is in state (with_deadlines also turns the drain into a return).
    out = await with_deadlines(graph(Log)).ainvoke({"log": []})
    assert out["deadline_outcome"].step == "slow" and out["log"] == []


# 8 ------------------------------------------------------------------------------------------------


def _agent_with_tools() -> StateGraph[Any, Any, Any, Any]:
    model = ScriptedChatModel(
        script=[
            AIMessage(
                "",
                tool_calls=[
                    {"name": "orders", "args": {"query": "42"}, "id": "a"},
                    {"name": "hang", "args": {"query": "42"}, "id": "b"},
                ],
            )
        ]
    )

    async def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([orders, hang]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g


@pytest.mark.anyio
async def test_8_with_a_reserve_the_user_gets_a_reply_saying_what_is_missing() -> None:
    saver = InMemorySaver()
    cfg = _thread("reply")
    graph = with_deadlines(_agent_with_tools(), timeout=1.0, reserve=0.2, checkpointer=saver)
    out = await graph.ainvoke({"messages": [HumanMessage("where is order 42?")]}, cfg)
    messages: list[AnyMessage] = out["messages"]
    assert_valid_history(messages)
    reply = messages[-1]
    assert "ran out of time" in reply.text
    assert "orders: order 42 shipped on Monday" in reply.text  # the sibling that finished
    assert "No result in time from: hang" in reply.text
    stored = (await graph.aget_state(cfg)).values
    assert stored["messages"][-1].text == reply.text  # the next turn's history has it too

    quiet = await with_deadlines(
        _agent_with_tools(),
        timeout=1.0,
        reserve=0.2,
        closing=Closing(message=False),
    ).ainvoke({"messages": [HumanMessage("where is order 42?")]})
    assert isinstance(quiet["messages"][-1], ToolMessage)
