"""LangGraph's own patterns under one deadline: `Send` map-reduce, subgraphs (a plain one and a
`create_agent` agent with `DeadlineMiddleware`), `interrupt()` + `Command(resume=...)` on an
`InMemorySaver` and a SQLite checkpointer."""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

from langgraph_deadline import DeadlineState, Terminal, terminal_of, with_deadlines
from langgraph_deadline.agents import DeadlineAgentState, DeadlineMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.agents.support import MARGIN, ask, assert_valid_history
from tests.chat_models import ScriptedChatModel, tool_calls
from tests.chat_models import openai_chat as chat
from tests.conformance.support import shape

# -- Send map-reduce ------------------------------------------------------------------------------


class MapState(DeadlineState):
    topics: list[str]
    answers: Annotated[list[str], operator.add]


class Topic(TypedDict):
    topic: str


def _map_reduce(model: Any) -> StateGraph[Any, Any, Any, Any]:
    def fan_out(state: MapState) -> list[Send]:
        return [Send("answer", {"topic": t}) for t in state["topics"]]

    async def answer(state: Topic) -> dict[str, Any]:
        reply = await model.ainvoke([HumanMessage(f"about {state['topic']}")])
        return {"answers": [f"{state['topic']}: {reply.text}"]}

    builder = StateGraph(MapState)
    builder.add_node("answer", answer)
    builder.add_conditional_edges(START, fan_out, ["answer"])
    builder.add_edge("answer", END)
    return builder


@pytest.mark.anyio
async def test_send_map_reduce_with_plenty_of_time_answers_as_unwrapped() -> None:
    def model() -> ScriptedChatModel:
        return ScriptedChatModel(script=[AIMessage("one"), AIMessage("two")])

    topics = {"topics": ["a", "b"]}
    plain = await _map_reduce(model()).compile().ainvoke(topics)
    out = await with_deadlines(_map_reduce(model()), timeout=10.0).ainvoke(topics)
    assert sorted(out["answers"]) == sorted(plain["answers"])
    assert terminal_of(out) is Terminal.COMPLETED


@pytest.mark.anyio
async def test_send_map_reduce_with_a_hanging_worker_ends_by_the_deadline(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.text("quick"), ChatReply.hang())
    graph = with_deadlines(_map_reduce(chat(server)), timeout=1.0)
    t0 = time.monotonic()
    out = await graph.ainvoke({"topics": ["a", "b"]})
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert server.wait_disconnected(MARGIN)
    assert len(out["answers"]) == 1  # the finished worker keeps its answer


# -- subgraphs ------------------------------------------------------------------------------------


class Chat(MessagesState, DeadlineState):
    pass


def _parent(child: Any) -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Chat)
    builder.add_node("child", child)
    builder.add_edge(START, "child")
    builder.add_edge("child", END)
    return builder


def _plain_child(model: Any) -> Any:
    async def think(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("think", think)
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    return builder.compile()


def test_a_graph_called_by_a_tool_that_runs_out_leaves_the_agent_going(saver: Any) -> None:
    # A tool that runs a `with_deadlines` graph of its own (a research sub-agent with its own
    # 0.2 s) inside an agent's run: when that graph runs out, the tool answers with its outcome
    # and the agent goes on to its model. (Its drain used to stop the agent's run too.)
    def slow(state: Chat) -> dict[str, Any]:
        time.sleep(1.0)  # a sync body: abandoned on its thread at the research graph's deadline
        return {"messages": [AIMessage("found it")]}

    research_graph = with_deadlines(
        StateGraph(Chat).add_node("slow", slow).add_edge(START, "slow"), timeout=0.2
    )

    @tool
    def research(topic: str) -> str:
        """Research a topic."""
        out = research_graph.invoke({"messages": [HumanMessage(topic)]})
        return f"research ended {out['deadline_outcome'].terminal.value}"

    model = ScriptedChatModel(
        script=[tool_calls(("research", {"topic": "boots"})), AIMessage("the best I have")]
    )
    agent = create_agent(
        model, [research], middleware=[DeadlineMiddleware(timeout=30.0)], checkpointer=saver
    )
    out = agent.invoke(ask(), {"configurable": {"thread_id": "t"}})
    assert [m.content for m in out["messages"][-2:]] == [
        "research ended deadline_exceeded",
        "the best I have",
    ]
    assert terminal_of(out) is Terminal.COMPLETED
    assert_valid_history(out["messages"])


@pytest.mark.anyio
async def test_a_subgraph_with_plenty_of_time_answers_as_unwrapped() -> None:
    def child() -> Any:
        return _plain_child(ScriptedChatModel(script=[AIMessage("from the child")]))

    plain = await _parent(child()).compile().ainvoke(ask())
    out = await with_deadlines(_parent(child()), timeout=10.0).ainvoke(ask())
    assert shape(out["messages"]) == shape(plain["messages"])
    assert terminal_of(out) is Terminal.COMPLETED


@pytest.mark.anyio
async def test_a_hanging_model_in_a_subgraph_ends_the_parent_by_its_deadline(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.hang())
    graph = with_deadlines(_parent(_plain_child(chat(server))), timeout=1.0, reserve=0.2)
    t0 = time.monotonic()
    out = await graph.ainvoke(ask())
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])


@pytest.mark.anyio
async def test_an_agent_subgraph_that_runs_out_tells_its_parent(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.hang())
    agent = create_agent(chat(server), [], middleware=[DeadlineMiddleware(timeout=30.0)])
    graph = with_deadlines(_parent(agent), timeout=1.0, reserve=0.2)
    t0 = time.monotonic()
    out = await graph.ainvoke(ask())
    assert time.monotonic() - t0 < 1.0 + MARGIN  # the parent's deadline, not the agent's 30 s
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "model"  # the agent's model call ran out
    assert server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])


@pytest.mark.anyio
async def test_a_busy_loop_still_names_the_agents_model_call_where_the_time_ran_out(
    server: FakeOpenAIServer,
) -> None:
    # The loop is held across the deadline, so the model call's cut and its node's are due
    # together, and the node's is handled first: the run still ran out in the model call.
    server.enqueue(ChatReply.hang())
    agent = create_agent(chat(server), [], middleware=[DeadlineMiddleware(timeout=30.0)])
    graph = with_deadlines(_parent(agent), timeout=1.0, reserve=0.2)

    async def hold_the_loop() -> None:
        await anyio.sleep(0.6)
        time.sleep(0.4)  # noqa: ASYNC251  (holds the loop over both cuts: 0.79 s and 0.8 s)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_the_loop)
        out = await graph.ainvoke(ask())
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "model"
    assert "model" in out["deadline_outcome"].reason
    assert server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])


# -- interrupt() + Command(resume=...) ------------------------------------------------------------


@tool
def refund(order: str) -> str:
    """Refund an order, once a human approves."""
    answer = interrupt({"approve": order})
    return f"refund of {order}: {answer}"


def _refund_script() -> ScriptedChatModel:
    return ScriptedChatModel(
        script=[tool_calls(("refund", {"order": "42"})), AIMessage("refunded")]
    )


def _resume_twice(graph: Any, wait: float = 0.0) -> tuple[Any, Any]:
    config: Any = {"configurable": {"thread_id": "t"}}
    paused = graph.invoke(ask("refund order 42"), config)
    time.sleep(wait)
    return paused, graph.invoke(Command(resume="approved"), config)


def test_an_interrupted_agent_with_plenty_of_time_resumes_as_unwrapped(saver: Any) -> None:
    plain_paused, plain = _resume_twice(
        create_agent(_refund_script(), [refund], checkpointer=saver)
    )
    agent = create_agent(
        _refund_script(),
        [refund],
        middleware=[DeadlineMiddleware(timeout=10.0)],
        checkpointer=saver,
    )
    config: Any = {"configurable": {"thread_id": "u"}}
    paused = agent.invoke(ask("refund order 42"), config)
    out = agent.invoke(Command(resume="approved"), config)
    assert terminal_of(paused) is None and "__interrupt__" in plain_paused  # paused: no end yet
    assert shape(out["messages"]) == shape(plain["messages"])
    assert terminal_of(out) is Terminal.COMPLETED


def test_a_resume_after_the_deadline_ends_the_run_with_a_reply(saver: Any) -> None:
    agent = create_agent(
        _refund_script(),
        [refund],
        middleware=[DeadlineMiddleware(timeout=0.5)],
        checkpointer=saver,
    )
    _, out = _resume_twice(agent, wait=0.6)  # the wait for the human spent the budget
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert_valid_history(out["messages"])


def test_with_deadlines_keeps_the_checkpointed_deadline_across_a_resume(saver: Any) -> None:
    builder = create_agent(_refund_script(), [refund], state_schema=DeadlineAgentState).builder
    graph = with_deadlines(builder, timeout=0.5, reserve=0.1, checkpointer=saver)
    paused, out = _resume_twice(graph, wait=0.6)
    assert "__interrupt__" in paused
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED


def test_a_resume_on_time_under_with_deadlines_completes(saver: Any) -> None:
    builder = create_agent(_refund_script(), [refund], state_schema=DeadlineAgentState).builder
    graph = with_deadlines(builder, timeout=10.0, checkpointer=saver)
    _, out = _resume_twice(graph)
    assert out["messages"][-1].text == "refunded"
    assert terminal_of(out) is Terminal.COMPLETED
