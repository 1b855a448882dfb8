"""MiddlewareSettings: checked once, read-only, reachable from the middleware."""

from __future__ import annotations

import dataclasses

import pytest

from langgraph_deadline._agents.settings import MiddlewareSettings
from langgraph_deadline.agents import DeadlineMiddleware


def test_bad_settings_get_clear_errors() -> None:
    with pytest.raises(ValueError, match="timeout"):
        DeadlineMiddleware(timeout=-1)
    with pytest.raises(ValueError, match="tool_caps\\['search'\\]"):
        DeadlineMiddleware(tool_caps={"search": float("nan")})
    with pytest.raises(TypeError, match="model_min_viable"):
        DeadlineMiddleware(model_min_viable="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens_per_second"):
        DeadlineMiddleware(tokens_per_second=0)
    with pytest.raises(TypeError, match="partial_answer"):
        DeadlineMiddleware(partial_answer="no")  # type: ignore[arg-type]


def test_settings_are_checked_floats_and_the_middleware_reads_them() -> None:
    middleware = DeadlineMiddleware(
        timeout=20, reserve=1, tool_caps={"search": 5}, default_tool_cap=8, tokens_per_second=50
    )
    settings = middleware.settings
    assert settings == MiddlewareSettings(
        timeout=20.0,
        reserve=1.0,
        tool_caps={"search": 5.0},
        default_tool_cap=8.0,
        tokens_per_second=50.0,
    )
    assert (middleware.timeout, middleware.reserve, middleware.model_cap) == (20.0, 1.0, None)
    assert dict(middleware.tool_caps) == {"search": 5.0}
    assert middleware.partial_answer is True
    assert DeadlineMiddleware(partial_answer=False).partial_answer is False
    assert (settings.tool_cap("search"), settings.tool_cap("other")) == (5.0, 8.0)


def test_settings_cannot_be_changed_after_they_are_made() -> None:
    settings = MiddlewareSettings(tool_caps={"search": 5.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.timeout = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.tool_caps["search"] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):
        DeadlineMiddleware().timeout = 1.0  # type: ignore[misc]
