"""`DeadlineMiddleware(fallbacks=[...])`: a `create_agent` agent's model calls go to a
faster model when the agent's own would not fit the deadline, failed, or was cut at its cap;
never past the deadline. Real `ChatOpenAI`s against local streaming servers: a slow main
(`gpt-slow`) and a fast fallback (`gpt-fast`)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelFallbackMiddleware
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langgraph_deadline import Terminal, budgeted_model, deadline_scope
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, await_nothing_sent_after
from langgraph_deadline.types import StepStatus

from .support import MARGIN, SLOW, ask, assert_valid_history, deadline_of, orders
from .support import chat_named as chat


def book_of(seconds: float) -> LatencyBook:
    """A book that has seen the agent's model calls (`model`) take `seconds`, 20 times."""
    book = LatencyBook(listen=False)
    for _ in range(20):
        book.record("model", "model", seconds)
    return book


def models(out: dict[str, Any]) -> list[tuple[str, StepStatus]]:
    return [(r.name, r.status) for r in out["deadline_trace"] if r.kind == "model"]


@pytest.mark.anyio
async def test_an_agent_model_the_book_says_is_too_slow_is_passed_over_for_the_fallback(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    fast.enqueue(ChatReply.tool_call("orders", {"query": "42"}))
    agent = create_agent(
        chat(slow, "gpt-slow"),
        [orders],
        middleware=[
            DeadlineMiddleware(
                timeout=2.0,
                fallbacks=[chat(fast, "gpt-fast")],
                book=book_of(3.0),
            )
        ],
    )
    out = await agent.ainvoke(ask())

    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert slow.requests == []  # no request to the model that would not fit
    assert [r.body["tools"][0]["function"]["name"] for r in fast.requests] == ["orders"] * 2
    assert models(out) == [("gpt-fast", StepStatus.COMPLETED)] * 2
    answer = out["messages"][-1]
    assert answer.content == "fast answer"
    marked = answer.response_metadata["langgraph_deadline"]
    assert marked["fallback"] == "gpt-fast" and marked["reason"].startswith("model learned p90 2.9")
    notes = [r.note or "" for r in out["deadline_trace"] if r.kind == "model"]
    assert all(n.startswith("fallback: model learned p90 2.9") for n in notes)
    assert notes[-1] == f"fallback: {marked['reason']}"
    assert_valid_history(out["messages"])


@pytest.mark.anyio
async def test_a_provider_error_with_time_left_falls_back_inside_the_deadline(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    slow.enqueue(ChatReply.error(500))
    agent = create_agent(
        chat(slow, "gpt-slow", max_retries=0),
        [],
        middleware=[DeadlineMiddleware(timeout=3.0, fallbacks=[chat(fast, "gpt-fast")])],
    )
    out = await agent.ainvoke(ask())
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert models(out) == [("model", StepStatus.FAILED), ("gpt-fast", StepStatus.COMPLETED)]
    assert out["messages"][-1].content == "fast answer"
    read_timeout = fast.requests[0].read_timeout
    assert read_timeout is not None and read_timeout < 3.0  # what was left, not a fresh budget


@pytest.mark.anyio
async def test_an_agent_model_cut_at_its_cap_leaves_the_rest_to_the_fallback(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    agent = create_agent(
        chat(slow, "gpt-slow"),
        [],
        middleware=[
            DeadlineMiddleware(
                timeout=5.0, fallbacks=[chat(fast, "gpt-fast")], model_limits=ModelLimits(cap=0.5)
            )
        ],
    )
    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert models(out) == [("model", StepStatus.TIMED_OUT), ("gpt-fast", StepStatus.COMPLETED)]
    assert out["messages"][-1].content == "fast answer"  # the cut text is not kept
    await await_nothing_sent_after(slow, t0 + 0.5, within=MARGIN)
    assert slow.requests[0].disconnected is not None


@pytest.mark.anyio
async def test_nothing_runs_past_the_deadline_when_the_fallback_is_slow_too(
    slow: FakeOpenAIServer,
) -> None:
    with FakeOpenAIServer(default_reply=ChatReply.counting(200, chunk_interval=SLOW)) as second:
        agent = create_agent(
            chat(slow, "gpt-slow"),
            [],
            middleware=[
                DeadlineMiddleware(
                    timeout=1.2,
                    fallbacks=[chat(second, "gpt-fast")],
                    model_limits=ModelLimits(cap=0.4),
                )
            ],
        )
        out = await agent.ainvoke(ask())
        outcome = out["deadline_outcome"]
        assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "gpt-fast"
        assert models(out) == [("model", StepStatus.TIMED_OUT), ("gpt-fast", StepStatus.TIMED_OUT)]
        for server in (slow, second):
            await await_nothing_sent_after(server, deadline_of(out), within=MARGIN)
            assert server.requests[0].disconnected is not None
        assert_valid_history(out["messages"])


@pytest.mark.anyio
async def test_when_no_model_can_start_the_agent_ends_without_a_request(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    fallback = budgeted_model(chat(fast, "gpt-fast"), min_viable=1.0, name="gpt-fast")
    agent = create_agent(
        chat(slow, "gpt-slow"),
        [],
        middleware=[
            DeadlineMiddleware(
                timeout=5.0, fallbacks=[fallback], model_limits=ModelLimits(min_viable=1.0)
            )
        ],
    )
    with deadline_scope(0.5):  # the caller has half a second: no model's min_viable fits
        out = await agent.ainvoke(ask())
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert models(out) == [("model", StepStatus.SKIPPED)]
    assert slow.requests == [] and fast.requests == []


@pytest.mark.anyio
async def test_next_to_langchains_model_fallback_middleware_its_backup_answers_errors_in_budget(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    fast.enqueue(ChatReply.error(500))
    with FakeOpenAIServer(default_reply=ChatReply.text("backup answer")) as backup:
        agent = create_agent(
            chat(slow, "gpt-slow"),
            [],
            middleware=[
                DeadlineMiddleware(
                    timeout=2.0,
                    fallbacks=[chat(fast, "gpt-fast", max_retries=0)],
                    book=book_of(3.0),
                ),
                ModelFallbackMiddleware(chat(backup, "gpt-backup")),
            ],
        )
        out = await agent.ainvoke(ask())
        assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        assert out["messages"][-1].content == "backup answer"
        assert slow.requests == []  # ours chose by time: the main would not fit
        assert [r.status for r in fast.requests] == [500]  # theirs took the error...
        read_timeout = backup.requests[0].read_timeout
        assert read_timeout is not None and read_timeout < 2.0  # ...inside our budget
        assert models(out) == [("gpt-fast", StepStatus.COMPLETED)]


def test_sync_agents_fall_back_after_a_provider_error(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    slow.enqueue(ChatReply.error(500))
    agent = create_agent(
        chat(slow, "gpt-slow", max_retries=0),
        [],
        middleware=[DeadlineMiddleware(timeout=3.0, fallbacks=[chat(fast, "gpt-fast")])],
    )
    out = agent.invoke(ask())
    assert models(out) == [("model", StepStatus.FAILED), ("gpt-fast", StepStatus.COMPLETED)]
    assert out["messages"][-1].response_metadata["langgraph_deadline"]["fallback"] == "gpt-fast"


def test_bad_fallback_settings_are_refused_when_made_naming_the_argument() -> None:
    fast = ChatOpenAI(api_key=SecretStr("test"), model="gpt-fast")
    with pytest.raises(ValueError, match="fallbacks is empty"):
        DeadlineMiddleware(fallbacks=[])
    with pytest.raises(TypeError, match=r"fallbacks\[0\] must be a chat model"):
        DeadlineMiddleware(fallbacks=["gpt-4o-mini"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"fallbacks\[1\] is named 'gpt-fast'"):
        DeadlineMiddleware(fallbacks=[fast, fast])
    with pytest.raises(ValueError, match=r"fallbacks\[0\] is named 'model'"):
        DeadlineMiddleware(fallbacks=[budgeted_model(fast, name="model")])
    with pytest.raises(ValueError, match="fallback_quantile must be in"):
        DeadlineMiddleware(fallbacks=[fast], fallback_quantile=0.0)
    with pytest.raises(TypeError, match=r"fallbacks\[0\] must be a chat model"):
        DeadlineMiddleware(fallbacks=[budgeted_model(fast.bind_tools([orders]))])
    assert DeadlineMiddleware(fallbacks=[fast]).fallbacks == ("gpt-fast",)


def test_the_old_keywords_fallback_models_and_latency_book_are_gone() -> None:
    fast = ChatOpenAI(api_key=SecretStr("test"), model="gpt-fast")
    with pytest.raises(TypeError, match="fallback_models"):
        DeadlineMiddleware(fallback_models=[fast])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="latency_book"):
        DeadlineMiddleware(latency_book=LatencyBook(listen=False))  # type: ignore[call-arg]
    assert not hasattr(DeadlineMiddleware(fallbacks=[fast]), "fallback_models")


@pytest.mark.anyio
async def test_an_agent_model_below_its_min_viable_hands_the_call_to_a_fallback_that_fits(
    slow: FakeOpenAIServer, fast: FakeOpenAIServer
) -> None:
    agent = create_agent(
        chat(slow, "gpt-slow"),
        [],
        middleware=[
            DeadlineMiddleware(
                timeout=5.0,
                fallbacks=[chat(fast, "gpt-fast")],
                model_limits=ModelLimits(min_viable=2.0),
            )
        ],
    )
    with deadline_scope(1.0):
        out = await agent.ainvoke(ask())
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert models(out) == [("gpt-fast", StepStatus.COMPLETED)]
    assert slow.requests == []
