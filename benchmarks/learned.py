"""Learned budgets: round-number caps, the best fixed caps (a grid search), learned caps.

An agent-like run under one deadline: a planner node, three tools called in parallel, an answer
node. Every step is a real HTTP request to a loopback `SlowServer` whose delays follow
heavy-tailed distributions (lognormal, with a few per cent of stragglers at 10x; the
`quick_lookup` tool is slower than its name suggests). The same draws are replayed for each
variant; runs go 8 at a time. A run answers completely when its answer node finished by the
deadline; a tool cut by its budget answers with a timeout message and the answer goes on.

The oracle's caps come from a grid search over the same distributions, simulated (no I/O):
the best fixed caps one could choose knowing the latencies in advance. The learned variant
starts from an empty book, with the round caps as its ceiling.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import ToolMessage
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import (
    DeadlineState,
    LatencyBook,
    StepRecord,
    StepStatus,
    deadline_tools,
    learned,
    with_deadlines,
)
from langgraph_deadline._core.observe import StepEvent
from langgraph_deadline.instrument import get_observers, set_observers
from langgraph_deadline.testing import SlowServer

from ._common import Check, Section, Table, percentile

__all__ = ["run"]

DEADLINE = 1.2
RESERVE = 0.02
ROUND_CAP = 1.0
STRAGGLERS = 0.03
# step: (median seconds, lognormal sigma)
PLANNER = (0.08, 0.3)
ANSWER = (0.15, 0.3)
TOOLS = {"search": (0.15, 0.5), "weather": (0.1, 0.5), "quick_lookup": (0.3, 0.4)}
GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
CONCURRENCY = 10
OVERHEAD = 0.06  # the framework's and the loopback's own time per run, measured at this load
WINDOW = 25  # the figure's complete-answer share is over this many runs in a row


def _draw(rng: random.Random, median: float, sigma: float) -> float:
    value = median * rng.lognormvariate(0.0, sigma)
    return value * 10 if rng.random() < STRAGGLERS else value


def _draws(n: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [
        {
            "planner": _draw(rng, *PLANNER),
            "answer": _draw(rng, *ANSWER),
            **{name: _draw(rng, *spec) for name, spec in TOOLS.items()},
        }
        for _ in range(n)
    ]


def _oracle(draws: list[dict[str, float]]) -> dict[str, float]:
    """The fixed caps whose simulated runs put the most tool answers into complete answers
    (a run's tools count only when its answer is in by the deadline)."""
    left = DEADLINE - RESERVE - OVERHEAD
    best = -1
    chosen: dict[str, float] = {}
    for caps in itertools.product(GRID, repeat=len(TOOLS)):
        table = dict(zip(TOOLS, caps, strict=True))
        score = 0
        for d in draws:
            tools = max(min(d[t], table[t]) for t in TOOLS)
            if d["planner"] + tools + d["answer"] <= left:
                score += 1 + sum(d[t] <= table[t] for t in TOOLS)
        if score > best:
            best, chosen = score, table
    return chosen


class _Runs(DeadlineState, total=False):
    i: int
    answered: int


def _graph(server: SlowServer, client: httpx.AsyncClient, draws: Any, caps: Any) -> Any:
    async def get(delay: float) -> str:
        return (await client.get(server.url(f"/slow?delay={delay:.4f}"))).text

    async def search(delay: float) -> str:
        """Search."""
        return await get(delay)

    async def weather(delay: float) -> str:
        """Weather."""
        return await get(delay)

    async def quick_lookup(delay: float) -> str:
        """A lookup (not that quick)."""
        return await get(delay)

    tools = deadline_tools([search, weather, quick_lookup], caps=caps)

    async def planner(state: _Runs) -> dict[str, Any]:
        await get(draws[state["i"]]["planner"])
        return {}

    async def call_tools(state: _Runs) -> dict[str, Any]:
        d = draws[state["i"]]
        calls = [
            {"type": "tool_call", "id": t.name, "name": t.name, "args": {"delay": d[t.name]}}
            for t in tools
        ]
        out = await asyncio.gather(*(t.ainvoke(c) for t, c in zip(tools, calls, strict=True)))
        return {"answered": sum(isinstance(m, ToolMessage) and m.status != "error" for m in out)}

    async def answer(state: _Runs) -> dict[str, Any]:
        await get(draws[state["i"]]["answer"])
        return {}

    b = StateGraph(_Runs)
    b.add_node("planner", planner)
    b.add_node("tools", call_tools)
    b.add_node("answer", answer)
    b.add_edge(START, "planner")
    b.add_edge("planner", "tools")
    b.add_edge("tools", "answer")
    b.add_edge("answer", END)
    return with_deadlines(b, timeout=DEADLINE, reserve=RESERVE)


class _Cuts:
    def __init__(self) -> None:
        self.cut = 0

    def on_step(self, event: StepEvent) -> None:
        if event.record.kind == "tool" and event.record.status.cut:
            self.cut += 1

    def on_run(self, event: Any) -> None:
        pass


async def _variant(
    server: SlowServer,
    draws: Any,
    caps: Any,
    ok: list[bool],
    after_batch: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Replay `draws` with these caps; `ok[i]`: run i answered completely by its deadline;
    `after_batch(runs done)` after each batch of runs."""
    cuts = _Cuts()
    saved = get_observers()
    set_observers([cuts])
    complete, answered, late = 0, 0, []
    second_half = 0
    ok[:] = [False] * len(draws)
    try:
        # No pool limit: a request cut mid-flight may keep its slot in httpx's pool for a
        # while, and a limited pool then stalls every run (measured: whole batches timed out).
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as client:
            graph = _graph(server, client, draws, caps)

            async def one(i: int) -> None:
                nonlocal complete, answered, second_half
                out = await graph.ainvoke({"i": i, "answered": 0})
                late.append(time.time() - out["deadline"])
                complete += out["deadline_outcome"].ok
                ok[i] = out["deadline_outcome"].ok
                second_half += out["deadline_outcome"].ok and i >= len(draws) // 2
                answered += out.get("answered", 0)

            for start in range(0, len(draws), CONCURRENCY):
                await asyncio.gather(*(one(i) for i in range(start, start + CONCURRENCY)))
                if after_batch is not None:
                    after_batch(start + CONCURRENCY)
    finally:
        set_observers(saved)
    n = len(draws)
    return {
        "complete": complete / n,
        "complete_late": second_half / (n - n // 2),
        "answered": answered / n,
        "cut": cuts.cut / n,
        "late_p99_ms": percentile(late, 99) * 1000,
    }


def _recording_cost() -> tuple[float, int]:
    book = LatencyBook(listen=False)
    record = StepRecord(
        name="search",
        kind="tool",
        attempt=1,
        remaining_ms=None,
        requested_ms=None,
        allocated_ms=None,
        clamped=False,
        elapsed_ms=42.0,
        status=StepStatus.COMPLETED,
    )
    event = StepEvent(record, None, None)
    n = 50_000
    per = min(timeit.repeat(lambda: book.on_step(event), number=n, repeat=5)) / n
    return per * 1e6, book.bytes_per_key()


def windows(ok: Sequence[bool], size: int = WINDOW) -> list[tuple[int, float]]:
    """(runs done, share of complete answers) over each `size` runs in a row (the last window
    may be shorter)."""
    return [
        (min(start + size, len(ok)), sum(ok[start : start + size]) / len(ok[start : start + size]))
        for start in range(0, len(ok), size)
    ]


def run(*, quick: bool = False, plot: Path | None = None) -> Section:
    runs = 60 if quick else 250
    draws = _draws(runs, seed=7)
    oracle = _oracle(_draws(2000, seed=11))
    variants = {
        f"round caps ({ROUND_CAP:g} s each)": dict.fromkeys(TOOLS, ROUND_CAP),
        "oracle: best fixed caps (grid)": oracle,
    }
    results: dict[str, dict[str, float]] = {}
    oks: dict[str, list[bool]] = {}
    with SlowServer() as server:
        for label, caps in variants.items():
            oks[label] = []
            results[label] = asyncio.run(_variant(server, draws, caps, oks[label]))
        book = LatencyBook()  # made now: it hears only the learned variant's own runs
        rule = learned(
            book, quantile=0.95, headroom=1.5, min_samples=20, cap=ROUND_CAP, then=["node:answer"]
        )
        label = "learned, from an empty book"
        learning: list[tuple[int, dict[str, float | None]]] = []

        def note_caps(done: int) -> None:
            learning.append((done, {t: rule.cap("tool", t) for t in TOOLS}))

        oks[label] = []
        note_caps(0)
        rules = dict.fromkeys(TOOLS, rule)
        results[label] = asyncio.run(_variant(server, draws, rules, oks[label], note_caps))
        book.detach()
    per_us, per_key = _recording_cost()

    table = Table(
        f"Learned budgets: {runs} agent runs, deadline {DEADLINE * 1000:.0f} ms, "
        f"planner + 3 parallel tools + answer",
        (
            "caps",
            "complete by deadline",
            "(second half)",
            "tools answered / run",
            "tool calls cut / run",
            "p99 return - deadline",
        ),
    )
    for label, r in results.items():
        table.add(
            label,
            f"{r['complete'] * 100:.1f} %",
            f"{r['complete_late'] * 100:.1f} %",
            f"{r['answered']:.2f}",
            f"{r['cut']:.2f}",
            f"{r['late_p99_ms']:+.1f} ms",
        )
    caps_now = {t: rule.cap("tool", t) for t in TOOLS}
    table.notes.append(
        "oracle caps: " + ", ".join(f"{t} {c * 1000:.0f} ms" for t, c in oracle.items())
    )
    table.notes.append(
        "learned caps at the end: "
        + ", ".join(f"{t} {(c or 0) * 1000:.0f} ms" for t, c in caps_now.items())
        + " (p95 x 1.5, keeping back the answer's p95)"
    )
    table.notes.append(
        f"recording a sample: {per_us:.2f} µs; book bytes per key: {per_key} "
        f"({per_key / 1024:.1f} KiB)"
    )
    if plot is not None:
        from .learned_plot import write

        shares = {label: windows(ok) for label, ok in oks.items()}
        write(plot, shares, learning, oracle, round_cap=ROUND_CAP, window=WINDOW, runs=runs)
        table.notes.append(f"figure: {plot}")
    section = Section(tables=[table])
    learned_row = results["learned, from an empty book"]
    section.figures.append(
        ("learned caps: runs complete", f"{learned_row['complete'] * 100:.1f} %")
    )
    section.figures.append(("latency book: recording a sample", f"{per_us:.2f} µs"))
    section.checks.append(Check("latency book: recording a sample", per_us, 3.0, " µs"))
    section.checks.append(Check("latency book: bytes per key", per_key / 1024, 64.0, " KiB"))
    return section
