"""The local OpenAI-compatible server, driven by the real `ChatOpenAI` (langchain-openai, OpenAI
SDK, HTTP over loopback): what it streams, and what it sees when the client goes away."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_deadline.testing import (
    ChatReply,
    FakeOpenAIServer,
    ScriptedToolCall,
    await_nothing_sent_after,
)

MARGIN = 0.5  # generous: a loaded 2-core machine


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def chat(server: FakeOpenAIServer, **kwargs: Any) -> ChatOpenAI:
    options: dict[str, Any] = {"streaming": True, "max_retries": 0, "timeout": 10.0}
    options.update(kwargs)
    return ChatOpenAI(base_url=server.base_url, api_key="test", model="gpt-fake", **options)


_REFUND = {"name": "refund", "args": {"order": "42"}, "id": "call_1", "type": "tool_call"}


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by id."""
    return f"order {order_id}: shipped"


# -- what the client receives ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_text_stream_arrives_in_order_one_chunk_per_interval(
    server: FakeOpenAIServer,
) -> None:
    server.chunk_interval = 0.02
    server.enqueue(ChatReply.counting(20))
    model = chat(server)

    pieces = [
        chunk.content
        async for chunk in model.astream(
            [SystemMessage("be brief"), HumanMessage("count to twenty")]
        )
    ]

    assert await server.await_idle(MARGIN)  # the client may see the end before the server notes it
    text = "".join(str(p) for p in pieces)
    assert text == " ".join(str(i) for i in range(1, 21))
    assert [p for p in pieces if p] == ["1", *(f" {i}" for i in range(2, 21))]
    (req,) = server.requests
    assert (req.status, req.stream, req.messages, req.model) == (200, True, 2, "gpt-fake")
    assert req.chunks_sent == 20
    assert req.chunk_times == sorted(req.chunk_times)
    assert req.chunk_times[-1] - req.chunk_times[0] >= 19 * 0.02 * 0.9  # paced, not bursted
    assert req.ended is not None and req.disconnected is None and not req.open
    assert req.retry_count == 0 and req.read_timeout == 10.0
    assert server.open_requests() == []


@pytest.mark.anyio
async def test_usage_is_streamed_when_the_client_asks(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.text("one two three"))
    message = await chat(server, stream_usage=True).ainvoke("hi")
    assert message.content == "one two three"
    assert isinstance(message, AIMessage) and message.usage_metadata is not None
    assert message.usage_metadata["output_tokens"] == 3
    assert server.requests[0].body["stream_options"] == {"include_usage": True}


@pytest.mark.anyio
async def test_tool_call_is_parsed_into_ai_message_tool_calls(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ChatReply.tool_call("lookup_order", {"order_id": "A-17"}, id="call_1"),
        ChatReply.tool_calls(
            ScriptedToolCall("lookup_order", {"order_id": "B-2"}),
            ScriptedToolCall("lookup_order", {"order_id": "C-3"}),
            text="Checking both.",
        ),
    )
    model = chat(server).bind_tools([lookup_order])

    one = await model.ainvoke("where is A-17?")
    two = await model.ainvoke("where are B-2 and C-3?")

    assert isinstance(one, AIMessage) and isinstance(two, AIMessage)
    assert one.tool_calls == [
        {"name": "lookup_order", "args": {"order_id": "A-17"}, "id": "call_1", "type": "tool_call"}
    ]
    assert one.response_metadata["finish_reason"] == "tool_calls"
    assert two.content == "Checking both."
    assert [(c["args"]["order_id"], c["id"]) for c in two.tool_calls] == [
        ("B-2", "call_fake1_0"),
        ("C-3", "call_fake1_1"),
    ]
    assert await server.await_idle(MARGIN)
    assert server.requests[0].body["tools"][0]["function"]["name"] == "lookup_order"
    assert server.requests[0].chunks_sent > 2  # the id/name delta and the argument pieces


@pytest.mark.anyio
async def test_tool_node_loop_runs_against_the_server(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ChatReply.tool_call("lookup_order", {"order_id": "A-17"}),
        ChatReply.text("Your order A-17 has shipped."),
    )
    model = chat(server).bind_tools([lookup_order])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup_order]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()

    out = await graph.ainvoke({"messages": [HumanMessage("where is A-17?")]})

    tool_message = out["messages"][2]
    assert isinstance(tool_message, ToolMessage)
    assert tool_message.content == "order A-17: shipped"
    assert out["messages"][-1].content == "Your order A-17 has shipped."
    assert [r.messages for r in server.requests] == [1, 3]  # human; human, ai, tool


def test_non_streaming_text_and_tool_call_sync(server: FakeOpenAIServer) -> None:
    server.enqueue(
        ChatReply.text("plain answer", delay=0.05),
        ChatReply.tool_call("lookup_order", {"order_id": "Z"}),
    )
    model = chat(server, streaming=False)

    assert model.invoke("hi").content == "plain answer"
    called = model.bind_tools([lookup_order]).invoke("where is Z?")

    assert isinstance(called, AIMessage)
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [
        ("lookup_order", {"order_id": "Z"})
    ]
    assert server.wait_idle(MARGIN)
    assert [(r.stream, r.status, r.chunks_sent) for r in server.requests] == [
        (False, 200, 0),
        (False, 200, 0),
    ]


@pytest.mark.anyio
async def test_default_reply_when_the_script_is_exhausted(server: FakeOpenAIServer) -> None:
    server.default_reply = ChatReply.text("default")
    server.enqueue(ChatReply.text("scripted"))
    model = chat(server)
    assert server.pending_replies == 1
    assert [(await model.ainvoke("x")).content for _ in range(3)] == [
        "scripted",
        "default",
        "default",
    ]
    assert server.pending_replies == 0


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "error", "retry_after"),
    [
        (ChatReply.error(500), openai.InternalServerError, None),
        (ChatReply.rate_limited(retry_after=7), openai.RateLimitError, "7"),
    ],
    ids=["500", "429"],
)
async def test_error_status_reaches_the_client(
    server: FakeOpenAIServer,
    reply: ChatReply,
    error: type[openai.APIStatusError],
    retry_after: str | None,
) -> None:
    server.enqueue(reply)
    with pytest.raises(error) as caught:
        await chat(server).ainvoke("hi")
    assert caught.value.status_code == reply.status
    assert caught.value.response.headers.get("retry-after") == retry_after
    assert await server.await_idle(MARGIN)
    (req,) = server.requests  # max_retries=0: exactly one request
    assert req.status == reply.status and req.chunks_sent == 0 and req.ended is not None


@pytest.mark.anyio
async def test_sdk_retries_are_visible_as_requests(server: FakeOpenAIServer) -> None:
    """The OpenAI SDK's own retries (max_retries=2 by default): the server counts every one."""
    server.enqueue(ChatReply.error(500), ChatReply.rate_limited(retry_after=0.3))
    t0 = time.monotonic()
    message = await chat(server, max_retries=2).ainvoke("hi")
    assert message.content == "This is the default reply."
    assert await server.await_idle(MARGIN)
    assert [(r.status, r.retry_count) for r in server.requests] == [(500, 0), (429, 1), (200, 2)]
    assert len(server.requests_after(t0)) == 3
    assert server.requests[2].started - server.requests[1].started >= 0.3  # Retry-After obeyed


# -- the client going away ------------------------------------------------------------------------


async def _cancel_with_wait_for(call: Awaitable[Any], after: float) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(call, after)


async def _cancel_the_task(call: Awaitable[Any], after: float) -> None:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(after)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _cancel_with_anyio_scope(call: Awaitable[Any], after: float) -> None:
    with anyio.move_on_after(after) as scope:
        await call
    assert scope.cancelled_caught


# Python 3.11's `asyncio.wait_for` returns the inner result and drops the caller's cancellation
# when both land in the same loop iteration (fixed in 3.12). langchain-openai wraps every stream
# chunk in `wait_for(..., stream_chunk_timeout)` (default 120 s), so on 3.11 a one-shot asyncio
# cancel that lands as a chunk arrives is lost and the whole answer streams on (seen here: ~1 run
# in 15 on a loaded 2-core machine). anyio cancel scopes re-deliver the cancellation, so they do
# not lose it. These tests are about the server, so the one-shot variants turn that wrapper off.
_ONE_SHOT_CANCEL_SAFE: dict[str, Any] = (
    {"stream_chunk_timeout": None} if sys.version_info < (3, 12) else {}
)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("cancel", "options"),
    [
        (_cancel_with_wait_for, _ONE_SHOT_CANCEL_SAFE),
        (_cancel_the_task, _ONE_SHOT_CANCEL_SAFE),
        (_cancel_with_anyio_scope, {}),
    ],
    ids=["wait_for", "task.cancel", "anyio.move_on_after"],
)
async def test_cancel_mid_stream_is_a_disconnect_and_the_stream_stops(
    server: FakeOpenAIServer,
    cancel: Callable[[Awaitable[Any], float], Awaitable[None]],
    options: dict[str, Any],
) -> None:
    interval = 0.05
    server.enqueue(ChatReply.counting(200, chunk_interval=interval))  # 10 s if left alone
    model = chat(server, **options)

    await cancel(model.ainvoke("count"), 0.5)
    cancelled = time.monotonic()

    assert await server.await_disconnected(MARGIN * 2), server.requests
    (req,) = server.requests
    assert req.disconnected is not None
    assert req.disconnected - cancelled < MARGIN
    assert 1 <= req.chunks_sent < 200
    assert req.chunks_sent_after(req.disconnected) == 0  # none after the server saw it
    assert server.chunks_sent_after(cancelled) <= 1  # at most one in flight
    sent = req.chunks_sent
    await anyio.sleep(interval * 6)
    assert req.chunks_sent == sent  # and none later either
    assert req.ended is None and not req.open and server.open_requests() == []
    await await_nothing_sent_after(server, cancelled)  # the kit's own assertion agrees


def test_sync_client_timeout_during_the_first_byte_delay_is_a_disconnect(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.text("too late", delay=5.0))
    t0 = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        chat(server, timeout=0.3).invoke("hi")
    assert time.monotonic() - t0 < 0.3 + MARGIN * 2
    assert server.wait_disconnected(MARGIN * 2)
    (req,) = server.requests
    assert req.status is None and req.first_byte is None  # not one byte was sent
    assert req.chunks_sent == 0 and not req.open


@pytest.mark.anyio
async def test_hanging_request_is_open_until_the_client_leaves() -> None:
    async with FakeOpenAIServer([ChatReply.hang()]) as server:
        task = asyncio.ensure_future(chat(server).ainvoke("hi"))
        assert await server.await_requests(1, 5.0)
        await anyio.sleep(0.1)
        assert [r.index for r in server.open_requests()] == [0]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await server.await_idle(MARGIN * 2)
        assert server.requests[0].disconnected is not None


@pytest.mark.anyio
async def test_stopping_the_server_cuts_open_responses() -> None:
    server = FakeOpenAIServer([ChatReply.hang()])
    async with server:
        task = asyncio.ensure_future(chat(server).ainvoke("hi"))
        assert await server.await_requests(1, 5.0)
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 2.0
    with pytest.raises(openai.InternalServerError) as caught:
        await task
    assert caught.value.status_code == 503
    (req,) = server.requests
    assert req.cut_by_shutdown and not req.open and req.disconnected is None


# -- the kit itself -------------------------------------------------------------------------------


def test_a_bad_server_chunk_interval_is_rejected() -> None:
    with pytest.raises(ValueError, match="chunk_interval"):
        FakeOpenAIServer(chunk_interval=float("inf"))


def test_importing_the_kit_needs_neither_starlette_nor_uvicorn() -> None:
    code = (
        "import sys\n"
        "sys.modules['starlette'] = None\n"
        "sys.modules['uvicorn'] = None\n"
        "from langgraph_deadline.testing import ChatReply, FakeOpenAIServer\n"
        "FakeOpenAIServer([ChatReply.counting(3)])\n"
        "try:\n"
        "    FakeOpenAIServer().start()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install" in out.stdout


# -- one process, many servers --------------------------------------------------------------------


def test_a_port_an_earlier_server_had_is_never_handed_out_again(monkeypatch: Any) -> None:
    """langchain-openai keeps one httpx client per base URL for the life of the process. When
    the kernel offers a new server the port of one gone before, its URL would reach the new
    server through the old client, with connections of a closed event loop ("Event loop is
    closed", seen in CI). Here the kernel is made to offer the old port once."""
    import socket as real_socket
    import types

    from langgraph_deadline.testing import _ports

    def ask(server: FakeOpenAIServer) -> None:
        async def call() -> None:
            server.enqueue(ChatReply.text("hi"))
            model = ChatOpenAI(base_url=server.base_url, api_key="test", model="gpt-fake")
            assert (await model.ainvoke([HumanMessage("hi")])).content == "hi"

        asyncio.run(call())  # a loop of its own, closed after

    with FakeOpenAIServer() as first:
        ask(first)
    offered: list[int] = []

    class Recycling(real_socket.socket):
        def bind(self, address: Any) -> None:
            if not offered:  # the kernel's first offer: the old port
                offered.append(first.port)
                address = (address[0], first.port)
            super().bind(address)

    fake = types.SimpleNamespace(**{n: getattr(real_socket, n) for n in dir(real_socket)})
    fake.socket = Recycling
    monkeypatch.setattr(_ports, "socket", fake)
    with FakeOpenAIServer() as second:
        monkeypatch.undo()
        assert offered == [first.port]
        assert second.port != first.port
        ask(second)


@pytest.mark.parametrize(
    ("history", "why"),
    [
        (
            [HumanMessage("refund 42"), AIMessage("", tool_calls=[_REFUND]), HumanMessage("?")],
            "did not have response messages: call_1",
        ),
        ([HumanMessage("refund 42"), AIMessage("", tool_calls=[_REFUND])], "call_1"),
        (
            [HumanMessage("hi"), ToolMessage("refunded", tool_call_id="call_1")],
            "must be a response to a preceeding message with 'tool_calls'",
        ),
    ],
    ids=["open-call-then-user", "open-call-last", "tool-without-call"],
)
@pytest.mark.anyio
async def test_a_history_a_real_provider_refuses_is_answered_400(
    server: FakeOpenAIServer, history: list[Any], why: str
) -> None:
    """As OpenAI: every tool call of an assistant message answered right after it, and no
    answer without its call; the scripted reply is kept for the next valid request."""
    server.enqueue(ChatReply.text("ok"))
    with pytest.raises(openai.BadRequestError, match=why) as caught:
        await chat(server).ainvoke(history)
    assert caught.value.status_code == 400
    answered = [*history[:2], ToolMessage("refunded", tool_call_id="call_1"), HumanMessage("?")]
    if isinstance(history[1], AIMessage):
        assert (await chat(server).ainvoke(answered)).content == "ok"
