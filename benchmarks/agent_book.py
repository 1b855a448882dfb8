"""An agent under one deadline, with and without a latency book: each way of putting it there.

A `create_agent` agent of the common shape: its first model call asks for three tools at once,
each a real HTTP request to a loopback `SlowServer` whose delays are heavy-tailed (lognormal,
a few per cent of stragglers at 10x, cut at the tools' 1.5 s cap: a cut tool answers with its
timeout message and the agent goes on); then the model streams its final answer (the real
`ChatOpenAI` against `FakeOpenAIServer`: three sentences, 26 tokens, one every 20 ms, from a
model that keeps to the length hint). One 2.0 s deadline per run; `SLOTS` runs at a time, each
slot with its own model server so that each run gets its own two replies. The same draws are
replayed for every row; each row with a book starts from an empty one.

Rows, each on several seeds:
- `DeadlineMiddleware(timeout=2.0)`, and the same with `book=book`;
- `with_deadlines(agent, timeout=2.0)` around the middleware, and the same with `book=book`.

Per row: the share of runs that complete (`completed`), of the first 20 (the book nearly
empty), of whole answers (all three sentences), the runs that ended before any tool ran, and
the p99 of return minus the deadline (the run's start + 2.0 s).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, tool

from langgraph_deadline import Terminal, with_deadlines
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, ScriptedToolCall, SlowServer

from ._common import Section, Table, percentile, streaming_chat

__all__ = ["run"]

DEADLINE = 2.0
TOOL_CAP = 1.5
TICK = 0.02
ANSWER = (  # 26 tokens: 0.52 s to stream
    "Order 42 shipped from the Leeds warehouse on Monday morning. It is due at your door "
    "on Friday. The courier is DHL, tracking number 42."
)
TOOLS = {"search": (0.3, 0.5), "weather": (0.2, 0.5), "lookup": (0.4, 0.4)}  # median s, sigma
STRAGGLERS = 0.03
SLOTS = 5
RUNS = 100
QUICK_RUNS = 20
SEEDS = (1, 2, 3)
QUICK_SEEDS = (1,)
FIRST = 20


@dataclasses.dataclass(frozen=True, slots=True)
class _Run:
    index: int
    terminal: str
    whole: bool
    before_tools: bool  # ended before any tool ran
    late_ms: float  # returned minus the deadline


def _draws(n: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        row = {}
        for name, (median, sigma) in TOOLS.items():
            value = median * rng.lognormvariate(0.0, sigma)
            row[name] = value * 10 if rng.random() < STRAGGLERS else value
        out.append(row)
    return out


def _tools(http: SlowServer, delay: Callable[[str], float]) -> list[BaseTool]:
    def make(name: str) -> BaseTool:
        async def call(query: str) -> str:
            async with httpx.AsyncClient() as client:
                await client.get(http.url(f"/slow?delay={delay(name):.4f}"))
            return f"{name}: {query} found"

        return tool(name, description=f"Look up {name}.")(call)

    return [make(name) for name in TOOLS]


_ROWS: dict[str, tuple[bool, bool]] = {  # label: (under with_deadlines, with a book)
    f"DeadlineMiddleware(timeout={DEADLINE:g})": (False, False),
    f"DeadlineMiddleware(timeout={DEADLINE:g}, book=book)": (False, True),
    f"with_deadlines(agent, timeout={DEADLINE:g})": (True, False),
    f"with_deadlines(agent, timeout={DEADLINE:g}, book=book)": (True, True),
}


async def _drain(server: FakeOpenAIServer) -> None:
    """A reply left by a run that ended before its answer's call: served to nobody."""
    async with httpx.AsyncClient() as client:
        while server.pending_replies:
            await client.post(
                f"{server.base_url}/chat/completions",
                json={"model": "x", "messages": [{"role": "user", "content": "-"}]},
            )


async def _row(wrapped: bool, with_book: bool, draws: list[dict[str, float]]) -> list[_Run]:
    book = LatencyBook() if with_book else None
    runs: list[_Run] = []
    try:
        with SlowServer() as http:
            servers = [FakeOpenAIServer() for _ in range(SLOTS)]
            for s in servers:
                s.start()
            try:
                await asyncio.gather(
                    *(_slot(k, servers[k], http, wrapped, book, draws, runs) for k in range(SLOTS))
                )
            finally:
                for s in servers:
                    s.stop()
    finally:
        if book is not None:
            book.detach()
    return sorted(runs, key=lambda r: r.index)


async def _slot(
    k: int,
    server: FakeOpenAIServer,
    http: SlowServer,
    wrapped: bool,
    book: LatencyBook | None,
    draws: list[dict[str, float]],
    runs: list[_Run],
) -> None:
    current: dict[str, float] = {}
    middleware = DeadlineMiddleware(
        timeout=None if wrapped else DEADLINE,
        default_tool_cap=TOOL_CAP,
        book=None if wrapped else book,
    )
    agent: Any = create_agent(
        streaming_chat(server, "gpt-fake"),
        _tools(http, lambda name: current[name]),
        middleware=[middleware],
    )
    if wrapped:
        agent = with_deadlines(agent, timeout=DEADLINE, book=book)
    calls = [ScriptedToolCall(name, {"query": "q42"}, f"call-{name}") for name in TOOLS]
    answer = ChatReply.text(ANSWER, chunk_interval=TICK, follows_length_hint=True)
    for index in range(k, len(draws), SLOTS):
        await _drain(server)
        current.clear()
        current.update(draws[index])
        server.enqueue(ChatReply.tool_calls(*calls), answer)
        called = time.monotonic()
        out = await agent.ainvoke({"messages": [HumanMessage("where is order 42?")]})
        returned = time.monotonic()
        outcome = out.get("deadline_outcome")
        last = out["messages"][-1]
        tools_ran = any(r.kind == "tool" for r in out.get("deadline_trace") or ())
        runs.append(
            _Run(
                index=index,
                terminal=str(outcome.terminal) if outcome is not None else "none",
                whole=isinstance(last, AIMessage) and last.text == ANSWER,
                before_tools=not tools_ran,
                late_ms=(returned - called - DEADLINE) * 1000.0,
            )
        )


def run(*, quick: bool) -> Section:
    """Each row on each seed; one table."""
    n = QUICK_RUNS if quick else RUNS
    seeds = QUICK_SEEDS if quick else SEEDS
    table = Table(
        f"An agent with and without a book: {n} runs per row and seed, {SLOTS} at a time; "
        f"create_agent, three tools in parallel over heavy-tailed HTTP (cap {TOOL_CAP:g} s), "
        f"a streamed 26-token answer; {DEADLINE:g} s deadline",
        (
            "row",
            "seed",
            "complete %",
            f"first {FIRST} %",
            "whole answers %",
            "ended before tools",
            "p99 return - deadline ms",
        ),
    )
    completed = str(Terminal.COMPLETED)
    for label, (wrapped, with_book) in _ROWS.items():
        for seed in seeds:
            runs = asyncio.run(_row(wrapped, with_book, _draws(n, seed)))
            share = 100.0 * sum(r.terminal == completed for r in runs) / len(runs)
            first = runs[:FIRST]
            first_share = 100.0 * sum(r.terminal == completed for r in first) / len(first)
            whole = 100.0 * sum(r.whole for r in runs) / len(runs)
            table.add(
                label,
                str(seed),
                f"{share:.0f}",
                f"{first_share:.0f}",
                f"{whole:.0f}",
                str(sum(r.before_tools and r.terminal != completed for r in runs)),
                f"{percentile([r.late_ms for r in runs], 99):+.0f}",
            )
    table.notes.append(
        "complete: the run ended `completed`; whole: its answer is all three sentences (a model "
        "told a shorter length answers fewer)"
    )
    table.notes.append(
        "ended before tools: runs that did not complete and ran no tool (their first model "
        "call was refused or cut); return - deadline: from the run's start + the deadline"
    )
    return Section(tables=[table])
