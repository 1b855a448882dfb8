"""What the agent tests share: timing margins, a question, two tools, a history check."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from langgraph_deadline import Deadline
from langgraph_deadline.testing import FakeOpenAIServer

MARGIN = 0.5  # generous: a loaded 2-core machine
SLOW = 0.05  # seconds between token chunks of a "slow" model: 200 tokens take 10 s


def deadline_of(out: dict[str, Any]) -> Deadline:
    return Deadline.at(out["deadline"])


def ask(text: str = "where is order 42?") -> Any:
    return {"messages": [HumanMessage(text)]}


@tool
async def hang(query: str) -> str:
    """A lookup that never answers."""
    await asyncio.sleep(3600)
    return "never"


@tool
async def orders(query: str) -> str:
    """Look up an order."""
    return f"order 42 shipped on Monday ({query})"


def assert_valid_history(messages: list[AnyMessage]) -> None:
    """Every tool call has exactly one ToolMessage, after it; the last message is the AI's."""
    answered: dict[str, int] = {}
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            assert not open_calls, f"tool calls left unanswered: {open_calls}"
            open_calls = {c["id"] for c in m.tool_calls if c["id"]}
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls, m
            open_calls.discard(m.tool_call_id)
            answered[m.tool_call_id] = answered.get(m.tool_call_id, 0) + 1
    assert not open_calls
    assert all(n == 1 for n in answered.values())
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls


def chat_named(server: FakeOpenAIServer, model: str, **options: Any) -> Any:
    """A real streaming `ChatOpenAI` for `server`, under the model name `model` (the name a
    fallback chain and a latency book know it by)."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(
        base_url=server.base_url,
        api_key=SecretStr("test"),
        model=model,
        streaming=True,
        **options,
    )
