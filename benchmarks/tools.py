"""Tools: the per-call cost of `deadline_tool` against the same `@tool`, and of a stale-cache hit.

Each iteration calls every variant once, rotating the order; figures are medians in µs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.tools import tool

from langgraph_deadline import InMemoryStaleCache, deadline_scope, deadline_tool

from ._common import Section, Table, median

__all__ = ["run"]


async def _lookup(query: str) -> str:
    """Look something up."""
    return query


_DOWN = [False]


async def lookup_cached(query: str) -> str:
    """Look something up (cached); never answers once the service is down."""
    if _DOWN[0]:
        await asyncio.sleep(3600)
    return query


def _call(name: str) -> dict[str, Any]:
    return {"type": "tool_call", "id": "c1", "name": name, "args": {"query": "q"}}


async def _measure(
    variants: dict[str, Callable[[], Awaitable[Any]]], iterations: int
) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for i in range(iterations):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            await variants[name]()
            samples[name].append((time.perf_counter() - t0) * 1e6)
    return {k: median(v) for k, v in samples.items()}


def run(*, quick: bool = False) -> Section:
    iterations = 300 if quick else 2000
    plain = tool(_lookup)
    wrapped = deadline_tool(_lookup, cap=5.0)
    cache = InMemoryStaleCache()
    cached = deadline_tool(
        lookup_cached,
        cap=0.001,
        read_only=True,
        cache=cache,
        cache_namespace="bench",
    )

    async def main() -> dict[str, float]:
        await cached.ainvoke(_call("lookup_cached"))  # fill the cache
        _DOWN[0] = True
        async with deadline_scope(3600):
            return await _measure(
                {
                    "bare": lambda: plain.ainvoke(_call("_lookup")),
                    "deadline_tool": lambda: wrapped.ainvoke(_call("_lookup")),
                    "cache hit": lambda: cached.ainvoke(_call("lookup_cached")),
                },
                iterations,
            )

    _DOWN[0] = False
    us = asyncio.run(main())
    table = Table(
        f"Tools: one async tool call as a tool call ({iterations} calls each)",
        ("variant", "median µs", "ratio vs @tool", "extra µs"),
    )
    base = us["bare"]
    table.add("@tool", f"{base:.1f}", "1.00x", "-")
    table.add(
        "deadline_tool(cap=5)",
        f"{us['deadline_tool']:.1f}",
        f"{us['deadline_tool'] / base:.2f}x",
        f"+{us['deadline_tool'] - base:.1f}",
    )
    table.add(
        "stale-cache hit (live call cut at 1 ms)",
        f"{us['cache hit']:.1f}",
        f"{us['cache hit'] / base:.2f}x",
        f"+{us['cache hit'] - base:.1f}",
    )
    table.notes.append(
        "the cache-hit row includes the 1 ms the live call is given before it is cut"
    )
    section = Section(tables=[table])
    section.figures.append(
        ("deadline_tool per-call overhead", f"{us['deadline_tool'] - base:.1f} µs")
    )
    return section
