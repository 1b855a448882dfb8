"""Long runs: one thread of thousands of steps, bare LangGraph beside `with_deadlines`.

A loop graph (one trivial async node that routes back to itself) runs `N` steps on one thread
with a checkpointer, `InMemorySaver` or `AsyncSqliteSaver` (a file), bare and wrapped (a deadline
nobody reaches), side by side in one process. For each:

- stored: the bytes the checkpointer holds at the end (the in-memory saver's serialized
  checkpoints, blobs and writes; the SQLite file with its write-ahead log);
- held: the memory still allocated at the end of the run, graph and saver alive (`tracemalloc`,
  in a second run of its own, so that its cost stays out of the times; in-memory saver only);
- first / last: the median time per step over the first and the last `EDGE` steps (the node
  notes when it starts: its wall time minus the previous step's; the median, because the
  machine's other work lands on a few steps as spikes), median over `ROUNDS` rounds.

"bare + fields" is the same graph compiled by LangGraph alone, given the deadline fields in its
input (`deadline_input`): what the state fields cost by themselves, before any wrapper.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import deadline_input, with_deadlines

from ._common import BenchState, Builder, Check, Section, Table, median

__all__ = ["run"]

STEPS = (200, 800, 5000)
QUICK_STEPS = (50, 200)
EDGE = 50
"""Steps at each end of a run whose mean time is reported."""
TARGET_STORED_RATIO = 1.5
TARGET_TIME_RATIO = 1.2
TARGET_GROWTH = 1.2
"""At the longest run: wrapped (last / first) over bare (last / first)."""
VARIANTS = ("bare", "bare + fields", "wrapped")
ROUNDS = 9
"""Rounds of the shorter runs: one round's median step moves by +-30 % (0.41 to 0.79 ms for
bare LangGraph over ten rounds of 800 steps on a quiet VM), so a median of three misreads a
10 % difference."""
LONG_ONCE = 2000
"""Runs of this many steps or more are measured once (they take seconds each)."""
SAVERS = ("memory", "sqlite")


@dataclass(frozen=True, slots=True)
class Measure:
    stored: int
    first_ms: float
    last_ms: float
    held: int | None = None


def _loop(steps: int, marks: list[float]) -> Builder:
    async def step(state: BenchState) -> dict[str, int]:
        marks.append(time.perf_counter())
        return {"n": state["n"] + 1}

    def route(state: BenchState) -> str:
        return END if state["n"] >= steps else "step"

    builder: Builder = StateGraph(BenchState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route, ["step", END])
    return builder


def _compile(variant: str, builder: Builder, saver: Any) -> Any:
    if variant == "wrapped":
        return with_deadlines(builder, timeout=3600.0, checkpointer=saver)
    return builder.compile(checkpointer=saver)


def _input(variant: str) -> dict[str, Any]:
    return {"n": 0, **(deadline_input(3600.0) if variant == "bare + fields" else {})}


def _edges(marks: list[float]) -> tuple[float, float]:
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    return median(gaps[:EDGE]) * 1000, median(gaps[-EDGE:]) * 1000


def _memory_bytes(saver: InMemorySaver) -> int:
    blobs = sum(len(v[1]) for v in saver.blobs.values())
    checkpoints = sum(
        len(c[0][1]) + len(c[1][1])
        for ns in saver.storage.values()
        for by_id in ns.values()
        for c in by_id.values()
    )
    writes = sum(len(w[2][1]) for ws in saver.writes.values() for w in ws.values())
    return blobs + checkpoints + writes


async def _in_memory(variant: str, steps: int, *, traced: bool) -> tuple[int, list[float], int]:
    marks: list[float] = []
    saver = InMemorySaver()
    graph = _compile(variant, _loop(steps, marks), saver)
    cfg: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": steps + 10}
    gc.collect()
    if traced:
        tracemalloc.start()
    try:
        result = await graph.ainvoke(_input(variant), cfg)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] if traced else 0
    finally:
        if traced:
            tracemalloc.stop()
    assert result["n"] == steps, result
    return _memory_bytes(saver), marks, held


async def _sqlite(variant: str, steps: int, path: str) -> list[float]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    marks: list[float] = []
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        graph = _compile(variant, _loop(steps, marks), saver)
        cfg: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": steps + 10}
        gc.collect()
        result = await graph.ainvoke(_input(variant), cfg)
        assert result["n"] == steps, result
    return marks


def _measure(variant: str, saver: str, steps: int, *, held: bool) -> Measure:
    if saver == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            marks = asyncio.run(_sqlite(variant, steps, os.path.join(folder, "thread.db")))
            stored = sum(p.stat().st_size for p in Path(folder).iterdir())
        return Measure(stored, *_edges(marks))
    stored, marks, _ = asyncio.run(_in_memory(variant, steps, traced=False))
    if not held:
        return Measure(stored, *_edges(marks))
    _, _, traced = asyncio.run(_in_memory(variant, steps, traced=True))
    return Measure(stored, *_edges(marks), held=traced)


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.2f} MB"


def run(*, quick: bool = False, plot: Path | None = None) -> Section:
    section = Section()
    lengths = QUICK_STEPS if quick else STEPS
    table = Table(
        "Long runs: one thread, N steps of a loop graph, side by side",
        ("N", "saver", "variant", "stored", "held", "first ms/step", "last ms/step"),
    )
    results: dict[tuple[int, str, str], Measure] = {}
    for steps in lengths:
        for saver in SAVERS:
            rounds = 1 if steps >= LONG_ONCE else ROUNDS
            runs: dict[str, list[Measure]] = {v: [] for v in VARIANTS}
            for r in range(rounds):  # in turns, the order reversed every other round
                for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                    runs[v].append(_measure(v, saver, steps, held=r == rounds - 1))
            for variant in VARIANTS:
                ms = runs[variant]
                m = results[steps, saver, variant] = Measure(
                    ms[-1].stored,
                    median([x.first_ms for x in ms]),
                    median([x.last_ms for x in ms]),
                    ms[-1].held,
                )
                table.add(
                    str(steps),
                    saver,
                    variant,
                    _mb(m.stored),
                    _mb(m.held),
                    f"{m.first_ms:.2f}",
                    f"{m.last_ms:.2f}",
                )
    table.notes.append(
        f"first / last: median time per step over the first and last {EDGE} steps, median of "
        f"{ROUNDS} rounds (the variants in turns, the order reversed every other round; 1 round "
        f"from {LONG_ONCE} steps); "
        "held: tracemalloc, after the run, in-memory saver only (a run of its own)"
    )
    section.tables.append(table)
    if plot is not None:
        from .long_plot import write

        points = {
            (saver, variant): [
                (n, results[n, saver, variant].stored / 1e6, results[n, saver, variant].last_ms)
                for n in lengths
            ]
            for saver in SAVERS
            for variant in VARIANTS
        }
        write(plot, points, edge=EDGE)
        table.notes.append(f"figure: {plot}")

    longest, middle = lengths[-1], lengths[min(1, len(lengths) - 1)]
    ratio: Callable[[float, float], float] = lambda a, b: a / b if b else float("inf")  # noqa: E731
    for saver in SAVERS:
        bare, wrapped = results[middle, saver, "bare"], results[middle, saver, "wrapped"]
        section.checks.append(
            Check(
                f"{middle} steps, {saver}: stored, wrapped / bare",
                ratio(wrapped.stored, bare.stored),
                TARGET_STORED_RATIO,
                "x",
            )
        )
        section.checks.append(
            Check(
                f"{middle} steps, {saver}: last {EDGE} steps' time, wrapped / bare",
                ratio(wrapped.last_ms, bare.last_ms),
                TARGET_TIME_RATIO,
                "x",
            )
        )
        bare, wrapped = results[longest, saver, "bare"], results[longest, saver, "wrapped"]
        growth = ratio(wrapped.last_ms, wrapped.first_ms) / ratio(bare.last_ms, bare.first_ms)
        section.checks.append(
            Check(
                f"{longest} steps, {saver}: growth of the time per step, wrapped / bare",
                growth,
                TARGET_GROWTH,
                "x",
            )
        )
        section.figures.append(
            (
                f"{longest} steps, {saver}: stored bare / wrapped",
                f"{_mb(bare.stored)} / {_mb(wrapped.stored)}",
            )
        )
    return section
