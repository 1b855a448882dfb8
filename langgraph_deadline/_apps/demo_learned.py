"""The demo's learned run: the warm-up its latency book hears, the learned caps it runs with,
and the line that says what they came to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool

from .. import LatencyBook, Learned, deadline_tools, learned

__all__ = [
    "HEADROOM",
    "MIN_SAMPLES",
    "QUANTILE",
    "WARM_UP",
    "learned_note",
    "learned_rule",
    "warm_up",
]

WARM_UP = (2, 12)  # 2 batches of 12 rounds of the lookups, each round's calls at once
QUANTILE, HEADROOM, MIN_SAMPLES = 0.9, 2.0, 20


async def warm_up(
    make_tools: Callable[[Any], list[BaseTool]], cap: float, progress: Callable[[str], None]
) -> None:
    """Rounds of the lookups (`make_tools(service)`, none hanging) as deadline tools: what a
    book hears of ordinary traffic (it listens to every step of the process)."""
    from ..testing import SlowServer

    with SlowServer() as service:
        tools = deadline_tools(make_tools(service), default=cap)
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


def learned_rule(book: LatencyBook, cap: float, *, then: Sequence[str]) -> Learned:
    """Each lookup's cap: its learned p90 x 2, at most `cap`. `then`: the steps' learned
    p90 is kept back from a lookup's budget once the book holds `MIN_SAMPLES` of their runs
    (the demo's writer has two, both cut: the learned caps alone leave it its room)."""
    return learned(
        book, quantile=QUANTILE, headroom=HEADROOM, min_samples=MIN_SAMPLES, cap=cap, then=then
    )


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
