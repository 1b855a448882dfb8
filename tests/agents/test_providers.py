"""Every provider family users run, each with its real LangChain class pointed at a loopback
server speaking its wire protocol: the budget's token limit arrives under the parameter that
provider takes (the user's own never raised; a model of no known family gets none, and one
warning), the request timeout reaches the SDKs that take one per call, and a slow stream, a
hang or an overload ends at the deadline (the server sees the close, nothing sent after), under
the three documented ways: a `with_deadlines` node calling the model, `budgeted_model(model)`,
`create_agent(..., middleware=[DeadlineMiddleware(...)])`."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field, SecretStr

from langgraph_deadline import (
    DeadlineState,
    Terminal,
    budgeted_model,
    with_deadlines,
)
from langgraph_deadline._agents.provider import call_options
from langgraph_deadline._agents.timing import RUN_RATE
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import (
    ChatReply,
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeOllamaServer,
    FakeOpenAIServer,
)
from langgraph_deadline.testing._chat_server import ChatServer
from tests.agents.support import MARGIN, ask, orders
from tests.chat_models import ScriptedChatModel

SLOW = 0.05  # seconds between two streamed tokens: 200 take 10 s


@dataclasses.dataclass(frozen=True)
class Family:
    """A provider family: its loopback server, its LangChain model for that server (given its
    own options), the name its own token limit takes, its overload status, whether its SDK
    takes a per-call timeout, and whether it has no async client (its calls run on a thread)."""

    name: str
    server: type[ChatServer]
    make: Callable[..., BaseChatModel]
    own_limit: str
    overloaded: int = 503
    timeout: bool = False
    on_thread: bool = False  # no async client: LangChain runs its async calls on a thread


def _openai(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=s.base_url, api_key=SecretStr("t"), model="gpt-fake", **kw)


def _azure(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_openai import AzureChatOpenAI

    model = AzureChatOpenAI(
        azure_endpoint=s.url,
        azure_deployment="gpt-fake",
        api_version="2024-10-21",
        api_key=SecretStr("t"),
        **kw,
    )
    _OWN_CLIENTS.append(model.root_async_client)
    return model


def _anthropic(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(base_url=s.url, api_key=SecretStr("t"), model="claude-fake", **kw)


def _ollama(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_ollama import ChatOllama

    return ChatOllama(base_url=s.url, model="llama-fake", **kw)


def _gemini(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_google_genai import ChatGoogleGenerativeAI

    return ChatGoogleGenerativeAI(base_url=s.url, api_key=SecretStr("t"), model="gemini-fake", **kw)


def _mistral(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_mistralai import ChatMistralAI

    # Mistral's chat API is OpenAI's wire format: the OpenAI server speaks it
    return ChatMistralAI(endpoint=s.base_url, api_key=SecretStr("t"), model="mistral-fake", **kw)


def _bedrock(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_aws import ChatBedrockConverse

    return ChatBedrockConverse(
        model="anthropic.claude-3-haiku-20240307-v1:0",
        endpoint_url=s.url,
        region_name="us-east-1",
        aws_access_key_id=SecretStr("t"),
        aws_secret_access_key=SecretStr("t"),
        **kw,
    )


def _groq(s: Any, **kw: Any) -> BaseChatModel:
    from langchain_groq import ChatGroq

    # the groq SDK: OpenAI's wire format under /openai/v1 (the OpenAI server routes it)
    model = ChatGroq(base_url=s.url, api_key=SecretStr("t"), model="groq-fake", **kw)
    _OWN_CLIENTS.append(model.async_client._client)  # type: ignore[union-attr]
    return model


def _litellm(s: Any, **kw: Any) -> BaseChatModel:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # (no fetch at import)
    from langchain_litellm import ChatLiteLLM

    # litellm's OpenAI route (the openai SDK) to the OpenAI server; streaming, or its calls
    # stream no tokens a latency book can learn a rate from (docs/howto/providers.md)
    kw.setdefault("streaming", True)
    return ChatLiteLLM(model="openai/gpt-fake", api_base=s.base_url, api_key="t", **kw)


FAMILIES = [
    Family("openai", FakeOpenAIServer, _openai, "max_tokens", timeout=True),
    Family("azure", FakeOpenAIServer, _azure, "max_tokens", timeout=True),
    Family("anthropic", FakeAnthropicServer, _anthropic, "max_tokens", 529, timeout=True),
    Family("ollama", FakeOllamaServer, _ollama, "num_predict"),
    Family("gemini", FakeGeminiServer, _gemini, "max_output_tokens", timeout=True),
    Family("mistral", FakeOpenAIServer, _mistral, "max_tokens"),
    Family("bedrock", FakeBedrockServer, _bedrock, "max_tokens", on_thread=True),
    Family("groq", FakeOpenAIServer, _groq, "max_tokens", timeout=True),
    Family("litellm", FakeOpenAIServer, _litellm, "max_tokens"),
]


@pytest.fixture(params=FAMILIES, ids=[f.name for f in FAMILIES])
def family(request: pytest.FixtureRequest) -> Family:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def server(family: Family) -> AsyncIterator[ChatServer]:
    if family.name == "litellm":  # litellm imports most of itself on its first call: on a
        # fresh machine that call spent a 1 s budget importing (CI). One untimed call first,
        # to a server of its own, as a warm process has made.
        async with FakeOpenAIServer(default_reply=ChatReply.counting(2)) as warm:
            await family.make(warm).ainvoke("hi")
    async with family.server(default_reply=ChatReply.counting(8)) as s:
        yield s


@pytest.fixture(autouse=True)
async def _clients_closed_on_their_own_loop() -> AsyncIterator[None]:
    """The groq and Azure OpenAI SDKs' async clients (one per model, not cached as
    `ChatOpenAI`'s are) close themselves on whatever loop runs when they are collected: in a
    later test, a loop that is not theirs ("Event loop is closed" in that test). Each test
    closes the ones it made, on its own loop."""
    yield
    while _OWN_CLIENTS:
        await _OWN_CLIENTS.pop().close()


_OWN_CLIENTS: list[Any] = []  # async SDK clients the makers below made, closed after each test


class _Answer(DeadlineState, total=False):
    text: str


def _graph(call: Callable[[], Any], timeout: float, *, book: LatencyBook | None = None) -> Any:
    """A `with_deadlines` graph of one node that awaits `call()` (a model call)."""

    async def node(state: _Answer) -> dict[str, Any]:
        answer = await call()
        return {"text": answer.text if isinstance(answer, AIMessage) else repr(answer)}

    b = StateGraph(_Answer)
    b.add_node("answer", node)
    b.add_edge(START, "answer")
    b.add_edge("answer", END)
    return with_deadlines(b, timeout=timeout, book=book)


async def _streamed(model: Any) -> AIMessage:
    whole: Any = None
    async for chunk in model.astream("count"):
        whole = chunk if whole is None else whole + chunk
    return AIMessage(whole.text if whole is not None else "")


# -- the token limit: under each provider's own name, never raised --------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("way", ["budgeted_model", "middleware"])
async def test_the_budget_token_limit_reaches_each_provider_under_its_own_name(
    family: Family, server: ChatServer, way: str
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=0.002))
    model = family.make(server)
    if way == "budgeted_model":
        llm = budgeted_model(model, tokens_per_second=20.0)
        out = await _graph(lambda: llm.ainvoke("count"), timeout=1.0).ainvoke({})
        text = out["text"]
    else:  # tools bound by the agent: bind_tools keeps the limit's place
        mw = DeadlineMiddleware(timeout=1.0, model_limits=ModelLimits(tokens_per_second=20.0))
        out = await create_agent(model, [orders], middleware=[mw]).ainvoke(ask())
        text = out["messages"][-1].text
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED, out["deadline_outcome"]
    served = server.requests[-1]
    assert served.max_tokens is not None and 1 <= served.max_tokens <= 20  # 1 s at 20 a second
    assert len(text.split()) == served.max_tokens  # the provider ended the answer there
    if family.timeout:  # the SDK was told the budget as the request's timeout
        assert served.read_timeout is not None and served.read_timeout <= math.ceil(1.0)


@pytest.mark.anyio
async def test_a_learned_rate_sizes_the_eleventh_call_of_every_provider(
    family: Family, server: ChatServer
) -> None:
    """The issue's failure: once the book attached to the middleware holds 10 streamed calls,
    every later call got `max_tokens`, and Ollama's and Gemini's calls broke."""
    book = LatencyBook(listen=False)
    agent = create_agent(
        family.make(server), [orders], middleware=[DeadlineMiddleware(timeout=30.0, book=book)]
    )
    for _ in range(RUN_RATE["min_samples"]):
        server.enqueue(ChatReply.counting(12, chunk_interval=0.01))
        await agent.ainvoke(ask())
    cold = server.requests[-1].max_tokens  # none, or the model's own (Anthropic's default)
    server.enqueue(ChatReply.counting(400, chunk_interval=0.01))
    mw = DeadlineMiddleware(timeout=1.0, book=book)
    out = await create_agent(family.make(server), [orders], middleware=[mw]).ainvoke(ask())
    # not broken (on main: Ollama's TypeError, Gemini's ValidationError); how well the learned
    # rate sizes the answer is the book's business (tests/agents/test_learned_tokens.py)
    assert out["deadline_outcome"].terminal in (Terminal.COMPLETED, Terminal.DEADLINE_EXCEEDED)
    sent = server.requests[-1].max_tokens  # the 11th call: sized to the 1 s it has (~100)
    assert sent is not None and sent < 400 and (cold is None or sent < cold)


@pytest.mark.anyio
async def test_the_users_own_limit_is_never_raised(family: Family, server: ChatServer) -> None:
    model = family.make(server, **{family.own_limit: 3})
    llm = budgeted_model(model, tokens_per_second=1000.0)
    out = await _graph(lambda: llm.ainvoke("count"), timeout=5.0).ainvoke({})
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert server.requests[-1].max_tokens == 3


@pytest.mark.anyio
async def test_ollama_options_the_user_set_are_kept_beside_the_limit() -> None:
    async with FakeOllamaServer(default_reply=ChatReply.counting(50)) as server:
        llm = budgeted_model(_ollama(server, temperature=0.3, top_k=7), tokens_per_second=10.0)
        await _graph(lambda: llm.ainvoke("count"), timeout=2.0).ainvoke({})
        options = server.requests[-1].body["options"]
        assert options["temperature"] == 0.3 and options["top_k"] == 7
        assert 1 <= options["num_predict"] <= 20
        # options given with the call replace the model's (Ollama's rule): the limit joins them
        await _graph(lambda: llm.ainvoke("count", options={"seed": 1}), timeout=2.0).ainvoke({})
        options = server.requests[-1].body["options"]
        assert options.keys() == {"seed", "num_predict"} and options["num_predict"] <= 20


class _Point(BaseModel):
    x: int


@pytest.mark.anyio
async def test_structured_output_and_configurable_models_get_the_limit_too() -> None:
    async with FakeOllamaServer(default_reply=ChatReply.text('{"x": 4}')) as server:
        structured = _ollama(server).with_structured_output(_Point)
        llm = budgeted_model(structured, tokens_per_second=20.0)
        out = await _graph(lambda: llm.ainvoke("a point"), timeout=1.0).ainvoke({})
        assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        assert out["text"] == repr(_Point(x=4))
        assert 1 <= (server.requests[-1].max_tokens or 0) <= 20
    configurable = _ollama(server).configurable_fields()
    told = call_options(configurable, 1.0, {}, tokens_per_second=20.0)
    assert told.options == {"options": {"num_predict": 20}} and told.tokens == 20


class _Recording(ScriptedChatModel):
    """A chat model of no family langgraph-deadline knows: it records each call's keywords."""

    seen: list[dict[str, Any]] = Field(default_factory=list)

    async def _agenerate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        self.seen.append(kwargs)
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


@pytest.mark.anyio
async def test_a_model_of_no_known_family_gets_no_limit_and_one_warning() -> None:
    model = _Recording(seen=[])
    llm = budgeted_model(model, tokens_per_second=20.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            await _graph(lambda: llm.ainvoke("hi"), timeout=1.0).ainvoke({})
    assert model.seen == [{}, {}]  # no max_tokens it might not take
    told = [w for w in caught if "_Recording takes no output-token limit" in str(w.message)]
    assert len(told) == 1


# -- the deadline holds: a slow stream, a hang, an overload -----------------------------------


def _way_call(way: str, model: BaseChatModel, timeout: float) -> Callable[[], Any]:
    """The run of one documented way, awaited: its result, or DeadlineExceeded."""
    if way == "node":  # a with_deadlines node streaming the plain model
        return lambda: _graph(lambda: _streamed(model), timeout=timeout).ainvoke({})
    if way == "budgeted_model":
        llm = budgeted_model(model)
        return lambda: _graph(lambda: llm.ainvoke("count"), timeout=timeout).ainvoke({})
    agent = create_agent(model, [orders], middleware=[DeadlineMiddleware(timeout=timeout)])
    if way == "middleware-astream":  # the agent's own stream, as a chat UI reads it
        return lambda: _last_state(agent.astream(ask(), stream_mode="values"))
    return lambda: agent.ainvoke(ask())


async def _last_state(states: AsyncIterator[Any]) -> Any:
    last = None
    async for state in states:
        last = state
    return last


WAYS = ["node", "budgeted_model", "middleware", "middleware-astream"]


@pytest.mark.anyio
@pytest.mark.parametrize("way", WAYS)
async def test_a_slow_stream_is_closed_at_the_deadline(
    family: Family, server: ChatServer, way: str
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    timeout = 0.6
    call = _way_call(
        way,
        family.make(server, streaming=True) if family.name != "ollama" else family.make(server),
        timeout,
    )
    t0 = time.monotonic()
    out = await call()
    took = time.monotonic() - t0
    deadline = t0 + timeout
    assert out["deadline_outcome"].terminal is not Terminal.COMPLETED
    assert took < timeout + MARGIN
    assert await server.await_disconnected(MARGIN)
    (served,) = server.requests
    assert served.chunks_sent > 0  # it was streaming
    assert served.disconnected is not None and served.disconnected < deadline + MARGIN
    assert server.chunks_sent_after(served.disconnected) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("way", WAYS[:3])
async def test_a_hang_is_closed_at_the_deadline(
    family: Family, server: ChatServer, way: str
) -> None:
    """Bedrock's included: langchain-aws runs botocore on a thread, which the cancel scope
    cannot reach; its read timeout, cut to the budget, ends the request there
    (`sync_http.py`), not botocore's 60 s later."""
    server.enqueue(ChatReply.hang())
    timeout = 0.6
    call = _way_call(way, family.make(server), timeout)
    t0 = time.monotonic()
    out = await call()
    deadline = t0 + timeout
    assert time.monotonic() < deadline + MARGIN
    assert out["deadline_outcome"].terminal is not Terminal.COMPLETED
    assert await server.await_disconnected(MARGIN)
    (served,) = server.requests  # no retry: botocore's is refused past the deadline
    assert served.disconnected is not None and served.disconnected < deadline + MARGIN


@pytest.mark.anyio
async def test_an_overload_is_not_retried_after_the_deadline(
    family: Family, server: ChatServer
) -> None:
    for _ in range(4):  # whatever retries the SDK makes: each answered "overloaded"
        server.enqueue(ChatReply.error(family.overloaded, "Overloaded", retry_after=0.5))
    llm = budgeted_model(family.make(server))
    timeout = 0.8  # the first retry (after 0.5 s) fits, the second would start after it
    graph = _graph(lambda: llm.ainvoke("count"), timeout=timeout)
    t0 = time.monotonic()  # the run's deadline is a little after t0 + timeout
    # cut at the deadline (DeadlineExceeded), or the SDK gave up before it (its error)
    with contextlib.suppress(Exception):
        await graph.ainvoke({})
    assert time.monotonic() - t0 < timeout + MARGIN
    await server.await_idle(MARGIN)
    await anyio.sleep(0.4)  # a retry the SDK had scheduled would arrive by now
    assert server.requests_after(t0 + timeout + 0.05) == []


@pytest.mark.anyio
async def test_a_stall_in_any_stream_format_hands_the_call_to_another_providers_model(
    family: Family, server: ChatServer
) -> None:
    """`idle_cap` on each provider's stream format, and a fallback across providers (an
    Anthropic model falling back to an Ollama one; Ollama's to an Anthropic one)."""
    by_name = {f.name: f for f in FAMILIES}
    other = by_name["ollama" if family.name != "ollama" else "anthropic"]
    server.enqueue(ChatReply.counting(50, chunk_interval=0.01).stalling(after=3, seconds=30.0))
    async with other.server(default_reply=ChatReply.text("fallback answer")) as backup:
        fallback = other.make(backup)
        llm = budgeted_model(family.make(server), idle_cap=0.3, fallbacks=[fallback])
        t0 = time.monotonic()
        out = await _graph(lambda: llm.ainvoke("count"), timeout=5.0).ainvoke({})
        took = time.monotonic() - t0
    assert out["text"] == "fallback answer"
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert took < 0.3 + MARGIN + 1.0  # cut near its idle cap, not at the deadline
    if not family.on_thread:  # the stalled stream's connection was closed at the cut
        assert await server.await_disconnected(MARGIN)
