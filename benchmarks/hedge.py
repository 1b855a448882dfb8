"""Hedged read-only tools: tool latency and extra requests, unhedged vs hedged, in one run.

A read-only tool calls a loopback `SlowServer` over one shared `httpx.AsyncClient`. Every
request draws its own delay: lognormal (median 20 ms, sigma 0.6) and, for 3 % of requests, 10x
(a straggler). The same draws are replayed for both variants (copy 0 of call i always takes
the same time; a hedge draws afresh, as a request to another replica would); calls go 8 at a
time. The unhedged pass warms a `LatencyBook`; the hedged pass hedges at the book's learned
p95 with a budget of 5 % of calls (no floor: the run is short, a floor would show as extra
load). Losers are timed at the server: from the winner's answer written to the loser's
connection closed.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import time
from typing import Any

import httpx

from langgraph_deadline import Hedge, StepRecord, deadline_tool
from langgraph_deadline._core.observe import StepEvent
from langgraph_deadline.instrument import get_observers, set_observers
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ServedRequest, SlowServer

from ._common import Check, Section, Table, percentile

__all__ = ["run"]

MEDIAN_S = 0.02
SIGMA = 0.6
STRAGGLERS = 0.03
CONCURRENCY = 8
MAX_COPIES = 2
TARGET_P99_RATIO = 1.5  # hedged p99 / unhedged p95
TARGET_EXTRA_PCT = 5.0
TARGET_CLOSE_MS = 5.0  # loser closed at the server after the winner answered, p99


def _draw(rng: random.Random) -> float:
    value = MEDIAN_S * rng.lognormvariate(0.0, SIGMA)
    return value * 10 if rng.random() < STRAGGLERS else value


def _tool(
    client: httpx.AsyncClient,
    server: SlowServer,
    delays: list[list[float]],
    answered: dict[int, float],
    hedge: Hedge | None = None,
) -> Any:
    """The tool under test; `answered[call]` is when its first copy's answer reached the tool
    (`time.monotonic()`, the server's clock: one process)."""
    copies: dict[int, int] = {}

    async def search(call: int) -> str:
        """Search the catalogue."""
        copy = copies.get(call, 0)
        copies[call] = copy + 1
        params: dict[str, str | int] = {
            "delay": f"{delays[call][copy]:.6f}",
            "call": call,
            "copy": copy,
        }
        text = (await client.get(server.url("/slow"), params=params)).text
        answered.setdefault(call, time.monotonic())
        return text

    return deadline_tool(search, cap=5.0, read_only=True, hedge=hedge)


async def _pass(tool: Any, n: int) -> list[float]:
    """Per-call latency (s) of `n` calls, `CONCURRENCY` at a time."""
    latencies = [0.0] * n
    queue = iter(range(n))

    async def worker() -> None:
        for i in queue:
            call = {"type": "tool_call", "id": f"c{i}", "name": "search", "args": {"call": i}}
            t0 = time.perf_counter()
            message = await tool.ainvoke(call)
            latencies[i] = time.perf_counter() - t0
            assert message.status == "success", message

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return latencies


def _closing_ms(
    requests: list[ServedRequest], answered: dict[int, float]
) -> tuple[list[float], list[float]]:
    """For each loser: its close at the server after the winner's answer reached the tool,
    and after the server wrote that answer (ms)."""
    by_call: dict[int, list[ServedRequest]] = {}
    for r in requests:
        by_call.setdefault(int(r.query["call"]), []).append(r)
    in_tool, on_server = [], []
    for call, copies in by_call.items():
        won = [r.answered for r in copies if r.answered is not None]
        lost = [r.disconnected for r in copies if r.disconnected is not None]
        if len(copies) > 1 and won and lost:
            in_tool += [(gone - answered[call]) * 1000.0 for gone in lost]
            on_server += [(gone - min(won)) * 1000.0 for gone in lost]
    return in_tool, on_server


async def _run(n: int) -> dict[str, Any]:
    rng = random.Random(7)
    delays = [[_draw(rng) for _ in range(MAX_COPIES)] for _ in range(n)]
    book = LatencyBook()
    hedge = Hedge(book=book, quantile=0.95, budget=0.05, floor_per_s=0.0, max_copies=MAX_COPIES)
    records: list[StepRecord] = []

    class Collect:
        def on_step(self, event: StepEvent) -> None:
            if event.record.hedges:
                records.append(event.record)

        def on_run(self, event: Any) -> None:
            pass

    saved = get_observers()
    set_observers([Collect()])
    gc.collect()
    gc.freeze()  # the imports' objects leave the heap a full collection walks (60-100 ms)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    try:
        with SlowServer() as server:
            async with httpx.AsyncClient(limits=limits) as client:
                plain = await _pass(_tool(client, server, delays, {}), n)
                book_p95 = book.sketch("search", "tool").quantile(0.95)
                server.requests.clear()
                answered: dict[int, float] = {}
                hedged = await _pass(_tool(client, server, delays, answered, hedge=hedge), n)
                await asyncio.sleep(0.2)  # the last losers' closes reach the server
                requests = list(server.requests)
    finally:
        set_observers(saved)
        gc.unfreeze()
    wins = sum(1 for r in records if r.winner)
    return {
        "plain": plain,
        "hedged": hedged,
        "extra": len(requests) - n,
        "wins": wins,
        "hedged_calls": len(records),
        "closing": _closing_ms(requests, answered),
        "delay": hedge.delay("search"),
        "book_p95": None if book_p95 is None else book_p95.seconds,
    }


def run(*, quick: bool = False) -> Section:
    n = 800 if quick else 3000
    got = asyncio.run(_run(n))
    plain, hedged = got["plain"], got["hedged"]
    table = Table(
        f"Hedged read-only tool: {n} calls, {STRAGGLERS:.0%} stragglers at 10x (ms)",
        ("variant", "p50", "p95", "p99", "max", "extra requests"),
    )

    def ms(values: list[float], p: float) -> str:
        return f"{percentile(values, p) * 1000:.1f}"

    table.add("unhedged", ms(plain, 50), ms(plain, 95), ms(plain, 99), ms(plain, 100), "0")
    extra_pct = 100.0 * got["extra"] / n
    table.add(
        "hedged (book p95, budget 5 %)",
        ms(hedged, 50),
        ms(hedged, 95),
        ms(hedged, 99),
        ms(hedged, 100),
        f"{got['extra']} ({extra_pct:.1f} %)",
    )
    closing, on_server = got["closing"]
    close_p50 = percentile(closing, 50)
    close_p99 = percentile(closing, 99)
    table.notes.append(
        f"{got['hedged_calls']} calls hedged, {got['wins']} answered by the hedge; learned delay "
        f"{(got['delay'] or 0) * 1000:.1f} ms"
    )
    table.notes.append(
        f"losers closed at the server after the winner's answer reached the tool: p50 "
        f"{close_p50:.2f} ms, p99 {close_p99:.2f} ms, max {max(closing, default=math.nan):.2f} "
        f"ms ({len(closing)} losers); after the server wrote it: p50 "
        f"{percentile(on_server, 50):.2f} ms, p99 {percentile(on_server, 99):.2f} ms"
    )
    ratio = percentile(hedged, 99) / percentile(plain, 95)
    section = Section(tables=[table])
    section.figures.append(
        ("hedge p99 (unhedged -> hedged)", f"{ms(plain, 99)} -> {ms(hedged, 99)} ms")
    )
    section.checks += [
        Check("hedged p99 / unhedged p95", ratio, TARGET_P99_RATIO, "x"),
        Check("hedge extra requests", extra_pct, TARGET_EXTRA_PCT, " %"),
        Check("hedge loser closed after the winner p99", close_p99, TARGET_CLOSE_MS, " ms"),
    ]
    return section
