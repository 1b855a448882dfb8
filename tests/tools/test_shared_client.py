"""A tool cut over a client shared by the process closes its request, as one over its own does.

The common pattern is one client for the process (`client = httpx.AsyncClient()` at module
level) used inside a tool. LangChain runs a tool's coroutine in a task of its own, so the cut
reaches the request through that task; httpcore then closes the request inside a shielded
clean-up, which must run to its end: else the server works on, and the connection stays in use
in the pool (a slot lost per cut, until the pool runs dry). Checked at the server (it sees the
client leave) and in the pool (no connection left in use).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import httpx
import openai
import pytest
from langgraph.graph import START, StateGraph

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Terminal,
    deadline_scope,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ServedRequest, SlowServer

pytestmark = pytest.mark.anyio


class State(DeadlineState):
    log: list[str]


def _in_use(pool: Any) -> list[Any]:
    """The pool's connections still serving a request (httpcore and httpcore2 alike): not the
    idle ones, the closed ones, nor those whose connect was cut (expired: the pool drops them
    at its next request)."""
    return [c for c in pool.connections if not (c.is_idle() or c.is_closed() or c.has_expired())]


def _fetching(client: httpx.AsyncClient | None, url: str, *, timeout: float = 0.2) -> Any:
    @deadline_tool(timeout=timeout)
    async def fetch(query: str) -> str:
        """Fetch a page."""
        if client is not None:
            return (await client.get(url)).text
        async with httpx.AsyncClient() as own:
            return (await own.get(url)).text

    return fetch


async def test_a_tool_cut_over_a_shared_client_closes_its_request(slow_server: SlowServer) -> None:
    async with httpx.AsyncClient() as client:
        fetch = _fetching(client, slow_server.url("/slow?delay=5"))
        answer = await fetch.ainvoke({"query": "x"})
        assert "timeout" in answer
        assert await asyncio.to_thread(slow_server.wait_disconnected, 2.0)
        assert _in_use(client._transport._pool) == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["deadline_scope", "node_cap"])
async def test_other_cuts_over_a_shared_client_close_their_request(
    slow_server: SlowServer, how: str
) -> None:
    async with httpx.AsyncClient() as client:

        async def fetch(state: dict[str, Any]) -> dict[str, Any]:
            await client.get(slow_server.url("/slow?delay=5"))
            return {"log": ["fetched"]}

        if how == "deadline_scope":
            with pytest.raises(DeadlineExceeded):
                async with deadline_scope(0.2):
                    await fetch({})
        else:
            b = StateGraph(State)
            b.add_node("fetch", fetch)
            b.add_edge(START, "fetch")
            out = await with_deadlines(b, timeout=5.0, caps={"fetch": 0.2}).ainvoke({"log": []})
            assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert await asyncio.to_thread(slow_server.wait_disconnected, 2.0)
        assert _in_use(client._transport._pool) == []  # type: ignore[attr-defined]


async def test_a_tool_cut_over_its_own_client_closes_its_request(slow_server: SlowServer) -> None:
    fetch = _fetching(None, slow_server.url("/slow?delay=5"))
    answer = await fetch.ainvoke({"query": "x"})
    assert "timeout" in answer
    assert await asyncio.to_thread(slow_server.wait_disconnected, 2.0)


async def test_a_tool_cut_over_a_shared_openai_client_closes_its_request() -> None:
    with FakeOpenAIServer(default_reply=ChatReply.hang()) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)

        @deadline_tool(timeout=0.2)
        async def ask(question: str) -> str:
            """Ask another model."""
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": question}]
            )
            return reply.choices[0].message.content or ""

        try:
            answer = await ask.ainvoke({"question": "x"})
            assert "timeout" in answer
            assert await asyncio.to_thread(server.wait_disconnected, 2.0)
            assert _in_use(client._client._transport._pool) == []  # type: ignore[attr-defined]
        finally:
            await client.close()


async def test_a_thousand_cut_calls_leave_a_shared_pool_whole(slow_server: SlowServer) -> None:
    # The default limits (100 connections): a slot lost per cut runs the pool dry after a
    # hundred cuts; every later call then waits for a free connection, never reaching the
    # server, and the last one waits until its pool timeout.
    async with httpx.AsyncClient() as client:
        fetch = _fetching(client, slow_server.url("/slow?delay=5"), timeout=0.1)
        for _ in range(10):
            answers = await asyncio.gather(*(fetch.ainvoke({"query": "x"}) for _ in range(100)))
            assert all("timeout" in a for a in answers)
        assert _in_use(client._transport._pool) == []  # type: ignore[attr-defined]
        with anyio.fail_after(2.0):
            response = await client.get(slow_server.url("/fast"), timeout=2.0)
        assert response.status_code == 200

    def all_left(requests: list[ServedRequest]) -> bool:
        return all(r.disconnected is not None for r in requests if r.path == "/slow")

    assert await asyncio.to_thread(slow_server.wait_for, all_left, 5.0)
    reached = sum(r.path == "/slow" for r in slow_server.requests)
    assert reached > 200  # most calls: a cut at 0.1 s may come before a request is sent
