"""Load: many runs in one process, bare LangGraph beside `with_deadlines`, measured side by side.

- CPU per run: `BURST` runs of a 3-node graph of trivial async nodes, started together on one
  event loop (`asyncio.gather`), process CPU time divided by the runs. Bare and wrapped bursts
  alternate `ROUNDS` times; the figure is the ratio of their medians.
- Memory per run: the same burst under `tracemalloc`, peak traced memory divided by the runs
  (all of them are alive at once), wrapped minus bare.
- Memory per waiting run: `WAITING` runs of the 3-node graph all waiting in their middle node
  (on one `asyncio.Event`), with a 600 s deadline; what they hold then (a `tracemalloc` snapshot
  less the one before they started) divided by the runs, wrapped minus bare: what a server
  holds for each request in flight.
- Many at once: `MANY` concurrent wrapped runs must all end `completed`, with no error.
- Already late: a run whose deadline passed before it started must cost little CPU (it does no
  node work: it ends `deadline_exceeded` at its first node).
- Left for the cyclic collector: with the collector off, `LEFT_RUNS` runs that complete, then
  `LEFT_RUNS` runs cut at a `CUT_DEADLINE` in their first node (3 hanging nodes; the floor is
  `asyncio.timeout` around the bare graph), then one collection: the objects it finds
  unreachable (in reference cycles, which reference counting cannot free), per run. Each one is
  work for every collection until then, and a full one also walks every live run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph_deadline import Deadline, Outcome, Terminal, with_deadlines

from ._common import BenchState, Builder, Check, Section, Table, chain_graph, linear_graph, median

__all__ = ["run"]

NODES = 3
TARGET_CPU_RATIO = 1.10
TARGET_EXTRA_KIB = 4.0
TARGET_WAITING_KIB = 6.0  # held per run waiting in a node, over bare (#49)
WAITING = 2000
TARGET_LATE_MS = 0.3
TARGET_LEFT_EXTRA = 0.0  # objects per run left for the cyclic collector beyond LangGraph's own
LEFT_RUNS = 200
CUT_DEADLINE = 0.05


async def _node(state: BenchState) -> dict[str, int]:
    return {"n": state["n"] + 1}


async def _hang(state: BenchState) -> dict[str, int]:
    await asyncio.sleep(3600.0)
    return {"n": state["n"] + 1}


async def _burst(call: Callable[[], Awaitable[Any]], runs: int) -> list[Any]:
    return await asyncio.gather(*(call() for _ in range(runs)), return_exceptions=True)


def _cpu_per_run(call: Callable[[], Awaitable[Any]], runs: int) -> float:
    """Process CPU seconds per run for one burst of `runs` concurrent runs."""
    gc.collect()
    t0 = time.process_time()
    results = asyncio.run(_burst(call, runs))
    cpu = time.process_time() - t0
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise AssertionError(f"{len(errors)} runs failed, first: {errors[0]!r}")
    return cpu / runs


def _peak_per_run(call: Callable[[], Awaitable[Any]], runs: int) -> float:
    """Peak traced bytes per run while `runs` runs are alive at once."""
    gc.collect()
    tracemalloc.start()
    try:
        asyncio.run(_burst(call, runs))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / runs


def _held_per_waiting_run(build: Callable[[Callable[..., Any]], Any], runs: int) -> float:
    """Bytes each of `runs` runs holds while all wait in the middle node of the graph `build`
    makes from that node (a snapshot once all wait, less the one before they started)."""

    async def held() -> float:
        gate, all_in = asyncio.Event(), asyncio.Event()
        arrived = [0, runs]  # runs in the node so far, and how many to wait for

        async def wait(state: BenchState) -> dict[str, int]:
            arrived[0] += 1
            if arrived[0] >= arrived[1]:
                all_in.set()
            await gate.wait()
            return {"n": state["n"] + 1}

        graph = build(wait)
        gate.set()
        for _ in range(5):  # warm: what the first runs create once
            await graph.ainvoke({"n": 0})
        gate.clear()
        arrived[0] = 0
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            tasks = [asyncio.create_task(graph.ainvoke({"n": 0})) for _ in range(runs)]
            await all_in.wait()
            gc.collect()
            after = tracemalloc.take_snapshot()
            gate.set()
            await asyncio.gather(*tasks)
        finally:
            tracemalloc.stop()
        return sum(d.size_diff for d in after.compare_to(before, "filename")) / runs

    return asyncio.run(held())


def _waiting(wait: Callable[..., Any]) -> Builder:
    """START -> n0 -> n1 (`wait`) -> n2 -> END: the graph whose runs wait in their middle node."""
    return chain_graph([_node, wait, _node])


def _left_for_gc(call: Callable[[], Awaitable[Any]], runs: int) -> float:
    """Objects per run that only the cyclic collector can free, after `runs` concurrent runs."""

    async def burst() -> int:
        await _burst(call, 5)  # warm: what the first runs create once
        gc.collect()
        gc.disable()
        try:
            results = await _burst(call, runs)
            del results
            return gc.collect()
        finally:
            gc.enable()

    return asyncio.run(burst()) / runs


def run(*, quick: bool = False) -> Section:
    burst = 200 if quick else 1000
    rounds = 3 if quick else 7
    many = 2000 if quick else 10_000
    builder = linear_graph(_node, NODES)
    bare = builder.compile()
    wrapped = with_deadlines(builder, timeout=600.0)

    async def call_bare() -> Any:
        return await bare.ainvoke({"n": 0})

    async def call_wrapped() -> Any:
        return await wrapped.ainvoke({"n": 0})

    _cpu_per_run(call_bare, 50)  # warm up both: imports, caches
    _cpu_per_run(call_wrapped, 50)
    bare_cpu: list[float] = []
    wrapped_cpu: list[float] = []
    for i in range(rounds):
        pair = [(call_bare, bare_cpu), (call_wrapped, wrapped_cpu)]
        for call, sink in pair if i % 2 == 0 else reversed(pair):
            sink.append(_cpu_per_run(call, burst))
    cpu_ratio = median(wrapped_cpu) / median(bare_cpu)

    mem_runs = min(burst, 500)
    bare_mem = _peak_per_run(call_bare, mem_runs)
    wrapped_mem = _peak_per_run(call_wrapped, mem_runs)
    extra_kib = (wrapped_mem - bare_mem) / 1024.0
    waiting = 500 if quick else WAITING
    bare_held = _held_per_waiting_run(lambda wait: _waiting(wait).compile(), waiting)
    wrapped_held = _held_per_waiting_run(
        lambda wait: with_deadlines(_waiting(wait), timeout=600.0), waiting
    )
    held_kib = (wrapped_held - bare_held) / 1024.0

    results = asyncio.run(_burst(call_wrapped, many))
    errors = sum(isinstance(r, BaseException) for r in results)
    completed = sum(
        isinstance(r, dict)
        and isinstance(r.get("deadline_outcome"), Outcome)
        and r["deadline_outcome"].terminal is Terminal.COMPLETED
        for r in results
    )

    async def call_late() -> Any:
        late = Deadline.after(0.0)
        return await wrapped.ainvoke({"n": 0, "deadline": late.timestamp})

    late_runs = 200 if quick else 1000
    late_cpu = _cpu_per_run(call_late, late_runs) * 1000.0
    late_result = asyncio.run(call_late())
    if late_result["deadline_outcome"].terminal is not Terminal.DEADLINE_EXCEEDED:
        raise AssertionError(f"a late run did not end deadline_exceeded: {late_result!r}")

    hanging = linear_graph(_hang, NODES)
    bare_hanging = hanging.compile()
    wrapped_hanging = with_deadlines(hanging, timeout=CUT_DEADLINE)

    async def call_floor() -> Any:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CUT_DEADLINE):
                return await bare_hanging.ainvoke({"n": 0})

    async def call_cut() -> Any:
        return await wrapped_hanging.ainvoke({"n": 0})

    left = {
        "run": (_left_for_gc(call_bare, LEFT_RUNS), _left_for_gc(call_wrapped, LEFT_RUNS)),
        "cut": (_left_for_gc(call_floor, LEFT_RUNS), _left_for_gc(call_cut, LEFT_RUNS)),
    }

    table = Table(
        f"Load: bursts of {burst} concurrent runs of a {NODES}-node graph ({rounds} rounds)",
        ("figure", "bare", "with_deadlines", "ratio / extra"),
    )
    table.add(
        "CPU per run, µs",
        f"{median(bare_cpu) * 1e6:.1f}",
        f"{median(wrapped_cpu) * 1e6:.1f}",
        f"{cpu_ratio:.2f}x",
    )
    table.add(
        f"peak memory per run, KiB ({mem_runs} alive)",
        f"{bare_mem / 1024:.1f}",
        f"{wrapped_mem / 1024:.1f}",
        f"+{extra_kib:.1f} KiB",
    )
    table.add(
        f"memory held per run waiting in a node, KiB ({waiting} waiting)",
        f"{bare_held / 1024:.1f}",
        f"{wrapped_held / 1024:.1f}",
        f"+{held_kib:.1f} KiB",
    )
    table.add(f"{many} concurrent runs", "-", f"{completed} completed", f"{errors} errors")
    table.add("CPU of a run already past its deadline, ms", "-", f"{late_cpu:.3f}", "-")
    for what, label in (("run", "a run that completes"), ("cut", "a run cut at its deadline")):
        base, ours = left[what]
        table.add(
            f"objects left for the cyclic collector, {label}",
            f"{base:.1f}",
            f"{ours:.1f}",
            f"{ours - base:+.1f}",
        )
    table.notes.append(
        "CPU is process time (both cores' work in this process), divided by the runs of a "
        "burst; memory is tracemalloc's peak while the whole burst is alive"
    )
    table.notes.append(
        f"objects left for the cyclic collector: per run, over {LEFT_RUNS} concurrent runs with "
        "the collector off, what one collection then finds unreachable; a cut run's "
        f"deadline is {CUT_DEADLINE:g} s, its bare column the floor (asyncio.timeout around "
        "the bare graph)"
    )
    section = Section(tables=[table])
    section.figures += [
        ("load CPU per run, with_deadlines / bare", f"{cpu_ratio:.2f}x"),
        ("load extra memory per run", f"{extra_kib:.1f} KiB"),
        ("memory held per waiting run", f"+{held_kib:.1f} KiB ({waiting} waiting)"),
        (f"{many} concurrent runs", f"{completed} completed, {errors} errors"),
        ("CPU of a run already past its deadline", f"{late_cpu:.3f} ms"),
        (
            "objects left for the cyclic collector per run / per cut run [bare, floor]",
            f"{left['run'][1]:.1f} / {left['cut'][1]:.1f} [{left['run'][0]:.1f}, "
            f"{left['cut'][0]:.1f}]",
        ),
    ]
    section.checks += [
        Check("load CPU per run ratio", cpu_ratio, TARGET_CPU_RATIO, "x"),
        Check("load extra memory per run", extra_kib, TARGET_EXTRA_KIB, " KiB"),
        Check("memory held per waiting run", held_kib, TARGET_WAITING_KIB, " KiB"),
        Check(f"errors in {many} concurrent runs", float(errors + (many - completed)), 0.0, ""),
        Check("CPU of an already-late run", late_cpu, TARGET_LATE_MS, " ms"),
        Check(
            "extra objects left for the cyclic collector per run",
            left["run"][1] - left["run"][0],
            TARGET_LEFT_EXTRA,
            "",
        ),
        Check(
            "extra objects left for the cyclic collector per cut run",
            left["cut"][1] - left["cut"][0],
            TARGET_LEFT_EXTRA,
            "",
        ),
    ]
    return section
