"""`budgeted_model(idle_cap=...)`: a model stream that stops sending is cut as stalled near its
idle cap, and the fallback answers in the time left; a slow but steady stream is never cut.

Real `ChatOpenAI`s against local streaming servers (`FakeOpenAIServer`), one made to stall
mid-stream (`ChatReply.stalling`)."""

from __future__ import annotations

import math
import time

import pytest

from langgraph_deadline import DeadlineExceeded, StepRecord, budgeted_model, deadline_scope
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.types import StepStatus

from .support import MARGIN
from .support import chat_named as chat

IDLE = 0.3


def model_steps(records: list[StepRecord]) -> list[StepRecord]:
    return [r for r in records if r.kind == "model"]


@pytest.mark.anyio
async def test_a_stream_that_stops_is_cut_as_stalled_and_the_fallback_answers(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    slow.enqueue(ChatReply.counting(50, chunk_interval=0.01).stalling(after=5, seconds=30.0))
    llm = budgeted_model(chat(slow, "gpt-slow"), idle_cap=IDLE, fallbacks=[chat(fast, "gpt-fast")])
    start = time.monotonic()
    async with deadline_scope(5.0):
        reply = await llm.ainvoke("hi")
    took = time.monotonic() - start

    assert reply.content == "fast answer"
    meta = reply.response_metadata["langgraph_deadline"]
    assert meta["fallback"] == "gpt-fast"
    assert meta["reason"].startswith("gpt-slow stalled (no progress for 0.")
    cut, answered = model_steps(steps)
    assert (cut.name, cut.status, cut.cancel_source) == (
        "gpt-slow",
        StepStatus.TIMED_OUT,
        "stalled",
    )
    assert cut.stalled and cut.note is not None and cut.note.startswith("no progress for ")
    assert IDLE <= cut.gap_ms / 1000.0 < IDLE + MARGIN  # type: ignore[operator]
    assert (answered.name, answered.status) == ("gpt-fast", StepStatus.COMPLETED)
    assert took < 5.0 * 0.5  # cut near its idle cap, not at the deadline
    # The stalled stream's connection was closed at the cut, as the server saw it.
    assert await slow.await_disconnected(2.0)
    disconnected = slow.requests[0].disconnected
    assert disconnected is not None and disconnected - start < IDLE + 0.05 * 5 + MARGIN + 0.5


@pytest.mark.anyio
async def test_without_a_fallback_a_stalled_call_raises_saying_so(
    slow: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    slow.enqueue(ChatReply.counting(20, chunk_interval=0.01).stalling(after=3))
    llm = budgeted_model(chat(slow, "gpt-slow"), idle_cap=IDLE)
    async with deadline_scope(5.0):
        with pytest.raises(DeadlineExceeded, match=r"gpt-slow stalled: no progress for 0\.\d s"):
            await llm.ainvoke("hi")
    assert model_steps(steps)[0].stalled


@pytest.mark.anyio
async def test_a_slow_first_token_and_a_slow_but_steady_stream_are_never_cut(
    slow: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    # First byte after 3x the idle cap, then a chunk every 2/3 of it: 15 chunks, ~3.5 s.
    slow.enqueue(ChatReply.counting(15, delay=3 * IDLE, chunk_interval=IDLE * 2 / 3))
    llm = budgeted_model(chat(slow, "gpt-slow"), idle_cap=IDLE)
    async with deadline_scope(10.0):
        reply = await llm.ainvoke("hi")
    assert str(reply.content).endswith(" 15")
    (done,) = model_steps(steps)
    assert done.status is StepStatus.COMPLETED and not done.stalled
    assert done.gap_ms is not None and done.gap_ms < IDLE * 1000.0


def test_a_sync_call_that_stalls_is_abandoned_as_stalled(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    slow.enqueue(ChatReply.counting(20, chunk_interval=0.01).stalling(after=3, seconds=3.0))
    llm = budgeted_model(chat(slow, "gpt-slow"), idle_cap=IDLE, fallbacks=[chat(fast, "gpt-fast")])
    start = time.monotonic()
    with deadline_scope(5.0):
        reply = llm.invoke("hi")
    assert reply.content == "fast answer"
    assert time.monotonic() - start < 2.5
    cut = model_steps(steps)[0]
    assert (cut.status, cut.cancel_source) == (StepStatus.ABANDONED, "stalled")


@pytest.mark.parametrize("bad", [-1.0, 0, math.nan, math.inf, "1", True])
def test_a_bad_idle_cap_is_refused_naming_it(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="idle_cap"):
        budgeted_model(chat_free(), idle_cap=bad)  # type: ignore[arg-type]


def chat_free() -> object:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(model="m", api_key=SecretStr("test"), base_url="http://127.0.0.1:9/v1")


def test_a_learned_idle_cap_is_never_above_the_models_cap() -> None:
    book = LatencyBook(listen=False)
    for _ in range(60):
        book.record("gap", "gpt-slow", 5.0)  # its streams pause for 5 s at times
    rule = learned(book, min_samples=50)
    assert rule.idle_cap("model", "gpt-slow") == pytest.approx(5.0 * 1.5 * 2.0, rel=0.1)
    llm = budgeted_model(chat_free(), name="gpt-slow", cap=2.0, idle_cap=rule)
    plan = llm._plan(llm._chain[0], {}, sync=False)
    assert plan.idle == 2.0


@pytest.mark.anyio
async def test_an_agents_model_call_that_stalls_hands_the_turn_to_its_fallback(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    from langchain.agents import create_agent

    from langgraph_deadline import Terminal
    from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits

    from .support import ask

    slow.enqueue(ChatReply.counting(40, chunk_interval=0.01).stalling(after=4, seconds=30.0))
    agent = create_agent(
        chat(slow, "gpt-slow"),
        [],
        middleware=[
            DeadlineMiddleware(
                timeout=5.0,
                fallbacks=[chat(fast, "gpt-fast")],
                model_limits=ModelLimits(idle_cap=IDLE),
            )
        ],
    )
    start = time.monotonic()
    out = await agent.ainvoke(ask())
    assert time.monotonic() - start < 5.0 * 0.5
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["messages"][-1].content == "fast answer"
    cut, answered = [r for r in out["deadline_trace"] if r.kind == "model"]
    assert (cut.name, cut.cancel_source) == ("model", "stalled")
    assert answered.name == "gpt-fast" and answered.note.startswith("fallback: model stalled")
    assert await slow.await_disconnected(2.0)


def test_a_bad_model_idle_cap_is_refused_naming_it() -> None:
    from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits

    with pytest.raises(ValueError, match="idle_cap"):
        DeadlineMiddleware(model_limits=ModelLimits(idle_cap=-1.0))
