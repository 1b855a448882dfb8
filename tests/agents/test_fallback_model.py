"""`budgeted_model(model, fallbacks=[...])`: a faster model answers when the main one would not
fit the deadline (the book says so, or it failed, or its cap cut it), never past the deadline.

Two real `ChatOpenAI`s, each against its own local streaming server: a slow main (`gpt-slow`)
and a fast fallback (`gpt-fast`)."""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
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
    StepRecord,
    Terminal,
    budgeted_model,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline._agents.model import fallbacks_of
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, await_nothing_sent_after
from langgraph_deadline.types import StepStatus

from .support import MARGIN, SLOW
from .support import chat_named as chat


def slow_book(seconds: float = 2.0, n: int = 20) -> LatencyBook:
    """A book that has seen `gpt-slow` answer in `seconds`, `n` times."""
    book = LatencyBook(listen=False)
    for _ in range(n):
        book.record("model", "gpt-slow", seconds)
    return book


def models(records: list[StepRecord]) -> list[tuple[str, StepStatus]]:
    return [(r.name, r.status) for r in records if r.kind == "model"]


@pytest.mark.anyio
async def test_a_main_model_the_book_says_is_too_slow_is_passed_over_without_a_request(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    llm = budgeted_model(
        chat(slow, "gpt-slow"), fallbacks=[chat(fast, "gpt-fast")], book=slow_book(2.0)
    )
    async with deadline_scope(1.0):
        reply = await llm.ainvoke("hi")

    assert reply.content == "fast answer"
    assert reply.response_metadata["langgraph_deadline"]["fallback"] == "gpt-fast"
    reason = reply.response_metadata["langgraph_deadline"]["reason"]
    assert reason == "gpt-slow learned p90 1.99 s > 0.99 s budget"
    assert slow.requests == []
    assert len(fast.requests) == 1
    assert models(steps) == [("gpt-fast", StepStatus.COMPLETED)]
    assert steps[-1].note is not None and steps[-1].note.startswith("fallback: gpt-slow learned")


@pytest.mark.anyio
async def test_a_main_model_that_fits_answers_and_its_answer_is_not_marked(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    slow.enqueue(ChatReply.text("slow answer"))
    llm = budgeted_model(
        chat(slow, "gpt-slow"), fallbacks=[chat(fast, "gpt-fast")], book=slow_book(0.5)
    )
    async with deadline_scope(3.0):
        reply = await llm.ainvoke("hi")
    assert reply.content == "slow answer"
    assert "langgraph_deadline" not in reply.response_metadata
    assert fast.requests == []
    assert models(steps) == [("gpt-slow", StepStatus.COMPLETED)]


@pytest.mark.anyio
async def test_a_provider_error_with_time_left_falls_back_inside_the_deadline(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    slow.enqueue(ChatReply.error(500))
    llm = budgeted_model(chat(slow, "gpt-slow", max_retries=0), fallbacks=[chat(fast, "gpt-fast")])
    async with deadline_scope(3.0):
        reply = await llm.ainvoke("hi")
    assert reply.content == "fast answer"
    marked = reply.response_metadata["langgraph_deadline"]
    assert marked["fallback"] == "gpt-fast"
    assert re.fullmatch(r"gpt-slow failed \(\w+Error\)", marked["reason"])
    assert [r.status for r in slow.requests] == [500]
    assert models(steps) == [("gpt-slow", StepStatus.FAILED), ("gpt-fast", StepStatus.COMPLETED)]
    assert fast.requests[0].read_timeout is not None and fast.requests[0].read_timeout < 3.0


@pytest.mark.anyio
async def test_a_main_cut_at_its_cap_leaves_the_rest_of_the_deadline_to_the_fallback(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    llm = budgeted_model(chat(slow, "gpt-slow"), cap=0.5, fallbacks=[chat(fast, "gpt-fast")])
    t0 = time.monotonic()
    async with deadline_scope(5.0):
        reply = await llm.ainvoke("count")
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert reply.response_metadata["langgraph_deadline"]["reason"] == (
        "gpt-slow cut at its cap of 0.50 s"
    )
    assert models(steps) == [("gpt-slow", StepStatus.TIMED_OUT), ("gpt-fast", StepStatus.COMPLETED)]
    await await_nothing_sent_after(slow, t0 + 0.5, within=MARGIN)  # the slow stream was closed
    assert slow.requests[0].disconnected is not None


@pytest.mark.anyio
async def test_nothing_runs_past_the_deadline_when_every_model_is_slow(
    slow: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    with FakeOpenAIServer(default_reply=ChatReply.counting(200, chunk_interval=SLOW)) as second:
        llm = budgeted_model(chat(slow, "gpt-slow"), cap=0.4, fallbacks=[chat(second, "gpt-fast")])
        deadline = Deadline.after(1.2)
        with pytest.raises(DeadlineExceeded):
            async with deadline_scope(deadline):
                await llm.ainvoke("count")
        assert deadline.remaining() < MARGIN / 5  # raised at the deadline, not before
        assert models(steps) == [
            ("gpt-slow", StepStatus.TIMED_OUT),
            ("gpt-fast", StepStatus.TIMED_OUT),
        ]
        for server in (slow, second):
            await await_nothing_sent_after(server, deadline, within=MARGIN)
            assert server.requests[0].disconnected is not None


@pytest.mark.anyio
async def test_below_every_min_viable_no_model_is_called(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord]
) -> None:
    fallback = budgeted_model(chat(fast, "gpt-fast"), min_viable=0.8, name="gpt-fast")
    llm = budgeted_model(chat(slow, "gpt-slow"), min_viable=1.0, fallbacks=[fallback])
    async with deadline_scope(0.5):
        with pytest.raises(DeadlineExceeded, match="no fallback could start"):
            await llm.ainvoke("hi")
    assert slow.requests == [] and fast.requests == []
    assert models(steps) == [("gpt-slow", StepStatus.SKIPPED)]


@pytest.mark.anyio
async def test_a_main_below_its_min_viable_hands_the_call_to_a_fallback_that_fits(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    llm = budgeted_model(chat(slow, "gpt-slow"), min_viable=2.0, fallbacks=[chat(fast, "gpt-fast")])
    async with deadline_scope(1.0):
        reply = await llm.ainvoke("hi")
    assert reply.response_metadata["langgraph_deadline"]["reason"].startswith(
        "gpt-slow below its min_viable"
    )
    assert slow.requests == []


@pytest.mark.anyio
async def test_under_with_deadlines_the_node_completes_with_the_fallbacks_answer_on_record(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    class State(MessagesState, DeadlineState):
        pass

    llm = budgeted_model(
        chat(slow, "gpt-slow"), fallbacks=[chat(fast, "gpt-fast")], book=slow_book(3.0)
    )

    async def respond(state: State) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    graph = with_deadlines(builder, timeout=2.0)
    out = await graph.ainvoke({"messages": [HumanMessage("hi")]})

    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    answer = out["messages"][-1]
    assert answer.response_metadata["langgraph_deadline"]["fallback"] == "gpt-fast"
    trace = {(r.kind, r.name): r for r in out["deadline_trace"]}
    assert set(trace) == {("model", "gpt-fast"), ("node", "respond")}
    assert (
        trace["model", "gpt-fast"].note
        == "fallback: " + (answer.response_metadata["langgraph_deadline"]["reason"])
    )
    assert slow.requests == []


def test_sync_calls_fall_back_after_a_provider_error(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    slow.enqueue(ChatReply.error(500))
    llm = budgeted_model(chat(slow, "gpt-slow", max_retries=0), fallbacks=[chat(fast, "gpt-fast")])
    with deadline_scope(3.0):
        reply = llm.invoke("hi")
    assert reply.content == "fast answer"
    assert reply.response_metadata["langgraph_deadline"]["fallback"] == "gpt-fast"


@pytest.mark.anyio
async def test_tools_bound_to_the_chain_reach_the_fallback(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return order_id

    fast.enqueue(ChatReply.tool_call("lookup", {"order_id": "42"}))
    llm = budgeted_model(
        chat(slow, "gpt-slow"), fallbacks=[chat(fast, "gpt-fast")], book=slow_book(5.0)
    ).bind_tools([lookup])
    async with deadline_scope(2.0):
        reply = await llm.ainvoke("where is 42?")
    assert isinstance(reply, AIMessage) and reply.tool_calls[0]["args"] == {"order_id": "42"}
    assert fast.requests[0].body["tools"][0]["function"]["name"] == "lookup"
    assert llm.fallbacks == ("gpt-fast",)


def test_bad_fallbacks_are_refused_when_made_naming_the_argument() -> None:
    main = ChatOpenAI(api_key=SecretStr("test"), model="gpt-slow")
    other = ChatOpenAI(api_key=SecretStr("test"), model="gpt-fast")
    with pytest.raises(ValueError, match="fallbacks is empty"):
        budgeted_model(main, fallbacks=[])
    with pytest.raises(TypeError, match=r"fallbacks\[1\] must be a chat model"):
        budgeted_model(main, fallbacks=[other, "gpt-4o"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="fallbacks must be a list"):
        budgeted_model(main, fallbacks=other)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"fallbacks\[1\] is named 'gpt-fast'"):
        budgeted_model(main, fallbacks=[other, other])
    with pytest.raises(ValueError, match=r"fallbacks\[0\] is named 'gpt-slow'"):
        budgeted_model(main, fallbacks=[ChatOpenAI(api_key=SecretStr("test"), model="gpt-slow")])
    with pytest.raises(ValueError, match="book is only read to choose a fallback"):
        budgeted_model(main, book=LatencyBook(listen=False))
    with pytest.raises(ValueError, match="fallback_quantile must be in"):
        budgeted_model(main, fallbacks=[other], fallback_quantile=1.5)
    with pytest.raises(TypeError, match="book must be a LatencyBook"):
        budgeted_model(main, fallbacks=[other], book={})  # type: ignore[arg-type]
    nested = budgeted_model(other, fallbacks=[ChatOpenAI(api_key=SecretStr("t"), model="x")])
    with pytest.raises(ValueError, match=r"fallbacks\[0\] has fallbacks of its own"):
        budgeted_model(main, fallbacks=[nested])
    named = budgeted_model(main, fallbacks=[budgeted_model(other, name="fast", cap=2.0)])
    assert named.fallbacks == ("fast",)
    assert named.step_name == "gpt-slow"
    assert budgeted_model(main).step_name == "gpt-slow"  # the same name without fallbacks


@pytest.mark.anyio
async def test_the_last_model_is_tried_even_when_the_book_says_it_is_slow_too(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    book = slow_book(2.0)
    for _ in range(20):
        book.record("model", "gpt-fast", 2.0)
    llm = budgeted_model(chat(slow, "gpt-slow"), fallbacks=[chat(fast, "gpt-fast")], book=book)
    async with deadline_scope(1.0):
        reply = await llm.ainvoke("hi")
    assert reply.content == "fast answer"  # a prediction ranks the models, min_viable refuses
    assert slow.requests == []


def test_a_model_the_book_saw_cut_counts_as_at_least_as_slow_as_its_cuts() -> None:
    book = LatencyBook(listen=False)
    for _ in range(20):
        book.record("model", "gpt-slow", 1.5, censored=True)  # cut at 1.5 s every time
    fast = ChatOpenAI(api_key=SecretStr("test"), model="gpt-fast")
    chain = fallbacks_of(
        [fast], label="fallbacks", taken="gpt-slow", book=book, quantile=0.9, min_samples=20
    )
    assert chain is not None
    expected = chain.expected("gpt-slow")
    assert expected is not None and expected >= 1.5 * 0.99
    assert chain.expected("gpt-fast") is None  # no samples: no prediction


@pytest.mark.parametrize("with_fallbacks", [False, True])
@pytest.mark.anyio
async def test_a_models_step_has_one_name_however_it_is_called(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer, steps: list[StepRecord], with_fallbacks: bool
) -> None:
    """Sync or async, with or without fallbacks: the step, its record and the error that says
    where the time ran out name the model by its id (a book's samples keep their key)."""
    slow.default_reply = ChatReply.hang()
    fast.default_reply = ChatReply.hang()
    fallbacks = [chat(fast, "gpt-fast", max_retries=0)] if with_fallbacks else None
    llm = budgeted_model(chat(slow, "gpt-slow", max_retries=0), fallbacks=fallbacks)
    assert llm.step_name == "gpt-slow"
    with pytest.raises(DeadlineExceeded) as sync_cut, deadline_scope(0.5):
        await anyio.to_thread.run_sync(llm.invoke, "hi")
    with pytest.raises(DeadlineExceeded) as async_cut:
        async with deadline_scope(0.5):
            await llm.ainvoke("hi")
    assert sync_cut.value.step == async_cut.value.step == "gpt-slow"
    assert "gpt-slow" in str(async_cut.value)
    assert {r.name for r in steps if r.kind == "model"} == {"gpt-slow"}
