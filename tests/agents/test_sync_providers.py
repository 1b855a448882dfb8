"""Sync code bounds every provider on httpx or urllib3: a request that hangs is closed at the
deadline, and no SDK retry leaves after it.

A thread cannot be killed, so a sync call's caller always got its answer on time; but the request
stayed open on the abandoned worker thread until the provider's read timeout (Anthropic's SDK:
600 s, three times; Ollama and Gemini: never; botocore: 60 s), and an overloaded call's SDK
retries went out after the deadline. Real LangChain chat model classes (OpenAI, Anthropic,
Ollama, Gemini, Mistral on httpx; Bedrock Converse on botocore and urllib3) with their own SDK
clients, none given by us, under the three documented ways (a `with_deadlines` node,
`budgeted_model`, `create_agent` with `DeadlineMiddleware`), each `invoke`d (the node also
`stream`ed, and `ainvoke`d: a sync node on LangGraph's executor), against a loopback server
that needs no provider protocol: it reads a request and never answers (a hang), or answers 503
with `retry-after` (an overload), and records when each connection was opened and closed and
when each request arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langgraph.graph import START, StateGraph

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    budgeted_model,
    deadline_scope,
    with_deadlines,
)
from langgraph_deadline.agents import DeadlineMiddleware

TIMEOUT = 0.5
RETRY_AFTER = 0.35  # SDKs that retry (OpenAI, Anthropic) retry at 0.35 s, then at 0.7 s: late
MARGIN = 0.3  # a loaded 2-core machine (the close is seen about 10 ms after the deadline)
LATE = 0.1  # a request that arrives this long after the deadline was sent after it


class Loopback:
    """A loopback HTTP/1.1 server for any provider: `hang` reads each request and never
    answers; `overload` answers each with a 503 and `retry-after`. Times are monotonic."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.opened: list[float] = []
        self.closed: list[float] = []
        self.arrived: list[float] = []
        self._changed = threading.Condition()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._changed:
                self.opened.append(time.monotonic())
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        pending = b""
        with conn:
            try:
                while data := conn.recv(65536):
                    pending += data
                    while (ends := pending.find(b"\r\n\r\n")) >= 0:
                        size = _content_length(pending[:ends])
                        if len(pending) < ends + 4 + size:
                            break
                        pending = pending[ends + 4 + size :]
                        with self._changed:
                            self.arrived.append(time.monotonic())
                        if self.mode == "overload":
                            conn.sendall(_overloaded())
            except OSError:
                pass
            with self._changed:
                self.closed.append(time.monotonic())
                self._changed.notify_all()

    def wait_closed(self, until: float) -> bool:
        """Whether every connection opened so far is closed, waiting until monotonic `until`."""
        with self._changed:
            return self._changed.wait_for(
                lambda: len(self.closed) >= len(self.opened) > 0,
                max(0.0, until - time.monotonic()),
            )

    def stop(self) -> None:
        self._sock.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _overloaded() -> bytes:
    body = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: %s\r\ncontent-length: %d\r\n\r\n%s"
    ) % (str(RETRY_AFTER).encode(), len(body), body)


# -- the providers, each with its SDK's own client and defaults ---------------------------------


def _openai(url: str) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=f"{url}/v1", api_key="test", model="gpt-test")  # type: ignore[arg-type]


def _azure(url: str) -> BaseChatModel:
    from langchain_openai import AzureChatOpenAI

    return AzureChatOpenAI(
        azure_endpoint=url,
        azure_deployment="gpt-test",
        api_version="2024-10-21",
        api_key="test",  # type: ignore[arg-type]
    )


def _anthropic(url: str) -> BaseChatModel:
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(base_url=url, api_key="test", model="claude-test")  # type: ignore[call-arg,arg-type]


def _ollama(url: str) -> BaseChatModel:
    from langchain_ollama import ChatOllama

    return ChatOllama(base_url=url, model="llama-test")


def _gemini(url: str) -> BaseChatModel:
    from langchain_google_genai import ChatGoogleGenerativeAI

    return ChatGoogleGenerativeAI(model="gemini-test", api_key="test", base_url=url)  # type: ignore[arg-type]


def _mistral(url: str) -> BaseChatModel:
    from langchain_mistralai import ChatMistralAI

    return ChatMistralAI(base_url=f"{url}/v1", api_key="test", model="mistral-test")  # type: ignore[call-arg,arg-type]


def _bedrock(url: str) -> BaseChatModel:
    from langchain_aws import ChatBedrockConverse

    return ChatBedrockConverse(
        model="bedrock-test",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test",  # type: ignore[arg-type]
        aws_secret_access_key="test",  # type: ignore[arg-type]
    )


def _groq(url: str) -> BaseChatModel:
    from langchain_groq import ChatGroq

    return ChatGroq(base_url=url, api_key="test", model="llama-test")  # type: ignore[arg-type]


def _litellm(url: str) -> BaseChatModel:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # (no fetch at import)
    from langchain_litellm import ChatLiteLLM

    return ChatLiteLLM(model="openai/gpt-test", api_base=f"{url}/v1", api_key="test")


PROVIDERS: dict[str, Callable[[str], BaseChatModel]] = {
    "openai": _openai,
    "azure": _azure,
    "anthropic": _anthropic,
    "ollama": _ollama,
    "gemini": _gemini,
    "mistral": _mistral,
    "bedrock": _bedrock,  # botocore over urllib3, not httpx
    "groq": _groq,
    "litellm": _litellm,  # litellm's OpenAI route: the openai SDK on httpx
}


# -- the three documented ways --------------------------------------------------------------------


class State(DeadlineState, total=False):
    answer: str


def _node(model: BaseChatModel, *, stream: bool = False, run_async: bool = False) -> None:
    def ask(state: State) -> dict[str, Any]:
        return {"answer": str(model.invoke("hi").content)}

    graph = with_deadlines(
        StateGraph(State).add_node("ask", ask).add_edge(START, "ask"), timeout=TIMEOUT
    )
    if run_async:  # the sync node runs on LangGraph's executor thread, not on a worker of ours
        loop = asyncio.new_event_loop()  # (not asyncio.run: it waits for the executor's threads)
        try:
            out = loop.run_until_complete(graph.ainvoke({"answer": ""}))
        finally:
            loop.close()
    elif stream:
        *_, out = graph.stream({"answer": ""}, stream_mode="values")
    else:
        out = graph.invoke({"answer": ""})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


def _budgeted(model: BaseChatModel) -> None:
    llm = budgeted_model(model)
    with deadline_scope(TIMEOUT), pytest.raises(DeadlineExceeded):
        llm.invoke("hi")


def _agent(model: BaseChatModel) -> None:
    agent = create_agent(model, [], middleware=[DeadlineMiddleware(timeout=TIMEOUT)])
    out = agent.invoke({"messages": [HumanMessage("hi")]})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


WAYS: dict[str, Callable[[BaseChatModel], None]] = {
    "node": _node,
    "node-stream": lambda model: _node(model, stream=True),
    "node-ainvoke": lambda model: _node(model, run_async=True),
    "budgeted": _budgeted,
    "agent": _agent,
}


@pytest.fixture
def hang() -> Iterator[Loopback]:
    server = Loopback("hang")
    yield server
    server.stop()


@pytest.fixture
def overload() -> Iterator[Loopback]:
    server = Loopback("overload")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def _litellm_imported() -> None:
    """litellm imports most of itself lazily, on its first call: made inside a 0.5 s budget,
    that call spent the budget importing (on a fresh machine, CI) and its request never left.
    One untimed call to a server that answers does the imports first, as a warm process has."""
    from langgraph_deadline.testing import ChatReply, FakeOpenAIServer

    with FakeOpenAIServer([ChatReply.counting(2)]) as server:
        _litellm(server.url).invoke("hi")


# (and under the parallel pass's load, the first call's imports on the abandoned thread held
# the GIL past the caller's return margin once, CI +0.55 s: litellm runs in the serial pass)
_HUNG = [pytest.param(p, marks=pytest.mark.serial) if p == "litellm" else p for p in PROVIDERS]


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("provider", _HUNG)
def test_a_hung_sync_request_is_closed_at_the_deadline(
    hang: Loopback, provider: str, way: str, request: pytest.FixtureRequest
) -> None:
    if provider == "litellm":
        request.getfixturevalue("_litellm_imported")
    model = PROVIDERS[provider](hang.url)
    gc.collect()  # (a full pass of a heap grown by the tests before: 0.3 s under the GIL once)
    t0 = time.monotonic()
    WAYS[way](model)
    returned = time.monotonic()
    deadline = t0 + TIMEOUT  # (the run's own is no earlier: it was set after t0)

    assert returned < deadline + MARGIN
    assert hang.arrived, "the request never reached the server"
    # The abandoned thread's request ends at the deadline, not at the SDK's read timeout.
    assert hang.wait_closed(deadline + MARGIN), "the hung request stayed open past the deadline"
    assert max(hang.closed) < deadline + MARGIN
    assert all(arrived < deadline + LATE for arrived in hang.arrived)  # no retry after it


@pytest.mark.parametrize("way", ["node", "budgeted", "agent"])
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_no_sdk_retry_of_an_overloaded_sync_call_leaves_after_the_deadline(
    overload: Loopback, provider: str, way: str, request: pytest.FixtureRequest
) -> None:
    if provider == "litellm":
        request.getfixturevalue("_litellm_imported")
    model = PROVIDERS[provider](overload.url)
    gc.collect()
    t0 = time.monotonic()
    # Cut at the deadline while the SDK waits to retry, or failed at once by an SDK that does
    # not retry a 503 (Ollama's, Mistral's).
    with contextlib.suppress(Exception):
        WAYS[way](model)
    deadline = t0 + TIMEOUT
    assert time.monotonic() < deadline + MARGIN
    # Until the SDK's next retry would have come: after `retry-after` (OpenAI, Anthropic), or
    # 1 to 2 s after the first attempt (google-genai's backoff, which ignores `retry-after`).
    retried_by = t0 + 2.1 if provider == "gemini" else deadline + 2 * RETRY_AFTER + LATE
    time.sleep(max(0.0, retried_by - time.monotonic()))

    assert overload.arrived
    late = [
        round(arrived - deadline, 3) for arrived in overload.arrived if arrived > deadline + LATE
    ]
    assert not late, f"SDK retries sent after the deadline (s after it): {late}"


def test_a_sync_model_stream_that_stalls_is_closed_at_its_idle_cap() -> None:
    """docs/howto/stalls.md: a sync step cut as stalled has its stream's connection closed then,
    not when the SDK's read timeout (here the budget, 5 s) runs out."""
    from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
    from tests.chat_models import openai_chat

    stalling = ChatReply.counting(50, chunk_interval=0.01).stalling(after=5)  # then silence
    with FakeOpenAIServer([stalling]) as server:
        llm = budgeted_model(openai_chat(server), idle_cap=0.3)
        t0 = time.monotonic()
        with deadline_scope(5.0), pytest.raises(DeadlineExceeded, match="stalled"):
            llm.invoke("Write the summary.")
        assert time.monotonic() - t0 < 0.3 + 0.05 + MARGIN
        assert server.wait_disconnected(MARGIN), "the stalled stream stayed open"
        (request,) = server.requests
        assert request.disconnected is not None
        assert request.disconnected - t0 < 0.3 + 0.05 + MARGIN


@pytest.mark.parametrize("way", ["node", "budgeted", "agent", "budgeted-ainvoke"])
def test_botocores_retries_of_an_overloaded_bedrock_call_stop_at_the_deadline(
    overload: Loopback, way: str
) -> None:
    """A user who gave botocore more attempts (standard mode: its backoff grows to seconds):
    each retry goes through urllib3, refused once the deadline has passed (`sync_http.py`),
    sync and async alike (langchain-aws runs botocore on a thread for `ainvoke` too)."""
    from botocore.config import Config
    from langchain_aws import ChatBedrockConverse

    model = ChatBedrockConverse(
        model="bedrock-test",
        endpoint_url=overload.url,
        region_name="us-east-1",
        aws_access_key_id="test",  # type: ignore[arg-type]
        aws_secret_access_key="test",  # type: ignore[arg-type]
        config=Config(retries={"max_attempts": 6, "mode": "standard"}),
    )
    t0 = time.monotonic()
    with contextlib.suppress(Exception):
        if way == "budgeted-ainvoke":

            async def call() -> None:
                with deadline_scope(TIMEOUT):
                    await budgeted_model(model).ainvoke("hi")

            loop = asyncio.new_event_loop()  # (asyncio.run would wait for the thread, which
            try:  # sleeps out botocore's backoff before its retry is refused)
                loop.run_until_complete(call())
            finally:
                loop.close()
        else:
            WAYS[way](model)
    deadline = t0 + TIMEOUT
    assert time.monotonic() < deadline + MARGIN
    time.sleep(max(0.0, t0 + 3.0 - time.monotonic()))  # botocore's last retry came by 2.8 s

    assert len(overload.arrived) > 1  # botocore retried before the deadline
    late = [
        round(arrived - deadline, 3) for arrived in overload.arrived if arrived > deadline + LATE
    ]
    assert not late, f"botocore retries sent after the deadline (s after it): {late}"


def test_a_sync_bedrock_stream_that_stalls_is_closed_at_its_idle_cap() -> None:
    """docs/howto/stalls.md: botocore's ConverseStream too (urllib3's connection shut down when
    the step is abandoned as stalled), not at botocore's 60 s read timeout."""
    from langgraph_deadline.testing import ChatReply, FakeBedrockServer

    stalling = ChatReply.counting(50, chunk_interval=0.01).stalling(after=5)  # then silence
    with FakeBedrockServer([stalling]) as server:
        model = _bedrock(server.url)
        llm = budgeted_model(model.model_copy(update={"disable_streaming": False}), idle_cap=0.3)
        t0 = time.monotonic()
        with deadline_scope(5.0), pytest.raises(DeadlineExceeded, match="stalled"):
            llm.invoke("Write the summary.")
        assert time.monotonic() - t0 < 0.3 + 0.05 + MARGIN
        assert server.wait_disconnected(MARGIN), "the stalled stream stayed open"
        (request,) = server.requests
        assert request.chunks_sent > 0  # it was streaming
        assert request.disconnected is not None
        assert request.disconnected - t0 < 0.3 + 0.05 + MARGIN
