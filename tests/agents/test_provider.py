"""What the provider is told of a call's budget: a request timeout where its SDK takes one per
call, and the output-token limit that fits, under the parameter its family takes."""

from __future__ import annotations

from langchain_anthropic import ChatAnthropic
from langchain_aws import ChatBedrockConverse
from langchain_google_genai import ChatGoogleGenerativeAI
from langchain_mistralai import ChatMistralAI
from langchain_ollama import ChatOllama
from langchain_openai import AzureChatOpenAI, ChatOpenAI
from pydantic import SecretStr

from langgraph_deadline._agents.provider import (
    CallOptions,
    call_options,
    provider_of,
    settings_max_tokens,
)


def _bedrock(**kw: object) -> ChatBedrockConverse:
    return ChatBedrockConverse(
        model="anthropic.claude-fake",
        region_name="us-east-1",
        aws_access_key_id=SecretStr("a"),
        aws_secret_access_key=SecretStr("b"),
        **kw,  # type: ignore[arg-type]
    )


def test_models_whose_sdk_takes_a_per_call_timeout_get_the_budget_as_theirs() -> None:
    model = ChatOpenAI(api_key=SecretStr("test"))
    assert call_options(model, 2.5, {}) == CallOptions({"timeout": 2.5})
    assert call_options(model, 0.0, {}).options == {"timeout": 0.001}  # 0: "no timeout"
    assert call_options(model, 2.5, {"timeout": 1.0}).options == {"timeout": 1.0}  # never later
    own = ChatOpenAI(api_key=SecretStr("test"), timeout=0.5)  # than the model's own, either
    assert call_options(own, 2.5, {}).options == {"timeout": 0.5}
    assert call_options(own, 2.5, {"timeout": 2.0}).options == {"timeout": 2.0}  # the call's
    assert call_options(model, None, {}) == CallOptions({})
    anthropic = ChatAnthropic(model_name="claude-fake", api_key=SecretStr("t"))  # type: ignore[call-arg]
    gemini = ChatGoogleGenerativeAI(model="gemini-fake", api_key=SecretStr("t"))
    for taking in (anthropic, gemini):
        assert call_options(taking, 2.5, {}).options == {"timeout": 2.5}
    anthropic_own = ChatAnthropic(model_name="c", api_key=SecretStr("t"), timeout=0.5)  # type: ignore[call-arg]
    gemini_own = ChatGoogleGenerativeAI(model="g", api_key=SecretStr("t"), timeout=0.5)
    for own_timeout in (anthropic_own, gemini_own):
        assert call_options(own_timeout, 2.5, {}).options == {"timeout": 0.5}
    # keywords these pass to their request body or client call: no timeout
    for not_taking in (ChatOllama(model="m"), ChatMistralAI(api_key=SecretStr("t")), _bedrock()):
        assert call_options(not_taking, 2.5, {}).options == {}
    assert call_options(object(), 2.5, {}).options == {}  # not known to pass it on


def test_the_limit_goes_under_the_name_each_family_takes() -> None:
    limits = {
        "OpenAI": (ChatOpenAI(api_key=SecretStr("t")), {"max_tokens": 100}),
        "Azure": (
            AzureChatOpenAI(azure_endpoint="http://x", api_key=SecretStr("t"), api_version="1"),
            {"max_tokens": 100},
        ),
        "Anthropic": (
            ChatAnthropic(model_name="claude-fake", api_key=SecretStr("t")),  # type: ignore[call-arg]
            {"max_tokens": 100},
        ),
        "Gemini": (
            ChatGoogleGenerativeAI(model="gemini-fake", api_key=SecretStr("t")),
            {"max_output_tokens": 100},
        ),
        "Ollama": (
            ChatOllama(model="m", temperature=0.5),
            {"options": {"temperature": 0.5, "num_predict": 100}},
        ),
        "Mistral": (ChatMistralAI(api_key=SecretStr("t")), {"max_tokens": 100}),
        "Bedrock": (_bedrock(), {"maxTokens": 100}),
    }
    for family, (model, expected) in limits.items():
        told = call_options(model, 2.0, {}, tokens_per_second=50)
        assert {k: v for k, v in told.options.items() if k != "timeout"} == expected, family
        assert told.tokens == 100, family
    # Bedrock: inside the call's own inferenceConfig, which replaces the model's
    told = call_options(_bedrock(), 2.0, {"inferenceConfig": {"topP": 0.5}}, tokens_per_second=50)
    assert told.options == {"inferenceConfig": {"topP": 0.5, "maxTokens": 100}}
    assert call_options(_bedrock(), 0.24, {}, tokens_per_second=50).options == {"maxTokens": 12}


def test_too_little_time_for_an_answer_sets_no_limit_and_a_fast_rate_is_bounded() -> None:
    model = ChatOpenAI(api_key=SecretStr("t"))

    def limit(budget: float, rate: float) -> object:
        return call_options(model, budget, {}, tokens_per_second=rate).options.get("max_tokens")

    assert limit(0.2, 50) is None  # 10 tokens: no answer; cut at its budget, as without a rate
    assert limit(0.24, 50) == 12
    assert limit(1.0, 1e6) == 2000  # never more than the fastest plausible rate streams


def test_the_limit_in_force_is_read_under_the_familys_name_and_never_raised() -> None:
    openai = ChatOpenAI(api_key=SecretStr("test"), max_tokens=300)
    assert settings_max_tokens(openai, {"max_tokens": 20}) == 20
    assert settings_max_tokens(openai, {}) == 300
    assert settings_max_tokens(object(), {"max_tokens": True}) is None
    ollama = ChatOllama(model="m", num_predict=30)
    assert settings_max_tokens(ollama, {}) == 30
    assert settings_max_tokens(ollama.bind(options={"num_predict": 7}), {}) == 7
    assert settings_max_tokens(ollama, {"options": {}}) is None  # the call's replace the model's
    gemini = ChatGoogleGenerativeAI(model="g", api_key=SecretStr("t"), max_output_tokens=12)
    assert settings_max_tokens(gemini, {}) == 12
    assert settings_max_tokens(_bedrock(max_tokens=9), {}) == 9
    assert settings_max_tokens(_bedrock(max_tokens=9), {"inferenceConfig": {"maxTokens": 4}}) == 4
    # the lower limit in force: nothing to send
    assert call_options(ollama, 2.0, {}, tokens_per_second=50) == CallOptions({})
    assert call_options(gemini, 2.0, {}, tokens_per_second=50).options == {"timeout": 2.0}


def test_the_family_is_found_through_bindings_and_subclasses() -> None:
    model = ChatOllama(model="m")
    assert provider_of(model.bind_tools([])) is provider_of(model) is not None
    assert provider_of(model.configurable_fields()) is provider_of(model)

    class MyOpenAI(ChatOpenAI):  # a subclass in the user's module: still OpenAI's family
        pass

    mine = provider_of(MyOpenAI(api_key=SecretStr("t")))
    assert mine is not None and mine.name == "OpenAI"
    assert provider_of(object()) is None
