"""A sync node's model stream ends at the node's budget: the worker thread that runs the node
cannot be stopped, but a LangChain model's stream can, at its first token past the budget, in
any sync node (whatever its state) and any sync `@task`. Without it the abandoned thread streamed
the whole answer after the run had returned, paying for every token. A real `ChatOpenAI` (sync
client) against the local streaming server, which records when the client left."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda
from langgraph.func import entrypoint, task
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_deadline import DeadlineExceeded, DeadlineState, Terminal, with_deadlines
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.chat_models import openai_chat

BUDGET = 0.5
MARGIN = 0.5  # a loaded 2-core machine


class Question(DeadlineState, total=False):
    question: str
    answer: str


class Chat(MessagesState, DeadlineState):
    pass


def _stopped_at_the_budget(server: FakeOpenAIServer, started: float) -> None:
    """The stream's client left soon after the budget, and nothing was sent after it left."""
    assert server.wait_disconnected(3.0), "the stream ran on behind the run"
    (request,) = server.requests
    assert request.disconnected is not None
    assert request.disconnected < started + BUDGET + MARGIN
    assert request.chunks_sent_after(request.disconnected) == 0


@pytest.fixture
def counting(server: FakeOpenAIServer) -> FakeOpenAIServer:
    server.chunk_interval = 0.02
    server.enqueue(ChatReply.counting(200))  # 4 s of tokens
    return server


def _run(graph: Any, inputs: Any, entry: str) -> Any:
    """`invoke`, or `ainvoke` (LangGraph runs a sync node on a thread of its executor)."""
    if entry == "invoke":
        return graph.invoke(inputs)
    return asyncio.run(graph.ainvoke(inputs))


@pytest.mark.parametrize("entry", ["invoke", "ainvoke"])
def test_a_sync_node_of_any_state_stops_its_model_stream_at_its_budget(
    counting: FakeOpenAIServer, entry: str
) -> None:
    model = openai_chat(counting)

    def writer(state: Question) -> dict[str, Any]:
        return {"answer": model.invoke(state["question"]).text}

    builder = StateGraph(Question)
    builder.add_node("writer", writer)
    builder.add_edge(START, "writer")
    t0 = time.monotonic()
    out = _run(with_deadlines(builder, timeout=BUDGET), {"question": "count"}, entry)
    assert time.monotonic() - t0 < BUDGET + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    _stopped_at_the_budget(counting, t0)


@pytest.mark.parametrize("entry", ["invoke", "ainvoke"])
@pytest.mark.parametrize("form", ["function", "runnable"])
def test_a_sync_messages_node_stops_its_model_stream_at_its_budget(
    counting: FakeOpenAIServer, entry: str, form: str
) -> None:
    model = openai_chat(counting)

    def writer(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(Chat)
    # a sync-only Runnable, under `ainvoke`, runs on a thread of LangChain's executor
    builder.add_node("writer", writer if form == "function" else RunnableLambda(writer))
    builder.add_edge(START, "writer")
    t0 = time.monotonic()
    # with a reserve, the node also keeps what it had said for the closing reply
    graph = with_deadlines(builder, timeout=BUDGET + 0.2, reserve=0.2)
    out = _run(graph, {"messages": [HumanMessage("count")]}, entry)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    _stopped_at_the_budget(counting, t0)


def test_a_sync_task_stops_its_model_stream_at_its_budget(counting: FakeOpenAIServer) -> None:
    model = openai_chat(counting)

    @task
    def write(question: str) -> str:
        return model.invoke(question).text

    @entrypoint()
    def answer(question: str) -> str:
        return write(question).result()

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        with_deadlines(answer, timeout=BUDGET).invoke("count")
    assert time.monotonic() - t0 < BUDGET + MARGIN
    _stopped_at_the_budget(counting, t0)
