"""A model cut at the deadline keeps what it had already said: the closing reply of a
`with_deadlines` run starts with the streamed text, marked as cut short, then the note
(docs/concepts.md, rule 7). Against a real `ChatOpenAI` streaming from the local server."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_deadline import Closing, DeadlineExceeded, DeadlineState, Terminal, with_deadlines
from langgraph_deadline._graph.messages import CUT_SHORT
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.agents.support import ask
from tests.chat_models import openai_chat as chat

MARGIN = 1.0  # a loaded 2-core machine
TOKENS = ChatReply.counting(500, chunk_interval=0.02)  # 10 s of "1 2 3 ..."


class Chat(MessagesState, DeadlineState):
    pass


def _writer(model: Any, *, sync: bool = False) -> StateGraph[Any, Any, Any, Any]:
    async def writer(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def sync_writer(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    b = StateGraph(Chat)
    b.add_node("writer", sync_writer if sync else writer)
    b.add_edge(START, "writer")
    return b


def _kept(server: FakeOpenAIServer, text: str, *, closed: bool = True) -> str:
    """The partial answer at the start of `text`, checked against what the server sent: every
    chunk it sent but, at most, the one on the wire when the stream was closed. (A sync node's
    thread cannot be stopped: its stream goes on after the cut, and the reply has what had
    arrived by then.)"""
    partial, note = text.split(f" {CUT_SHORT}\n\n")
    if closed:
        assert server.wait_disconnected(MARGIN)
        sent = server.requests[-1].chunks_sent
        assert 5 <= sent < 500, sent
        streamed = " ".join(str(i) for i in range(1, sent + 1))
        assert streamed.startswith(partial) and len(partial.split()) >= sent - 1
    else:
        assert len(partial.split()) >= 5
    assert note.startswith("I ran out of time")
    return partial


@pytest.mark.anyio
async def test_a_writer_node_cut_mid_answer_keeps_what_it_had_said(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TOKENS)
    graph = with_deadlines(_writer(chat(server)), timeout=1.0, reserve=0.2)

    out = await graph.ainvoke(ask())

    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert [m.type for m in out["messages"]] == ["human", "ai"]
    final = out["messages"][-1]
    partial = _kept(server, final.text)
    assert final.response_metadata["langgraph_deadline"]["cut_short"] == {
        "partial_chars": len(partial)
    }


def test_a_sync_writer_node_cut_mid_answer_keeps_what_it_had_said(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TOKENS)
    graph = with_deadlines(_writer(chat(server), sync=True), timeout=1.0, reserve=0.2)

    out = graph.invoke(ask())

    assert _kept(server, out["messages"][-1].text, closed=False).startswith("1 2 3 4 5")


@pytest.mark.anyio
async def test_create_agents_model_node_cut_mid_answer_keeps_what_it_had_said(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(TOKENS)
    agent = with_deadlines(create_agent(chat(server), []), timeout=1.0, reserve=0.2)

    with pytest.raises(DeadlineExceeded) as caught:  # AgentState has no deadline fields
        await agent.ainvoke(ask())

    assert caught.value.state is not None
    _kept(server, caught.value.state["messages"][-1].text)


@pytest.mark.anyio
async def test_partial_answer_false_leaves_the_cut_text_out(server: FakeOpenAIServer) -> None:
    server.enqueue(TOKENS)
    graph = with_deadlines(
        _writer(chat(server)), timeout=1.0, reserve=0.2, closing=Closing(partial_answer=False)
    )

    out = await graph.ainvoke(ask())

    assert server.requests[-1].chunks_sent >= 5  # it had said something
    final = out["messages"][-1]
    assert final.text.startswith("I ran out of time") and CUT_SHORT not in final.text
    assert "cut_short" not in final.response_metadata["langgraph_deadline"]
