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
import dataclasses
import itertools
import operator
import random
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import httpx
from langchain_core.messages import ToolMessage
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import (
    DeadlineState,
    StepRecord,
    deadline_tools,
    with_deadlines,
)
from langgraph_deadline._core.observe import StepEvent
from langgraph_deadline.instrument import get_observers, set_observers
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

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
WARMUP = 100  # "after the first 100 runs": the book has heard them
SEEDS = (7, 8, 9)
TRIES = 2  # each seed run twice: whether a run falls into a bad state depends on timing too
FIRST = 20  # "the first runs": a book that is still empty must not cost them answers


@dataclasses.dataclass(frozen=True)
class Workload:
    """A shape of run: the planner's (median, sigma) and the deadline."""

    name: str
    planner: tuple[float, float]
    deadline: float


WORKLOADS = (
    Workload("planner 80 ms", PLANNER, DEADLINE),
    Workload("a long first step: planner 450 ms", (0.45, 0.3), 1.6),
)


def _draw(rng: random.Random, median: float, sigma: float) -> float:
    value = median * rng.lognormvariate(0.0, sigma)
    return value * 10 if rng.random() < STRAGGLERS else value


def _draws(n: int, seed: int, planner: tuple[float, float] = PLANNER) -> list[dict[str, float]]:
    rng = random.Random(seed)
    return [
        {
            "planner": _draw(rng, *planner),
            "answer": _draw(rng, *ANSWER),
            **{name: _draw(rng, *spec) for name, spec in TOOLS.items()},
        }
        for _ in range(n)
    ]


def _oracle(draws: list[dict[str, float]], deadline: float = DEADLINE) -> dict[str, float]:
    """The fixed caps whose simulated runs put the most tool answers into complete answers
    (a run's tools count only when its answer is in by the deadline)."""
    left = deadline - RESERVE - OVERHEAD
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
    answered: Annotated[int, operator.add]


@dataclasses.dataclass(frozen=True)
class Shape:
    """How a variant's graph is built: its tool caps (on the tools, in one node calling them in
    parallel) or node caps (each tool a node of its own, in parallel branches); the book
    attached to the run (`with_deadlines(book=)`), and whether the tool nodes are optional."""

    caps: Any
    book: LatencyBook | None = None
    nodes: bool = False
    optional: bool = False
    deadline: float = DEADLINE


def _graph(server: SlowServer, client: httpx.AsyncClient, draws: Any, shape: Shape) -> Any:
    async def get(delay: float) -> str:
        return (await client.get(server.url(f"/slow?delay={delay:.4f}"))).text

    if shape.nodes:
        return _node_graph(get, draws, shape)
    caps = shape.caps

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
    return with_deadlines(b, timeout=shape.deadline, reserve=RESERVE, book=shape.book)


def _node_graph(get: Callable[[float], Any], draws: Any, shape: Shape) -> Any:
    """planner -> each tool a node, in parallel -> answer (a join): node caps, the tool
    nodes optional when `shape.optional`."""

    def step(name: str, counts: bool) -> Any:
        async def body(state: _Runs) -> dict[str, Any]:
            await get(draws[state["i"]][name])
            return {"answered": 1} if counts else {}

        body.__name__ = name
        return body

    b = StateGraph(_Runs)
    b.add_node("planner", step("planner", False))
    b.add_node("answer", step("answer", False))
    b.add_edge(START, "planner")
    for tool in TOOLS:
        b.add_node(tool, step(tool, True))
        b.add_edge("planner", tool)
    b.add_edge(list(TOOLS), "answer")
    b.add_edge("answer", END)
    return with_deadlines(
        b,
        timeout=shape.deadline,
        reserve=RESERVE,
        caps=shape.caps,
        book=shape.book,
        optional=set(TOOLS) if shape.optional else (),
    )


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
    shape: Shape,
    ok: list[bool],
    after_batch: Callable[[int], None] | None = None,
    handoffs: list[float] | None = None,
) -> dict[str, float]:
    """Replay `draws` with this shape; `ok[i]`: run i answered completely by its deadline;
    `after_batch(runs done)` after each batch of runs; `handoffs`: each gap between a step's
    end and the next one's start, in seconds."""
    warmup = WARMUP if len(draws) > 2 * WARMUP else len(draws) // 3
    cuts = _Cuts()
    saved = get_observers()
    set_observers([cuts])
    complete, answered, late = 0, 0, []
    second_half = 0
    after_warmup = 0
    starved = 0
    at_first = 0
    ok[:] = [False] * len(draws)
    try:
        # No pool limit: a request cut mid-flight may keep its slot in httpx's pool for a
        # while, and a limited pool then stalls every run (measured: whole batches timed out).
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as client:
            graph = _graph(server, client, draws, shape)

            async def one(i: int) -> None:
                nonlocal complete, answered, second_half, after_warmup, starved, at_first
                out = await graph.ainvoke({"i": i, "answered": 0})
                late.append(time.time() - out["deadline"])
                done = out["deadline_outcome"].ok
                complete += done
                ok[i] = done
                at_first += out["deadline_outcome"].step == "planner" and any(
                    r.name == "planner" and r.cancel_source not in (None, "run_deadline")
                    for r in out["deadline_trace"]
                )  # its first step cut before the run's deadline: starved for what follows
                second_half += done and i >= len(draws) // 2
                after_warmup += done and i >= warmup
                answered += out.get("answered", 0)
                trace = out["deadline_trace"]
                starved += not any(
                    r.name == "answer" and r.status is StepStatus.COMPLETED for r in trace
                )
                if handoffs is not None:
                    handoffs.extend(_gaps(trace))

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
        "complete_warm": after_warmup / max(1, n - warmup),
        "complete_100": sum(ok[:100]) / min(n, 100),
        "complete_first": sum(ok[:FIRST]) / min(n, FIRST),
        "at_first": float(at_first),
        "starved": starved / n,
        "answered": answered / n,
        "cut": cuts.cut / n,
        "late_p99_ms": percentile(late, 99) * 1000,
    }


def _gaps(trace: Sequence[StepRecord]) -> list[float]:
    """Seconds from each node's end to the start of the node that started next after it."""
    nodes = sorted(
        (r.started_at, r.started_at + r.elapsed_ms / 1000.0)
        for r in trace
        if r.kind == "node" and r.started_at is not None
    )
    gaps = []
    for (_, end), (start, _) in itertools.pairwise(nodes):
        if start >= end:
            gaps.append(start - end)
    return gaps


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


ROUND = "round caps (1 s each tool)"
ORACLE = "oracle: best fixed caps (grid)"
THEN = "learned caps, then= written by hand"
DEFAULTS = "defaults: an empty book attached"
NODE_ROUND = "node caps (1 s), no book"
NODE_DEFAULTS = "node caps + empty book, tools optional"
LEARNED_CAPS = "learned(book) tool caps at their defaults, the book attached"


def _shapes(
    oracle: dict[str, float], deadline: float = DEADLINE
) -> dict[str, Callable[[], tuple[Shape, Any]]]:
    """Each variant: a function making its shape (and the learned rule to follow, if any) from
    a fresh book, made just before its runs (so it hears only them)."""
    round_caps = dict.fromkeys(TOOLS, ROUND_CAP)

    def then() -> tuple[Shape, Any]:
        book = LatencyBook()
        rule = learned(
            book, quantile=0.95, headroom=1.5, min_samples=20, cap=ROUND_CAP, then=["node:answer"]
        )
        return Shape(dict.fromkeys(TOOLS, rule), deadline=deadline), rule

    def caps_learned() -> tuple[Shape, Any]:
        rule = learned(LatencyBook(), cap=ROUND_CAP)  # its documented defaults
        return Shape(dict.fromkeys(TOOLS, rule), book=rule.book, deadline=deadline), rule

    return {
        ROUND: lambda: (Shape(round_caps, deadline=deadline), None),
        ORACLE: lambda: (Shape(oracle, deadline=deadline), None),
        THEN: then,
        DEFAULTS: lambda: (Shape(round_caps, book=LatencyBook(), deadline=deadline), None),
        LEARNED_CAPS: caps_learned,
        NODE_ROUND: lambda: (Shape(round_caps, nodes=True, deadline=deadline), None),
        NODE_DEFAULTS: lambda: (
            Shape(round_caps, book=LatencyBook(), nodes=True, optional=True, deadline=deadline),
            None,
        ),
    }


def run(*, quick: bool = False, plot: Path | None = None) -> Section:
    runs = 60 if quick else 300
    seeds = SEEDS[:1] if quick else SEEDS
    tries = 1 if quick else TRIES
    section = Section()
    per_us, per_key = _recording_cost()
    with SlowServer() as server:
        for number, work in enumerate(WORKLOADS):
            oracle = _oracle(_draws(2000, seed=11, planner=work.planner), work.deadline)
            first = number == 0
            results, oks, learning, handoffs, caps_now = _rows(
                server, work, oracle, runs, seeds, tries, drawn=first
            )
            section.tables.append(_table(work, runs, len(seeds), tries, results, oracle, caps_now))
            table = section.tables[-1]
            if handoffs:
                table.notes.append(
                    "hand-off between steps (defaults row, from the step records): "
                    f"p50 {percentile(handoffs, 50) * 1000:.1f} ms, "
                    f"p95 {percentile(handoffs, 95) * 1000:.1f} ms, "
                    f"p99 {percentile(handoffs, 99) * 1000:.1f} ms"
                )
            if first:
                table.notes.append(
                    f"recording a sample: {per_us:.2f} µs; book bytes per key: {per_key} "
                    f"({per_key / 1024:.1f} KiB)"
                )
                if plot is not None:
                    from .learned_plot import write

                    shares = {label: windows(ok) for label, ok in oks.items()}
                    write(
                        plot,
                        shares,
                        learning,
                        oracle,
                        round_cap=ROUND_CAP,
                        window=WINDOW,
                        runs=runs,
                    )
                    table.notes.append(f"figure: {plot} (seed {seeds[0]})")
            _checks(section, results, "" if first else f"{work.name}: ")
    section.figures.append(("latency book: recording a sample", f"{per_us:.2f} µs"))
    section.checks.append(Check("latency book: recording a sample", per_us, 3.0, " µs"))
    section.checks.append(Check("latency book: bytes per key", per_key / 1024, 64.0, " KiB"))
    return section


_Results = dict[str, list[dict[str, float]]]


def _rows(
    server: SlowServer,
    work: Workload,
    oracle: dict[str, float],
    runs: int,
    seeds: Sequence[int],
    tries: int,
    *,
    drawn: bool,
) -> tuple[_Results, dict[str, list[bool]], Any, list[float], dict[str, float | None]]:
    """Every variant of `work` on each seed, `tries` times, each from an empty book: the rows,
    the first try's complete answers run by run, the learned caps as they went (for the
    figure), the hand-offs between steps and the learned caps at the end."""
    results: _Results = {}
    oks: dict[str, list[bool]] = {}
    learning: list[tuple[int, dict[str, float | None]]] = []
    handoffs: list[float] = []
    caps_now: dict[str, float | None] = {}
    for seed in seeds:
        draws = _draws(runs, seed=seed, planner=work.planner)
        for attempt in range(tries):
            first = drawn and seed == seeds[0] and attempt == 0
            for label, make in _shapes(oracle, work.deadline).items():
                shape, rule = make()
                ok: list[bool] = []
                after_batch = None
                if rule is not None and label == THEN:
                    seen = learning if first else []

                    def after_batch(done: int, rule: Any = rule, seen: Any = seen) -> None:
                        seen.append((done, {t: rule.cap("tool", t) for t in TOOLS}))

                    after_batch(0)
                gaps = handoffs if label == DEFAULTS and first else None
                row = asyncio.run(_variant(server, draws, shape, ok, after_batch, gaps))
                results.setdefault(label, []).append(row)
                if first:
                    oks[label] = ok
                if rule is not None and label == THEN:
                    caps_now = {t: rule.cap("tool", t) for t in TOOLS}
                if shape.book is not None:
                    shape.book.detach()
                if rule is not None and rule.book is not shape.book:
                    rule.book.detach()
    return results, oks, learning, handoffs, caps_now


def _table(
    work: Workload,
    runs: int,
    seeds: int,
    tries: int,
    results: _Results,
    oracle: dict[str, float],
    caps_now: dict[str, float | None],
) -> Table:
    table = Table(
        f"Learned budgets, {work.name}: {runs} agent runs x {seeds} seeds x {tries} tries, "
        f"deadline {work.deadline * 1000:.0f} ms, planner + 3 parallel tools + answer",
        (
            "variant",
            "complete by deadline",
            "(lowest)",
            "first 100 (lowest)",
            f"first {FIRST} (lowest)",
            "planner cut early (most)",
            "tools answered / run",
            "answer starved",
            "p99 return - deadline",
        ),
    )
    for label, rows in results.items():
        table.add(
            label,
            f"{_mean(results, label, 'complete') * 100:.1f} %",
            f"{min(r['complete'] for r in rows) * 100:.1f} %",
            f"{min(r['complete_100'] for r in rows) * 100:.0f} %",
            f"{min(r['complete_first'] for r in rows) * 100:.0f} %",
            f"{max(r['at_first'] for r in rows):.0f}",
            f"{_mean(results, label, 'answered'):.2f}",
            f"{_mean(results, label, 'starved') * 100:.1f} %",
            f"{max(r['late_p99_ms'] for r in rows):+.1f} ms",
        )
    table.notes.append(
        "oracle caps: " + ", ".join(f"{t} {c * 1000:.0f} ms" for t, c in oracle.items())
    )
    if caps_now:
        table.notes.append(
            "learned caps (then=) at the end: "
            + ", ".join(f"{t} {(c or 0) * 1000:.0f} ms" for t, c in caps_now.items())
            + " (p95 x 1.5, keeping back the answer's p95)"
        )
    return table


def _mean(results: _Results, label: str, key: str) -> float:
    return sum(r[key] for r in results[label]) / len(results[label])


def _checks(section: Section, results: _Results, where: str = "") -> None:
    """The targets, on each workload (`where` names it), for every book row on every seed and
    try: at least round caps' share and the oracle's less one point, its first runs complete,
    no run ended at its first step, and no run late at p99."""
    defaults = _mean(results, DEFAULTS, "complete")
    section.figures.append(
        (f"{where}defaults from an empty book: runs complete", f"{defaults * 100:.1f} %")
    )

    def worst(key: str, against: str) -> float:
        """The most points a book row's try falls below `against`'s same try, on `key`."""
        return max(
            (a[key] - r[key]) * 100
            for label in BOOKS
            for r, a in zip(results[label], results[against], strict=True)
        )

    checks = section.checks
    checks.append(
        Check(
            f"{where}book rows: points below round caps, worst try",
            worst("complete", ROUND),
            0.0,
            "",
        )
    )
    checks.append(
        Check(
            f"{where}book rows: points below the oracle, worst try",
            worst("complete", ORACLE),
            1.0,
            "",
        )
    )
    checks.append(
        Check(
            f"{where}book rows after {WARMUP} runs: points below the oracle",
            worst("complete_warm", ORACLE),
            1.0,
            "",
        )
    )
    first = min(r["complete_first"] for label in BOOKS for r in results[label]) * 100
    checks.append(
        Check(f"{where}book rows: first {FIRST} runs complete, lowest", -first, -90.0, "")
    )
    ended = max(r["at_first"] for label in BOOKS for r in results[label])
    checks.append(
        Check(
            f"{where}book rows: runs ended at the planner before the deadline, most", ended, 0.0, ""
        )
    )
    late = max(r["late_p99_ms"] for label in BOOKS for r in results[label])
    checks.append(Check(f"{where}book rows: p99 return - deadline", late, 0.0, " ms"))


BOOKS = (DEFAULTS, LEARNED_CAPS, NODE_DEFAULTS)
