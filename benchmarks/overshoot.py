"""Overshoot: how late a run returns after its deadline when every node hangs.

N runs start at once (`asyncio.gather`) on one event loop, each on a 3-node graph whose nodes
never finish on their own, each with a `DEADLINE` of 0.5 s: the outage case, where a backend
hangs and every run in flight reaches its deadline in the same few milliseconds. N is `RUNS`
(200), then each of `MANY` (1,000 and 3,000), where the loop is saturated when the deadlines
come. A run's overshoot is `time.monotonic()` when its `ainvoke` returns (or raises) minus its
deadline instant, taken as the instant the run was called plus `DEADLINE`: the library sets its
own deadline a few µs after that call, so the figure errs (by those µs) on the late side.

- with_deadlines: the graph wrapped with `with_deadlines(builder, timeout=DEADLINE)`; every run
  must end with a `deadline_exceeded` outcome.
- budgeted nodes: the bare graph, every node `budgeted(fn)`, the deadline given with
  `deadline_input(DEADLINE)` (no run-level wrapper): LangGraph ends the run with `GraphDrained`.
- swallowing nodes: `with_deadlines`, every node swallowing its first cancellation and hanging
  again: the cut cancels it again after its grace (`GRACE`), by design about that much late.
- naive per-node (200 only): the bare graph, every node wrapping its work in
  `asyncio.wait_for(..., DEADLINE)` and carrying on when it times out. Each node gets a fresh
  0.5 s, so the run ends after about 3 x 0.5 s: about one second past the request's deadline.
- floor, one outer timeout: the bare graph under `asyncio.timeout(DEADLINE)`: the event loop's
  own cancellation floor. It raises `TimeoutError` and the caller gets no state and no outcome.

The variants take turns, batch by batch, in one process, with the collector frozen after
start-up (`gc.freeze()`, as docs/howto/across-services.md tells a server); beside each: the process
CPU time per run of its batches and what the cyclic garbage collector took during them
(`gc.callbacks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_deadline import Outcome, Terminal, budgeted, deadline_input, with_deadlines
from langgraph_deadline._core.cut import GRACE

from ._common import BenchState, Check, GcMeter, Section, Table, linear_graph, median, percentile

__all__ = ["DEADLINE", "MANY", "NODES", "RUNS", "run"]

RUNS = 200
MANY = (1000, 3000)
NODES = 3
DEADLINE = 0.5
TARGET_P99_MS = 0.0  # steps clamped by the deadline hand over before it
TARGET_P50_OVER_FLOOR_MS = 10.0  # at MANY: p50 within this of the floor's
TARGET_P99_RATIO = 1.5  # at MANY: p99 at most this times the floor's
HANG = 3600.0


async def _hanging_node(state: BenchState) -> dict[str, int]:
    await asyncio.sleep(HANG)
    return {"n": state["n"] + 1}


async def _swallowing_node(state: BenchState) -> dict[str, int]:
    with contextlib.suppress(asyncio.CancelledError):  # what a careless library does
        await asyncio.sleep(HANG)
    await asyncio.sleep(HANG)
    return {"n": state["n"] + 1}


async def _naive_node(state: BenchState) -> dict[str, int]:
    # The naive node gives up on its own work at its timeout and lets the run go on.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(HANG), DEADLINE)
    return {"n": state["n"] + 1}


def _ends_as(result: Any) -> str:
    if isinstance(result, BaseException):
        return type(result).__name__
    outcome = result.get("deadline_outcome") if isinstance(result, dict) else None
    if isinstance(outcome, Outcome):
        return str(outcome.terminal)
    if isinstance(result, dict):
        return f"state, n={result.get('n')}"
    return type(result).__name__


@dataclass
class _Tally:
    """One variant at one concurrency, over its batches."""

    late: list[float] = field(default_factory=list)
    endings: dict[str, int] = field(default_factory=dict)
    cpu: float = 0.0
    cpu_before: float = 0.0  # of `cpu`, what the batch took until its first run's deadline
    gc: GcMeter = field(default_factory=GcMeter)


async def _batch(call: Callable[[], Awaitable[Any]], runs: int, tally: _Tally) -> None:
    """`runs` concurrent runs; each one's overshoot in ms and how it ended, into `tally`."""

    async def one() -> tuple[float, str]:
        started = time.monotonic()
        try:
            result: Any = await call()
        except Exception as exc:  # the outer-timeout floor raises TimeoutError
            result = exc
        returned = time.monotonic()
        return (returned - (started + DEADLINE)) * 1000.0, _ends_as(result)

    gc.collect()
    cpu = time.process_time()
    before: list[float] = []  # the CPU taken when the first run's deadline comes
    first = asyncio.get_running_loop().call_later(
        DEADLINE, lambda: before.append(time.process_time() - cpu)
    )
    with tally.gc:
        results = await asyncio.gather(*(one() for _ in range(runs)))
    first.cancel()
    tally.cpu += time.process_time() - cpu
    tally.cpu_before += before[0] if before else time.process_time() - cpu
    for late, ending in results:
        tally.late.append(late)
        tally.endings[ending] = tally.endings.get(ending, 0) + 1


@dataclass(frozen=True)
class _Variant:
    label: str
    call: Callable[[], Awaitable[Any]]
    ends_as: str
    at: tuple[int, ...]  # the concurrencies it runs at


def _variants() -> dict[str, _Variant]:
    hanging = linear_graph(_hanging_node, NODES)
    wrapped = with_deadlines(hanging, timeout=DEADLINE)
    functions = linear_graph(budgeted(_hanging_node), NODES).compile()
    swallowing = with_deadlines(linear_graph(_swallowing_node, NODES), timeout=DEADLINE)
    naive = linear_graph(_naive_node, NODES).compile()
    bare_hanging = hanging.compile()

    async def outer_timeout() -> Any:
        async with asyncio.timeout(DEADLINE):
            return await bare_hanging.ainvoke({"n": 0})

    every = (RUNS, *MANY)
    exceeded = str(Terminal.DEADLINE_EXCEEDED)
    return {
        "wrapped": _Variant(
            f"with_deadlines(builder, timeout={DEADLINE:g}).ainvoke",
            lambda: wrapped.ainvoke({"n": 0}),
            exceeded,
            every,
        ),
        "budgeted": _Variant(
            "budgeted nodes: add_node(budgeted(fn)) + deadline_input",
            lambda: functions.ainvoke({"n": 0, **deadline_input(DEADLINE)}),
            "GraphDrained",
            every,
        ),
        "swallowing": _Variant(
            f"with_deadlines, nodes that swallow a cancellation (grace {GRACE:g} s)",
            lambda: swallowing.ainvoke({"n": 0}),
            exceeded,
            (RUNS, MANY[0]),
        ),
        "naive": _Variant(
            f"naive: asyncio.wait_for(..., {DEADLINE:g}) in each node",
            lambda: naive.ainvoke({"n": 0}),
            f"state, n={NODES}",
            (RUNS,),
        ),
        "outer": _Variant(
            f"floor: asyncio.timeout({DEADLINE:g}) around bare ainvoke",
            outer_timeout,
            "TimeoutError",
            every,
        ),
    }


def run(*, quick: bool, plot: Path | None = None) -> Section:
    """Measure overshoot; `quick` does one batch of each variant at each concurrency, the full
    run three at 200 and two at the larger ones."""
    variants = _variants()
    rounds = {RUNS: 1 if quick else 3, **{n: 1 if quick else 2 for n in MANY}}

    async def measure() -> dict[tuple[str, int], _Tally]:
        # After start-up (imports, compiled graphs) the collector is frozen, as the docs tell a
        # server to do: its full passes then walk the runs' objects, not the process's.
        gc.collect()
        gc.freeze()
        tallies: dict[tuple[str, int], _Tally] = {}
        for runs in (RUNS, *MANY):
            names = [name for name, v in variants.items() if runs in v.at]
            for i in range(rounds[runs]):
                for name in names if i % 2 == 0 else reversed(names):
                    tally = tallies.setdefault((name, runs), _Tally())
                    await _batch(variants[name].call, runs, tally)
        return tallies

    try:
        tallies = asyncio.run(measure())
    finally:
        gc.unfreeze()

    section = Section()
    for runs in (RUNS, *MANY):
        table = Table(
            f"Overshoot: {runs} concurrent runs x {rounds[runs]} round(s), {NODES} hanging "
            f"nodes, {DEADLINE:g} s deadline",
            (
                "variant",
                "runs",
                "p50 ms",
                "p99 ms",
                "max ms",
                "CPU ms/run (before + after)",
                "GC",
                "ends as",
            ),
        )
        for name, variant in variants.items():
            if runs not in variant.at:
                continue
            tally = tallies[name, runs]
            if set(tally.endings) != {variant.ends_as}:
                raise AssertionError(
                    f"{variant.label}: expected every run to end as {variant.ends_as!r}, "
                    f"got {tally.endings}"
                )
            table.add(
                variant.label,
                str(len(tally.late)),
                f"{percentile(tally.late, 50):.2f}",
                f"{percentile(tally.late, 99):.2f}",
                f"{max(tally.late):.2f}",
                _cpu(tally),
                tally.gc.text(),
                ", ".join(f"{k} x{v}" for k, v in sorted(tally.endings.items())),
            )
        section.tables.append(table)
    first = section.tables[0]
    first.notes.append("overshoot = time.monotonic() at return - (call instant + deadline)")
    naive_p50 = median(tallies["naive", RUNS].late)
    floor = (NODES - 1) * DEADLINE * 1000.0
    first.notes.append(
        f"naive per-node timeouts: each of the {NODES} nodes gets a fresh {DEADLINE:g} s, so a "
        f"run returns at least {floor:.0f} ms late; the {naive_p50 - floor:.0f} ms more at p50 "
        f"is queueing on the one event loop that all {RUNS} runs share"
    )
    first.notes.append(
        "GC: the cyclic collector's collections (full ones: generation 2) and the time they "
        "took, over the variant's batches; CPU: process time of its batches per run, split at "
        "the first run's deadline (before: starting the runs; once runs x before passes the "
        f"deadline, {DEADLINE:g} s, the loop is still starting runs when the first deadlines come)"
    )

    wrapped = tallies["wrapped", RUNS].late
    section.figures.append(("overshoot p50 / p99, with_deadlines", _pair(wrapped)))
    section.figures.append(
        ("overshoot p50 / p99, naive per-node", _pair(tallies["naive", RUNS].late))
    )
    section.checks.append(
        Check("with_deadlines overshoot p99", percentile(wrapped, 99), TARGET_P99_MS, " ms")
    )
    for runs in MANY:
        ours, base = tallies["wrapped", runs], tallies["outer", runs]
        p50_over = percentile(ours.late, 50) - percentile(base.late, 50)
        p99_ratio = percentile(ours.late, 99) / max(percentile(base.late, 99), 1.0)
        cpu_ratio = ours.cpu / base.cpu
        section.figures.append(
            (
                f"overshoot p50 / p99 at {runs}, with_deadlines [floor]",
                f"{_pair(ours.late)} [{_pair(base.late)}], CPU {cpu_ratio:.2f}x, "
                f"CPU ms/run {_cpu(ours)} [{_cpu(base)}], GC {ours.gc.text()} [{base.gc.text()}]",
            )
        )
        section.checks += [
            Check(f"p50 over the floor's at {runs}", p50_over, TARGET_P50_OVER_FLOOR_MS, " ms"),
            Check(f"p99 / the floor's at {runs}", p99_ratio, TARGET_P99_RATIO, "x"),
        ]
    if plot is not None:
        from .overshoot_plot import write

        short = {"outer": "floor (asyncio.timeout)", "wrapped": "with_deadlines"}
        short["budgeted"] = "budgeted nodes"
        points = {
            short[name]: [
                (runs, percentile(t.late, 50), percentile(t.late, 99))
                for (n, runs), t in sorted(tallies.items(), key=lambda kv: kv[0][1])
                if n == name
            ]
            for name in short
        }
        write(plot, points, deadline=DEADLINE, nodes=NODES)
        first.notes.append(f"figure: {plot}")
    return section


def _cpu(tally: _Tally) -> str:
    """CPU per run: in all, and before + after the batch's first deadline."""
    n = len(tally.late)
    before, after = tally.cpu_before / n * 1000, (tally.cpu - tally.cpu_before) / n * 1000
    return f"{tally.cpu / n * 1000:.3f} ({before:.3f} + {after:.3f})"


def _pair(values: list[float]) -> str:
    return f"{percentile(values, 50):.2f} / {percentile(values, 99):.2f} ms"
