"""MiddlewareSettings: checked once (the tool names at the agent's first model call), read-only,
reachable from the middleware."""

from __future__ import annotations

import dataclasses
import functools

import anyio
import pytest
from langchain.agents import create_agent

from langgraph_deadline import Terminal
from langgraph_deadline._agents.settings import MiddlewareSettings
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.agents.support import ask, hang, orders
from tests.chat_models import openai_chat as chat


def test_bad_settings_get_clear_errors() -> None:
    with pytest.raises(ValueError, match="timeout"):
        DeadlineMiddleware(timeout=-1)
    with pytest.raises(ValueError, match="tool_caps\\['search'\\]"):
        DeadlineMiddleware(tool_caps={"search": float("nan")})
    with pytest.raises(TypeError, match="min_viable"):
        DeadlineMiddleware(model_limits=ModelLimits(min_viable="1"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens_per_second"):
        DeadlineMiddleware(model_limits=ModelLimits(tokens_per_second=0))
    with pytest.raises(TypeError, match="partial_answer"):
        DeadlineMiddleware(partial_answer="no")  # type: ignore[arg-type]


def test_settings_are_checked_floats_and_the_middleware_reads_them() -> None:
    middleware = DeadlineMiddleware(
        timeout=20,
        reserve=1,
        tool_caps={"search": 5},
        default_tool_cap=8,
        model_limits=ModelLimits(tokens_per_second=50),
    )
    settings = middleware.settings
    assert settings == MiddlewareSettings(
        timeout=20.0,
        reserve=1.0,
        tool_caps={"search": 5.0},
        default_tool_cap=8.0,
        model_limits=ModelLimits(tokens_per_second=50.0),
    )
    assert (settings.timeout, settings.reserve, settings.model_limits.cap) == (20.0, 1.0, None)
    assert settings.partial_answer is True
    assert DeadlineMiddleware(partial_answer=False).settings.partial_answer is False
    # one place shows a setting: no read-only property mirrors it (#49)
    assert not hasattr(middleware, "timeout") and not hasattr(middleware, "tool_caps")
    assert (settings.tool_cap("search"), settings.tool_cap("other")) == (5.0, 8.0)


def test_settings_cannot_be_changed_after_they_are_made() -> None:
    settings = MiddlewareSettings(tool_caps={"search": 5.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.timeout = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.tool_caps["search"] = 1.0  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        DeadlineMiddleware().settings.timeout = 1.0  # type: ignore[misc]


def test_caps_of_zero_are_refused_naming_the_argument() -> None:
    for kwargs, named in (
        ({"tool_caps": {"search": 0}}, r"tool_caps\['search'\] must be more than 0"),
        ({"default_tool_cap": 0.0}, "default_tool_cap must be more than 0"),
    ):
        with pytest.raises(ValueError, match=named):
            DeadlineMiddleware(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cap must be more than 0"):
        DeadlineMiddleware(model_limits=ModelLimits(cap=0))


@pytest.mark.anyio
@pytest.mark.parametrize("sync", [False, True])
async def test_tool_caps_naming_a_tool_the_agent_lacks_are_refused_at_its_first_model_call(
    server: FakeOpenAIServer, sync: bool
) -> None:
    # A typo: `check_stock` would get the whole deadline, silently.
    middleware = DeadlineMiddleware(timeout=5.0, tool_caps={"chek_stock": 0.5, "orders": 1.0})
    agent = create_agent(chat(server), [orders, hang], middleware=[middleware])
    named = r"tool_caps names unknown tools \['chek_stock'\]; the agent's tools are \['hang', "
    run = functools.partial(anyio.to_thread.run_sync, agent.invoke) if sync else agent.ainvoke
    with pytest.raises(ValueError, match=named + r"'orders'\]"):
        await run(ask())
    assert server.requests == []  # refused before the model was asked


@pytest.mark.anyio
async def test_tool_caps_naming_the_agents_tools_are_accepted(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.text("order 42 shipped"))
    middleware = DeadlineMiddleware(timeout=5.0, tool_caps={"orders": 1.0})
    agent = create_agent(chat(server), [orders, hang], middleware=[middleware])
    out = await agent.ainvoke(ask())
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
