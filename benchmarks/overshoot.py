"""Overshoot: how late a run returns after its deadline when every node hangs.

`RUNS` runs start at once (`asyncio.gather`) on one event loop, each on a 3-node graph whose nodes
never finish on their own, each with a `DEADLINE` of 0.5 s. A run's overshoot is
`time.monotonic()` when its `ainvoke` returns (or raises) minus its deadline instant, taken as the
instant the run was called plus `DEADLINE`: the library sets its own deadline a few µs after that
call, so the figure errs (by those µs) on the late side.

- with_deadlines: the graph wrapped with `with_deadlines(builder, timeout=DEADLINE)`; every run
  must end with a `deadline_exceeded` outcome.
- naive per-node: the bare graph, every node wrapping its work in
  `asyncio.wait_for(..., DEADLINE)` and carrying on when it times out. Each node gets a fresh
  0.5 s, so the run ends after about 3 x 0.5 s: about one second past the request's deadline.
- ref, one outer timeout: the bare graph under `asyncio.timeout(DEADLINE)`: the event loop's own
  cancellation floor. It raises `TimeoutError` and the caller gets no state and no outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph_deadline import Outcome, Terminal, with_deadlines

from ._common import BenchState, Check, Section, Table, linear_graph, median, percentile

__all__ = ["DEADLINE", "NODES", "RUNS", "run"]

RUNS = 200
NODES = 3
DEADLINE = 0.5
TARGET_P99_MS = 0.0  # steps clamped by the deadline hand over before it
HANG = 3600.0


async def _hanging_node(state: BenchState) -> dict[str, int]:
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


async def _batch(call: Callable[[], Awaitable[Any]]) -> tuple[list[float], dict[str, int]]:
    """`RUNS` concurrent runs; each one's overshoot in ms, and how the runs ended."""

    async def one() -> tuple[float, str]:
        started = time.monotonic()
        try:
            result: Any = await call()
        except Exception as exc:  # the outer-timeout reference raises TimeoutError
            result = exc
        returned = time.monotonic()
        return (returned - (started + DEADLINE)) * 1000.0, _ends_as(result)

    results = await asyncio.gather(*(one() for _ in range(RUNS)))
    endings: dict[str, int] = {}
    for _, ending in results:
        endings[ending] = endings.get(ending, 0) + 1
    return [late for late, _ in results], endings


def run(*, quick: bool) -> Section:
    """Measure overshoot; `quick` does one batch of each variant, the full run three."""
    rounds = 1 if quick else 3
    hanging = linear_graph(_hanging_node, NODES)
    wrapped = with_deadlines(hanging, timeout=DEADLINE)
    naive = linear_graph(_naive_node, NODES).compile()
    bare_hanging = hanging.compile()

    async def outer_timeout() -> Any:
        async with asyncio.timeout(DEADLINE):
            return await bare_hanging.ainvoke({"n": 0})

    variants: dict[str, tuple[str, Callable[[], Awaitable[Any]], str]] = {
        "wrapped": (
            f"with_deadlines(builder, timeout={DEADLINE:g}).ainvoke",
            lambda: wrapped.ainvoke({"n": 0}),
            str(Terminal.DEADLINE_EXCEEDED),
        ),
        "naive": (
            f"naive: asyncio.wait_for(..., {DEADLINE:g}) in each node",
            lambda: naive.ainvoke({"n": 0}),
            f"state, n={NODES}",
        ),
        "outer": (
            f"ref: asyncio.timeout({DEADLINE:g}) around bare ainvoke",
            outer_timeout,
            "TimeoutError",
        ),
    }

    async def measure() -> tuple[dict[str, list[float]], dict[str, dict[str, int]]]:
        late: dict[str, list[float]] = {name: [] for name in variants}
        endings: dict[str, dict[str, int]] = {name: {} for name in variants}
        for _ in range(rounds):
            for name, (_, call, _) in variants.items():
                gc.collect()
                samples, ended = await _batch(call)
                late[name] += samples
                for key, count in ended.items():
                    endings[name][key] = endings[name].get(key, 0) + count
        return late, endings

    late, endings = asyncio.run(measure())

    table = Table(
        f"Overshoot: {RUNS} concurrent runs x {rounds} round(s), {NODES} hanging nodes, "
        f"{DEADLINE:g} s deadline",
        ("variant", "runs", "p50 ms", "p99 ms", "max ms", "ends as"),
    )
    for name, (label, _, expected) in variants.items():
        values = late[name]
        ended = endings[name]
        if set(ended) != {expected}:
            raise AssertionError(f"{label}: expected every run to end as {expected!r}, got {ended}")
        table.add(
            label,
            str(len(values)),
            f"{percentile(values, 50):.2f}",
            f"{percentile(values, 99):.2f}",
            f"{max(values):.2f}",
            ", ".join(f"{k} x{v}" for k, v in sorted(ended.items())),
        )
    table.notes.append("overshoot = time.monotonic() at return - (call instant + deadline)")
    p99 = percentile(late["wrapped"], 99)
    naive_p50 = median(late["naive"])
    floor = (NODES - 1) * DEADLINE * 1000.0
    table.notes.append(
        f"naive per-node timeouts: each of the {NODES} nodes gets a fresh {DEADLINE:g} s, so a "
        f"run returns at least {floor:.0f} ms late; the {naive_p50 - floor:.0f} ms more at p50 "
        f"is queueing on the one event loop that all {RUNS} runs share"
    )
    section = Section(tables=[table])
    section.figures.append(("overshoot p50 / p99, with_deadlines", _pair(late["wrapped"])))
    section.figures.append(("overshoot p50 / p99, naive per-node", _pair(late["naive"])))
    section.checks.append(Check("with_deadlines overshoot p99", p99, TARGET_P99_MS, " ms"))
    return section


def _pair(values: list[float]) -> str:
    return f"{percentile(values, 50):.2f} / {percentile(values, 99):.2f} ms"
