"""A tool cut over a client shared by the process closes its request, as one over its own does.

The common pattern is one client for the process (`client = httpx.AsyncClient()` at module
level) used inside a tool. LangChain runs a tool's coroutine in a task of its own, so the cut
reaches the request through that task; httpcore then closes the request inside a shielded
clean-up, which must run to its end: else the server works on, and the connection stays in use
in the pool (a slot lost per cut, until the pool runs dry). Checked at the server (it sees the
client leave) and in the pool (no connection left in use).

Two more places lose httpcore 1.0.9 a slot for good, with no request on it (encode/httpcore#1093,
open): a request cancelled inside the shielded lock its just-made connection takes leaves that
connection NEW, and one cancelled as the pool hands it a new connection (its waiter done) leaves
that CONNECTING. Neither is ever used, expired or closed again: after ten rounds of a hundred
cut calls the pool held 25 NEW and 75 CONNECTING connections and every later request raised
PoolTimeout. Plain `asyncio.wait_for` or `asyncio.timeout` around a plain `client.get` loses
them the same way (a request cut at each loop iteration of its life: the slot is lost at one of
them, three when it waited for the pool); an anyio scope in the request's own task does not,
as it cancels neither inside a shield nor a task whose waiter is done. A cut does as anyio
does, in the task it awaits too (LangChain's): no slot lost at any point. What anyio loses too
is left: a request cancelled while queued, and handed a new connection before it wakes, in the
same loop iteration (one point of forty here, httpx2's httpcore2 drops such a connection).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import httpcore
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
from langgraph_deadline._core.cut import Cut
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
    @deadline_tool(cap=timeout)
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

        @deadline_tool(cap=0.2)
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
    # server, and the last one waits until its pool timeout. Rounds cut at 0.1 s land while
    # the hundred connect and send (where NEW and CONNECTING slots were lost); rounds cut at
    # 0.3 s land with the requests at the server, even on a loaded machine (where a cancelled
    # clean-up lost ACTIVE ones): a round's hundred calls start, connect and send in step.
    async with httpx.AsyncClient() as client:
        url = slow_server.url("/slow?delay=5")
        fetches = [_fetching(client, url, timeout=0.1), _fetching(client, url, timeout=0.3)]
        for i in range(10):
            fetch = fetches[i % 2]
            answers = await asyncio.gather(*(fetch.ainvoke({"query": "x"}) for _ in range(100)))
            assert all("timeout" in a for a in answers)
            pool = client._transport._pool  # type: ignore[attr-defined]
            assert _in_use(pool) == [], i
            assert len(pool.connections) <= 100
        with anyio.fail_after(2.0):
            response = await client.get(slow_server.url("/fast"), timeout=2.0)
        assert response.status_code == 200

    def all_left(requests: list[ServedRequest]) -> bool:
        return all(r.disconnected is not None for r in requests if r.path == "/slow")

    assert await asyncio.to_thread(slow_server.wait_for, all_left, 5.0)
    reached = sum(r.path == "/slow" for r in slow_server.requests)
    assert reached >= 100  # a cut at 0.1 s may come before a request is sent, at 0.3 s not


# -- a request cut at each point of its life, over a pool whose server never answers ------------


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, opened: list[_Stream]) -> None:
        self.closed = False
        opened.append(self)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await asyncio.Event().wait()  # no answer, ever
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await asyncio.sleep(0)

    async def aclose(self) -> None:
        self.closed = True


class _Backend(httpcore.AsyncNetworkBackend):
    """Connects in one loop iteration, writes in one: a cut at iteration k lands at one
    await of the request's life, the same one every run."""

    def __init__(self) -> None:
        self.opened: list[_Stream] = []

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        await asyncio.sleep(0)
        return _Stream(self.opened)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _step(pool: httpcore.AsyncConnectionPool, cuts: list[Cut], in_task: bool) -> None:
    """One step under a cut sending one request: in a task it awaits, as LangChain runs a
    tool's coroutine, or in its own task, as a node or a deadline_scope runs it."""
    task = asyncio.current_task()
    assert task is not None
    request = pool.request("GET", "http://example.com/")
    with Cut(asyncio.get_running_loop(), task) as cut:
        cuts.append(cut)
        await (asyncio.create_task(request) if in_task else request)


@pytest.mark.parametrize("in_task", [True, False], ids=["awaited_task", "body"])
async def test_a_request_cut_at_any_point_of_its_life_leaves_no_slot_lost(in_task: bool) -> None:
    # Plain task.cancel() loses a NEW connection at one of these points (httpcore 1.0.9).
    for k in range(30):
        backend = _Backend()
        async with httpcore.AsyncConnectionPool(network_backend=backend) as pool:
            cuts: list[Cut] = []
            stepping = asyncio.create_task(_step(pool, cuts, in_task))
            for _ in range(k + 1):
                await asyncio.sleep(0)
            cuts[0].cancel()
            await stepping
            assert cuts[0].caught
            assert _in_use(pool) == [], k
            assert all(s.closed for s in backend.opened), k
