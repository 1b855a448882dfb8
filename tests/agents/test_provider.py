"""What the provider is told of a call's budget: a request timeout, `max_tokens` that fit."""

from __future__ import annotations

from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langgraph_deadline._agents.provider import provider_options, settings_max_tokens


def test_openai_models_get_the_budget_as_their_request_timeout() -> None:
    model = ChatOpenAI(api_key=SecretStr("test"))
    assert provider_options(model, 2.5) == {"timeout": 2.5}
    assert provider_options(model, 0.0) == {"timeout": 0.001}  # 0 would mean "no timeout"
    assert provider_options(model, None) == {}
    assert provider_options(object(), 2.5) == {}  # not known to pass it on


def test_max_tokens_are_cut_to_what_the_budget_can_stream_never_raised() -> None:
    assert provider_options(object(), 2.0, tokens_per_second=50) == {"max_tokens": 100}
    assert provider_options(object(), 2.0, tokens_per_second=50, max_tokens=10) == {
        "max_tokens": 10
    }
    # too little time for an answer: no limit from the budget (cut at it, as without a rate)
    assert provider_options(object(), 0.2, tokens_per_second=50) == {}
    assert provider_options(object(), 0.24, tokens_per_second=50) == {"max_tokens": 12}
    # never more than the fastest plausible rate streams, whatever rate was given
    assert provider_options(object(), 1.0, tokens_per_second=1e6) == {"max_tokens": 2000}


def test_the_limit_in_force_is_the_calls_else_the_models() -> None:
    model = ChatOpenAI(api_key=SecretStr("test"), max_tokens=300)
    assert settings_max_tokens(model, {"max_tokens": 20}) == 20
    assert settings_max_tokens(model, {}) == 300
    assert settings_max_tokens(object(), {"max_tokens": True}) is None
