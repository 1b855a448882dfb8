"""The demo's learned run: the warm-up its latency book hears, the learned caps it runs with,
and the line that says what they came to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool

from .. import deadline_tools
from ..learn import LatencyBook, Learned, learned

__all__ = [
    "HEADROOM",
    "MIN_SAMPLES",
    "QUANTILE",
    "WARM_UP",
    "learned_note",
    "learned_rule",
    "warm_up",
    "warm_up_writer",
]

WARM_UP = (2, 12)  # 2 batches of 12 rounds of the lookups, each round's calls at once
QUANTILE, HEADROOM, MIN_SAMPLES = 0.9, 2.0, 20
WRITER_WARM_UP = 10  # short answers: enough for a run's book to time its model's answers


async def warm_up(
    make_tools: Callable[[Any], list[BaseTool]], cap: float, progress: Callable[[str], None]
) -> None:
    """Rounds of the lookups (`make_tools(service)`, none hanging) as deadline tools: what a
    book hears of ordinary traffic (it listens to every step of the process)."""
    from ..testing import SlowServer

    with SlowServer() as service:
        tools = deadline_tools(make_tools(service), default_cap=cap)
        t0 = time.monotonic()
        batches, rounds = WARM_UP
        ask = {"query": "order 42"}
        for _ in range(batches):
            calls = [
                t.ainvoke({"type": "tool_call", "id": f"{t.name}-{i}", "name": t.name, "args": ask})
                for i in range(rounds)
                for t in tools
            ]
            await asyncio.gather(*calls)
        took = time.monotonic() - t0
        progress(f"  warm-up: {batches * rounds} rounds of the lookups in {took:.2f} s")


def learned_rule(book: LatencyBook, cap: float) -> Learned:
    """Each lookup's cap: its learned p90 x 2, at most `cap`. The time the writer needs after
    them is kept back by the run itself, from the graph (`with_deadlines(book=book)`)."""
    return learned(book, quantile=QUANTILE, headroom=HEADROOM, min_samples=MIN_SAMPLES, cap=cap)


async def warm_up_writer(
    book: LatencyBook, tokens: int, interval: float, progress: Callable[[str], None]
) -> None:
    """Short answers of the local model (`WRITER_WARM_UP` of them, `max_tokens` 8): what a book
    hears of a model's ordinary traffic, its time to first token and its output rate."""
    from langchain_openai import ChatOpenAI

    from .. import budgeted_model, deadline_scope
    from ..testing import ChatReply, FakeOpenAIServer

    reply = ChatReply.counting(tokens, chunk_interval=interval)
    with FakeOpenAIServer(default_reply=reply) as server:
        chat = ChatOpenAI(base_url=server.base_url, api_key="not-needed", model="fake-model")  # type: ignore[arg-type]
        model = budgeted_model(chat, tokens_per_second=learned(book, quantile=0.9))
        t0 = time.monotonic()
        async with deadline_scope(30.0):
            for _ in range(WRITER_WARM_UP):
                await model.ainvoke("Say hello.", max_tokens=8)
        took = time.monotonic() - t0
    progress(f"  warm-up: {WRITER_WARM_UP} short answers of the model in {took:.2f} s")


def learned_note(rule: Learned, book: LatencyBook, names: Sequence[str], cap: float) -> str:
    caps = ", ".join(
        f"{name} {got:.2f} s ({book.count(name, 'tool')} samples)"
        for name in names
        if (got := rule.cap("tool", name)) is not None
    )
    return (
        f"learned caps: {caps}: p{QUANTILE * 100:g} x {HEADROOM:g} of what the book heard (the "
        f"two deadline runs above and {WARM_UP[0] * WARM_UP[1]} warm-up rounds), at most {cap:g} s"
    )
