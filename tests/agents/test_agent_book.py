"""An agent with a latency book answers at least as often as without one (issue 46): under
`with_deadlines(book=)` it runs against the run's deadline and its final answer is not cut
for a tools step; a call whose time fits only a stub answer gets no token limit; two-token
answers teach no token rate. A real `create_agent` agent, the real `ChatOpenAI` streaming from
the local server, tools over loopback HTTP."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, tool

from langgraph_deadline import StepRecord, Terminal, with_deadlines
from langgraph_deadline._learn.book import FIRST_TOKEN, PER_TOKEN
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall, SlowServer
from tests.agents.support import ask
from tests.chat_models import openai_chat

# runs sized to a learned streaming rate and to what the book learned of the agent's nodes:
# another worker's load would stretch them past it (make test runs these alone)
pytestmark = pytest.mark.serial

TICK = 0.02  # seconds before each streamed token
ANSWER = (  # 26 tokens, one every TICK: 0.5 s to stream
    "Order 42 shipped from the Leeds warehouse on Monday morning. It is due at your door "
    "on Friday. The courier is DHL, tracking number 42."
)
DELAYS = {"search": 0.35, "weather": 0.3, "lookup": 0.4}  # the tools' HTTP calls, seconds


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """As in test_learned_tokens: no full collector pass over the test tree mid-stream."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def http() -> Iterator[SlowServer]:
    with SlowServer() as s:
        yield s


@pytest.fixture
def book() -> Iterator[LatencyBook]:
    b = LatencyBook()  # hears every step, as with_deadlines(book=) needs
    yield b
    b.detach()


def _tools(http: SlowServer, delays: dict[str, float]) -> list[BaseTool]:
    def make(name: str, delay: float) -> BaseTool:
        async def call(query: str) -> str:
            async with httpx.AsyncClient() as client:
                await client.get(http.url(f"/slow?delay={delay}"))
            return f"{name} found {query}-{name}-finding"

        return tool(name, description=f"Look up {name}.")(call)

    return [make(name, delay) for name, delay in delays.items()]


def _turn(server: FakeOpenAIServer, answer: ChatReply, names: tuple[str, ...]) -> None:
    """The next run's two model calls: every tool at once, then the answer."""
    calls = [ScriptedToolCall(name, {"query": "q42"}, f"call-{name}") for name in names]
    server.enqueue(ChatReply.tool_calls(*calls), answer)


def _answer_call(out: dict[str, Any]) -> StepRecord:
    calls = [r for r in out["deadline_trace"] if r.kind == "model"]
    assert len(calls) == 2, calls
    return calls[-1]


@pytest.mark.anyio
async def test_an_agent_under_with_deadlines_book_gets_the_runs_deadline_and_a_whole_answer(
    http: SlowServer, book: LatencyBook
) -> None:
    """(a) the agent runs against the run's 2 s, not its first step's budget, shortened by what
    that step keeps back for the model and tools; (b) the final answer's call is given what is
    left, not less what a tools step would need: no tools step follows a final answer."""
    with FakeOpenAIServer() as server:
        agent = create_agent(
            openai_chat(server),
            _tools(http, DELAYS),
            middleware=[DeadlineMiddleware(default_tool_cap=1.5)],
        )
        graph = with_deadlines(agent, timeout=2.0, book=book)
        reply = ChatReply.text(ANSWER, chunk_interval=TICK, follows_length_hint=True)
        for run in range(6):  # from the fourth run on, the book knows every node
            _turn(server, reply, tuple(DELAYS))
            t0 = time.time()
            out = await graph.ainvoke(ask())
            assert out["deadline"] - t0 > 1.9, (run, out["deadline"] - t0)
            assert out["deadline_outcome"].terminal is Terminal.COMPLETED, run
            last = out["messages"][-1]
            assert isinstance(last, AIMessage) and last.text == ANSWER, run
            final = _answer_call(out)
            assert final.started_at is not None and final.allocated_ms is not None
            left_ms = (out["deadline"] - final.started_at) * 1000.0
            # what the run had left, less the hand-offs: nothing kept back for a tools step
            assert final.allocated_ms > left_ms - 100.0, (run, left_ms, final)
        assert book.count("tools", "node") >= 9 and book.count("model", "node") >= 9


@pytest.mark.anyio
async def test_a_call_whose_time_fits_no_real_answer_gets_no_token_limit_and_ends_in_words(
    http: SlowServer,
) -> None:
    """(c) with the rate learned, a final answer left ~0.25 s fits a few tokens: it is not
    asked for them (a `completed` stub); it streams and is cut at its budget, and the agent
    ends `deadline_exceeded` with its partial answer and what the tool found."""
    book = LatencyBook(listen=False)
    with FakeOpenAIServer() as server:
        quick = create_agent(
            openai_chat(server),
            _tools(http, {"lookup": 0.0}),
            middleware=[DeadlineMiddleware(timeout=5.0, book=book)],
        )
        for _ in range(11):  # ten streamed answers: the book's rate is warm (RUN_RATE)
            _turn(server, ChatReply.counting(10, chunk_interval=TICK), ("lookup",))
            out = await quick.ainvoke(ask())
            assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        assert book.count("gpt-fake", PER_TOKEN) >= 10

        slow = create_agent(
            openai_chat(server),
            _tools(http, {"lookup": 1.25}),
            middleware=[DeadlineMiddleware(timeout=1.5, book=book)],
        )
        _turn(server, ChatReply.counting(100, chunk_interval=TICK), ("lookup",))
        out = await slow.ainvoke(ask())
        asked = server.requests[-1]
        assert asked.body["messages"][-1]["role"] == "tool"  # the answer's call was made
        assert asked.max_tokens is None, asked.max_tokens  # not a stub's limit
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        closing = out["messages"][-1]
        assert isinstance(closing, AIMessage) and not closing.tool_calls
        assert "q42-lookup-finding" in closing.text  # what the tool found
        assert "1 2" in closing.text  # the answer so far, cut short


@pytest.mark.anyio
async def test_two_token_answers_teach_no_token_rate(http: SlowServer) -> None:
    """(d) ten answers of two tokens that came in one read: no rate is learned from them, so
    the next call is sized as without a book, not to thousands of tokens."""
    book = LatencyBook(listen=False)
    with FakeOpenAIServer() as server:
        agent = create_agent(
            openai_chat(server),
            _tools(http, {"lookup": 0.0}),
            middleware=[DeadlineMiddleware(timeout=1.5, book=book)],
        )
        short = ChatReply.text(["Your", " order"], chunk_interval=0.0)  # one read
        for _ in range(10):
            _turn(server, short, ("lookup",))
            out = await agent.ainvoke(ask())
            assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        assert book.count("gpt-fake", FIRST_TOKEN) >= 10
        assert book.count("gpt-fake", PER_TOKEN) == 0

        _turn(server, ChatReply.counting(20, chunk_interval=TICK), ("lookup",))
        out = await agent.ainvoke(ask())
        sent = server.requests[-1].max_tokens
        assert sent is None, sent  # no rate learned: the time left is the only limit
        assert out["deadline_outcome"].terminal is Terminal.COMPLETED
