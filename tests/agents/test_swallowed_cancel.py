"""A model stream whose cancellation is swallowed below still ends at the deadline.

Python 3.11's `asyncio.wait_for`, which langchain-openai wraps around each chunk's read, returns
a chunk that arrived together with the cancellation and drops the cancellation: on a loaded
machine the real `ChatOpenAI` then streamed its whole answer past the deadline, about one run
in ten (seen in `make demo` and reproduced against `FakeOpenAIServer`: 4 of 60 and 8 of 60
runs under two busy cores, 0 of 80 since). The race cannot be made to happen on demand with the
real client, so `SwallowingChat` swallows every cancellation the same way, at every chunk: a
budgeted node, `budgeted_model` and `DeadlineMiddleware` must each end its stream at the first
token after the cut."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.func import entrypoint, task
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import Field

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    budgeted_model,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.types import StepStatus
from tests.agents.support import MARGIN, ask

TICK = 0.02
TOKENS = 200  # 4 s of tokens


class SwallowingChat(BaseChatModel):
    """Streams `TOKENS` tokens, one every `TICK`; a cancellation that comes while it waits
    for the next one is dropped, as Python 3.11's `wait_for` drops one that comes with a
    chunk. `produced` holds when each token was made."""

    produced: list[float] = Field(default_factory=list)
    streaming: bool = False  # set to True: LangChain streams `invoke` for a model that says so

    @property
    def _llm_type(self) -> str:
        return "swallowing"

    def bind_tools(self, tools: Any, **kwargs: Any) -> SwallowingChat:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("unused"))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for i in range(TOKENS):
            with contextlib.suppress(asyncio.CancelledError):  # the bug this guards against
                await asyncio.sleep(TICK)
            self.produced.append(time.monotonic())
            chunk = ChatGenerationChunk(message=AIMessageChunk(f" {i}"))
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


class Chat(MessagesState, DeadlineState):
    pass


def _after(model: SwallowingChat, deadline_mono: float) -> int:
    return sum(t > deadline_mono for t in model.produced)


async def _assert_stopped(model: SwallowingChat) -> None:
    """Nothing goes on streaming behind the run once it has returned."""
    before = len(model.produced)
    await asyncio.sleep(20 * TICK)
    assert len(model.produced) <= before + 1


@pytest.mark.anyio
async def test_a_budgeted_node_ends_a_stream_that_swallowed_its_cancellation() -> None:
    model = SwallowingChat(streaming=True)

    async def writer(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("writer", writer)
    builder.add_edge(START, "writer")
    graph = with_deadlines(builder, timeout=0.5, reserve=0.1)

    t0 = time.monotonic()
    out = await graph.ainvoke(ask())
    took = time.monotonic() - t0

    assert took < 0.5 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert _after(model, t0 + 0.5) <= 1
    await _assert_stopped(model)  # nothing goes on streaming behind the run


class Question(DeadlineState):
    """No messages: nothing in the node collects a partial answer."""

    question: str
    answer: str


@pytest.mark.anyio
async def test_a_node_of_any_state_ends_a_stream_that_swallowed_its_cancellation() -> None:
    model = SwallowingChat(streaming=True)

    async def writer(state: Question) -> dict[str, Any]:
        return {"answer": (await model.ainvoke(state["question"])).text}

    builder = StateGraph(Question)
    builder.add_node("writer", writer)
    builder.add_edge(START, "writer")
    graph = with_deadlines(builder, timeout=0.5, reserve=0.1)

    t0 = time.monotonic()
    out = await graph.ainvoke({"question": "count"})
    took = time.monotonic() - t0

    assert took < 0.5 + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert _after(model, t0 + 0.5) <= 1
    await _assert_stopped(model)


@pytest.mark.anyio
async def test_a_task_ends_a_stream_that_swallowed_its_cancellation() -> None:
    model = SwallowingChat(streaming=True)

    @task
    async def write(question: str) -> str:
        return (await model.ainvoke(question)).text

    @entrypoint()
    async def answer(question: str) -> str:
        return await write(question)

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await with_deadlines(answer, timeout=0.5).ainvoke("count")
    took = time.monotonic() - t0

    assert took < 0.5 + MARGIN
    assert _after(model, t0 + 0.5) <= 1
    await _assert_stopped(model)


@pytest.mark.anyio
async def test_budgeted_model_ends_a_stream_that_swallowed_its_cancellation() -> None:
    model = SwallowingChat(streaming=True)
    llm = budgeted_model(model, cap=0.4)

    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        async with deadline_scope(5.0):
            await llm.ainvoke("count")
    took = time.monotonic() - t0

    assert took < 0.4 + MARGIN
    assert _after(model, t0 + 0.4) <= 1
    await _assert_stopped(model)


@pytest.mark.anyio
@pytest.mark.parametrize("partial_answer", [True, False])
async def test_the_middleware_ends_a_stream_that_swallowed_its_cancellation(
    partial_answer: bool,
) -> None:
    model = SwallowingChat(streaming=True)
    middleware = DeadlineMiddleware(timeout=0.5, partial_answer=partial_answer)
    agent = create_agent(model, [], middleware=[middleware])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    took = time.monotonic() - t0

    assert took < 0.5 + MARGIN
    (record,) = out["deadline_trace"]
    assert record.status is StepStatus.TIMED_OUT
    assert _after(model, t0 + 0.5) <= 1
    await _assert_stopped(model)
