"""`DeadlineMiddleware(budget_note=True)`: each model call is told the seconds left and what the
agent's tools usually take, in its system message; off by default. A real `create_agent`
agent and the real `ChatOpenAI` against the local server: the note is read off the requests
the server received."""

from __future__ import annotations

import re

import pytest
from langchain.agents import create_agent

from langgraph_deadline._agents.note import budget_note
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall
from tests.agents.support import ask, orders
from tests.chat_models import openai_chat as chat

LEFT = re.compile(r"Time left for this request: (\d+\.\d) s\.")


def _system(server: FakeOpenAIServer, i: int) -> str | None:
    first = server.requests[i].body["messages"][0]
    return first["content"] if first["role"] == "system" else None


def test_the_note_says_the_time_left_and_each_tool_s_learned_time() -> None:
    assert budget_note(2.345, [("search", 0.8), ("orders", 1.25)]) == (
        "Time left for this request: 2.3 s. Tool calls usually take (9 in 10 within): "
        "search 0.8 s, orders 1.2 s. When time is short, make fewer tool calls and answer "
        "with what you have before it runs out."
    )
    assert budget_note(-1.0).startswith("Time left for this request: 0.0 s. When time")


@pytest.mark.anyio
async def test_each_model_call_is_told_its_time_left_and_the_tools_learned_times(
    server: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    for _ in range(25):
        book.record("tool", "orders", 0.3)
    server.enqueue(
        ChatReply.tool_calls(ScriptedToolCall("orders", {"query": "42"})),
        ChatReply.text("Order 42 shipped on Monday.", delay=0.3),
    )
    middleware = DeadlineMiddleware(timeout=5.0, budget_note=True, book=book)
    agent = create_agent(
        chat(server), [orders], system_prompt="You are a shop assistant.", middleware=[middleware]
    )
    await agent.ainvoke(ask())

    first, second = _system(server, 0), _system(server, 1)
    assert first is not None and second is not None
    assert first.startswith("You are a shop assistant.\n\nTime left for this request: ")
    assert "Tool calls usually take (9 in 10 within): orders 0.3 s." in first
    left = [float(m.group(1)) for m in map(LEFT.search, (first, second)) if m]
    assert len(left) == 2 and 4.0 <= left[0] <= 5.0 and left[1] <= left[0]


@pytest.mark.anyio
async def test_a_cold_book_gives_the_time_only_and_no_note_is_the_default(
    server: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    book.record("tool", "orders", 0.3)  # one sample: not enough to tell the model
    server.enqueue(ChatReply.text("one"), ChatReply.text("two"))
    noted = DeadlineMiddleware(timeout=5.0, budget_note=True, book=book)
    await create_agent(chat(server), [orders], middleware=[noted]).ainvoke(ask())
    note = _system(server, 0)
    assert note is not None and LEFT.search(note) and "Tool calls" not in note

    plain = DeadlineMiddleware(timeout=5.0)
    await create_agent(chat(server), [orders], middleware=[plain]).ainvoke(ask())
    assert _system(server, 1) is None


def test_bad_note_settings_are_refused_naming_the_argument() -> None:
    with pytest.raises(TypeError, match="budget_note must be a bool"):
        DeadlineMiddleware(budget_note=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="book must be a LatencyBook"):
        DeadlineMiddleware(budget_note=True, book={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="learned_max_tokens must be a bool"):
        ModelLimits(learned_max_tokens=1)  # type: ignore[arg-type]
