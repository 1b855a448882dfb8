"""`max_tokens` from what a model really takes: its time to first token and seconds per token
learned per model id from its streamed calls (`tokens_per_second=learned(book)`), with the
real `ChatOpenAI` against the local streaming server, in `budgeted_model` and in
`DeadlineMiddleware` on a `create_agent` agent."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    budgeted_model,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline._agents.provider import LENGTH_HINT, WORDS_PER_TOKEN
from langgraph_deadline._agents.timing import RUN_RATE
from langgraph_deadline._learn.book import FIRST_TOKEN, PER_TOKEN
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.types import StepStatus
from tests.agents.support import ask, orders
from tests.chat_models import openai_chat

# a learned streaming rate, then calls sized to it: another worker's load would stretch the
# stream past what was learned (make test runs these alone)
pytestmark = pytest.mark.serial

TICK = 0.02  # seconds before each streamed token: 50 tokens a second


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """What is alive before each test (every module the run collected) is left out of the
    collector's full passes, as a server does after start-up with `gc.freeze()`
    (docs/howto/across-services.md): a full pass over the whole test tree (100 ms and more,
    landing wherever allocation counts put it) would stretch a stream past the rate these tests
    learned, and they measure the sizing, not the collector."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def plain_chat(server: FakeOpenAIServer, **options: Any) -> Any:
    """A real `ChatOpenAI` that does not stream by itself (no `streaming=` given): timing its
    calls makes them stream, as LangGraph's "messages" mode does."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(
        base_url=server.base_url, api_key=SecretStr("test"), model="gpt-fake", **options
    )


@pytest.fixture
def counting() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default_reply=ChatReply.counting(400, chunk_interval=TICK)) as s:
        yield s


async def _warm(llm: object, book: LatencyBook, n: int, *, model: str = "gpt-fake") -> None:
    """`n` calls with time to spare: each is a sample of time to first token and of rate."""
    before = book.count(model, FIRST_TOKEN), book.count(model, PER_TOKEN)
    async with deadline_scope(30.0):
        for _ in range(n):
            await llm.ainvoke("count", max_tokens=20)  # type: ignore[attr-defined]
    assert book.count(model, FIRST_TOKEN) == before[0] + n
    assert book.count(model, PER_TOKEN) == before[1] + n


@pytest.mark.anyio
async def test_max_tokens_follows_the_time_left_once_the_model_is_learned(
    counting: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    # the slowest rate heard (p99 of five calls): a loaded machine's later calls stream no slower
    rate = learned(book, quantile=0.99, min_samples=5)
    llm = budgeted_model(plain_chat(counting), tokens_per_second=rate)

    async with deadline_scope(2.0):
        await llm.ainvoke("count", max_tokens=3)
    assert counting.requests[-1].max_tokens == 3  # cold: the caller's own limit, nothing else
    assert counting.requests[-1].stream
    await _warm(llm, book, 5)  # three tokens are too few to tell a rate from: five more calls

    per_token = book.sketch("gpt-fake", PER_TOKEN).quantile(0.99)
    assert per_token is not None and 0.8 * TICK < per_token.seconds < 3 * TICK
    asked: dict[float, int] = {}
    for budget in (3.0, 1.5):
        async with deadline_scope(budget):
            t0 = time.monotonic()
            answer = await llm.ainvoke("count")
            took = time.monotonic() - t0
        sent = counting.requests[-1].max_tokens
        assert sent is not None
        asked[budget] = sent
        # the answer ended by itself at max_tokens, inside its budget: not cut
        assert isinstance(answer, AIMessage)
        assert answer.response_metadata["finish_reason"] == "length"
        assert took < budget
        assert len(answer.text.split()) == sent
    # half the time left, about half the tokens (time to first token comes off both)
    assert 1.6 < asked[3.0] / asked[1.5] < 2.6
    assert 1.5 * 0.5 / per_token.seconds < asked[1.5] < 1.5 / per_token.seconds


@pytest.mark.anyio
async def test_the_user_max_tokens_stays_the_most_and_a_fixed_rate_still_works(
    counting: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    rate = learned(book, quantile=0.9, min_samples=3)
    llm = budgeted_model(openai_chat(counting, max_tokens=7), tokens_per_second=rate)
    await _warm(llm, book, 3)
    async with deadline_scope(5.0):
        await llm.ainvoke("count")
    assert counting.requests[-1].max_tokens == 7

    fixed = budgeted_model(openai_chat(counting), tokens_per_second=10.0)
    async with deadline_scope(2.0):
        await fixed.ainvoke("count")
    sent = counting.requests[-1].max_tokens
    assert sent is not None and 15 <= sent <= 20  # 10 tokens a second, ~2 s left


@pytest.mark.anyio
async def test_a_call_cut_before_its_first_token_is_a_censored_sample(
    server: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    llm = budgeted_model(openai_chat(server), tokens_per_second=learned(book))
    server.enqueue(ChatReply.text("late", delay=5.0))
    with pytest.raises(DeadlineExceeded):
        async with deadline_scope(0.3):
            await llm.ainvoke("hello")
    sketch = book.sketch("gpt-fake", FIRST_TOKEN)
    assert (sketch.count, sketch.censored) == (1, 1)
    assert book.count("gpt-fake", PER_TOKEN) == 0  # no token: no rate


def test_a_sync_call_is_timed_too(counting: FakeOpenAIServer) -> None:
    book = LatencyBook(listen=False)
    llm = budgeted_model(openai_chat(counting), tokens_per_second=learned(book, min_samples=2))
    with deadline_scope(10.0):
        for _ in range(2):
            llm.invoke("count", max_tokens=10)
        llm.invoke("count")
    assert book.count("gpt-fake", FIRST_TOKEN) == 3
    sent = counting.requests[-1].max_tokens
    assert sent is not None and sent > 100  # ~10 s left at ~50 tokens a second


@pytest.mark.anyio
async def test_an_agent_learns_its_model_and_its_answers_fit_the_time_left(
    counting: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    rate = learned(book, quantile=0.9, min_samples=3)
    model = plain_chat(counting)

    warm = create_agent(
        model,
        [orders],
        middleware=[
            DeadlineMiddleware(timeout=60.0, model_limits=ModelLimits(tokens_per_second=rate))
        ],
    )
    for _ in range(3):
        counting.enqueue(ChatReply.counting(20, chunk_interval=TICK))
        await warm.ainvoke(ask())
    assert counting.requests[-1].max_tokens is None  # cold until now
    assert book.count("gpt-fake", FIRST_TOKEN) == 3

    agent = create_agent(
        model,
        [orders],
        middleware=[
            DeadlineMiddleware(timeout=1.5, model_limits=ModelLimits(tokens_per_second=rate))
        ],
    )
    out = await agent.ainvoke(ask())
    sent = counting.requests[-1].max_tokens
    assert sent is not None and 20 < sent < 1.5 / TICK
    # the answer ended at max_tokens before the deadline: the run completed
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    (record,) = out["deadline_trace"]
    assert record.status is StepStatus.COMPLETED
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and final.response_metadata["finish_reason"] == "length"


async def _deadline_run(agent: Any, server: FakeOpenAIServer, budget: float) -> dict[str, Any]:
    t0 = time.monotonic()
    out: dict[str, Any] = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < budget + 0.3
    return out


@pytest.mark.anyio
async def test_an_agent_with_a_book_attached_sizes_its_answers_to_the_time_left_by_default(
    counting: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    model = plain_chat(counting)
    warm = create_agent(model, [orders], middleware=[DeadlineMiddleware(timeout=60.0, book=book)])
    for _ in range(RUN_RATE["min_samples"]):  # short answers with time to spare: the rate
        counting.enqueue(ChatReply.counting(12, chunk_interval=TICK))
        await warm.ainvoke(ask())
    assert counting.requests[-1].max_tokens is None  # cold until now
    assert counting.requests[-1].stream  # timed: it streams
    assert book.count("gpt-fake", PER_TOKEN) == RUN_RATE["min_samples"]

    budget = 1.0  # a 400-token answer takes 8 s at this rate
    # the book attached as the agent's (book=), as a learned tool cap's, or as the run's
    for agent in (
        create_agent(model, [orders], middleware=[DeadlineMiddleware(timeout=budget, book=book)]),
        create_agent(
            model,
            [orders],
            middleware=[
                DeadlineMiddleware(timeout=budget, tool_caps={"orders": learned(book, cap=5.0)})
            ],
        ),
        with_deadlines(
            create_agent(model, [orders], middleware=[DeadlineMiddleware()]),
            timeout=budget,
            book=book,
        ),
    ):
        out = await _deadline_run(agent, counting, budget)
        served = counting.requests[-1]
        sent = served.max_tokens
        assert sent is not None and 10 < sent < budget / TICK
        # the server streamed that many tokens and ended the answer itself, before the deadline
        assert len(served.chunk_times) == sent
        assert served.disconnected is None and served.ended is not None
        assert out["deadline_outcome"].terminal is Terminal.COMPLETED, out["deadline_outcome"]
        final = out["messages"][-1]
        assert final.response_metadata["finish_reason"] == "length"
        assert len(final.text.split()) == sent

    # turned off: today's behaviour, no max_tokens, the answer is cut at the deadline
    off = DeadlineMiddleware(
        timeout=budget, book=book, model_limits=ModelLimits(learned_max_tokens=False)
    )
    out = await _deadline_run(create_agent(model, [orders], middleware=[off]), counting, budget)
    assert counting.requests[-1].max_tokens is None
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


# -- the length hint: the model is told the length its budget allows -------------------------

SENTENCES = " ".join(f"Sentence {i} has five words." for i in range(1, 80))


@pytest.fixture
def obeying() -> Iterator[FakeOpenAIServer]:
    """A model that keeps to the length its system message asks for (`follows_length_hint`)."""
    reply = ChatReply.text(SENTENCES, chunk_interval=TICK, follows_length_hint=True)
    with FakeOpenAIServer(default_reply=reply) as s:
        yield s


def _system(server: FakeOpenAIServer) -> str | None:
    first = server.requests[-1].body["messages"][0]
    return first["content"] if first["role"] == "system" else None


@pytest.mark.anyio
async def test_a_model_told_its_length_answers_whole_sentences_before_the_deadline(
    obeying: FakeOpenAIServer,
) -> None:
    llm = budgeted_model(plain_chat(obeying), tokens_per_second=1 / TICK)  # its real rate
    budget = 1.0
    t0 = time.monotonic()
    async with deadline_scope(budget):
        answer = await llm.ainvoke([SystemMessage("Be kind."), HumanMessage("Write.")])
    took = time.monotonic() - t0
    sent = obeying.requests[-1].max_tokens
    assert sent is not None and 40 <= sent <= 50  # what 1 s streams: too long with the first token
    words = int(sent * WORDS_PER_TOKEN)
    assert _system(obeying) == "Be kind.\n\n" + LENGTH_HINT.format(words=words)
    # a whole answer of the sentences that fit, ended by the model itself, in time
    assert isinstance(answer, AIMessage)
    assert answer.response_metadata["finish_reason"] == "stop"
    assert answer.text.endswith(".") and words - 5 < len(answer.text.split()) <= words
    assert took < budget

    # the caller's own lower max_tokens is the limit: the model is told nothing
    async with deadline_scope(budget):
        await llm.ainvoke("Write.", max_tokens=5)
    assert _system(obeying) is None and obeying.requests[-1].max_tokens == 5

    # turned off: the messages as given, the answer cut at max_tokens mid-sentence
    quiet = budgeted_model(plain_chat(obeying), tokens_per_second=20.0, length_hint=False)
    async with deadline_scope(budget):
        cut = await quiet.ainvoke("Write.")
    assert _system(obeying) is None
    assert cut.response_metadata["finish_reason"] == "length"


@pytest.mark.anyio
async def test_an_agent_model_is_told_its_length_and_answers_whole_sentences(
    obeying: FakeOpenAIServer,
) -> None:
    model = plain_chat(obeying)
    told = DeadlineMiddleware(timeout=1.0, model_limits=ModelLimits(tokens_per_second=1 / TICK))
    out = await create_agent(model, [orders], system_prompt="Be kind.", middleware=[told]).ainvoke(
        ask()
    )
    sent = obeying.requests[-1].max_tokens
    assert sent is not None
    assert _system(obeying) == "Be kind.\n\n" + LENGTH_HINT.format(
        words=int(sent * WORDS_PER_TOKEN)
    )
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    final = out["messages"][-1]
    assert final.response_metadata["finish_reason"] == "stop" and final.text.endswith(".")

    quiet = DeadlineMiddleware(
        timeout=1.0, model_limits=ModelLimits(tokens_per_second=10.0, length_hint=False)
    )
    await create_agent(model, [orders], system_prompt="Be kind.", middleware=[quiet]).ainvoke(ask())
    assert _system(obeying) == "Be kind."


def test_a_bad_rate_is_refused_when_made_naming_the_argument(server: FakeOpenAIServer) -> None:
    with pytest.raises(TypeError, match="tokens_per_second must be a number or learned"):
        budgeted_model(openai_chat(server), tokens_per_second="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens_per_second must be a finite number > 0"):
        DeadlineMiddleware(model_limits=ModelLimits(tokens_per_second=0))
    with pytest.raises(ValueError, match="quantile must be in"):
        learned(LatencyBook(listen=False), quantile=1.0)


# -- a book attached to the run: the writer's max_tokens by default ----------------------------


class _Writing(DeadlineState, total=False):
    limit: int
    text: str
    finish: str


def _writer_graph(counting: FakeOpenAIServer) -> StateGraph[Any, Any, Any, Any]:
    """plan -> writer (the last step: a streamed answer of up to 400 tokens, 50 a second)."""
    llm = budgeted_model(plain_chat(counting))  # no rate given

    async def plan(state: _Writing) -> dict[str, Any]:
        return {}

    async def writer(state: _Writing) -> dict[str, Any]:
        limit = state.get("limit")
        answer = await (llm.ainvoke("count", max_tokens=limit) if limit else llm.ainvoke("count"))
        return {"text": answer.text, "finish": answer.response_metadata["finish_reason"]}

    b = StateGraph(_Writing)
    b.add_node("plan", plan)
    b.add_node("writer", writer)
    b.add_edge(START, "plan")
    b.add_edge("plan", "writer")
    b.add_edge("writer", END)
    return b


@pytest.mark.anyio
async def test_with_a_book_attached_the_writer_ends_its_answer_before_the_deadline(
    counting: FakeOpenAIServer,
) -> None:
    book = LatencyBook(listen=False)
    warm = with_deadlines(_writer_graph(counting), timeout=30.0, book=book)
    for _ in range(RUN_RATE["min_samples"]):  # streamed calls with time to spare: the rate
        await warm.ainvoke({"limit": 20})
    assert book.count("gpt-fake", PER_TOKEN) == RUN_RATE["min_samples"]

    budget = 1.5
    graph = with_deadlines(_writer_graph(counting), timeout=budget, book=book)
    t0 = time.monotonic()
    out = await graph.ainvoke({})
    took = time.monotonic() - t0
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED, out["deadline_outcome"]
    assert out["finish"] == "length"  # it ended by itself, a whole answer
    sent = counting.requests[-1].max_tokens
    assert sent is not None and 20 < sent < budget / TICK
    assert len(out["text"].split()) == sent
    assert took < budget

    # turned off, today's behaviour: no max_tokens, the answer is cut at the deadline
    off = with_deadlines(_writer_graph(counting), timeout=budget, book=book, keep_back=False)
    out = await off.ainvoke({})
    assert counting.requests[-1].max_tokens is None
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
