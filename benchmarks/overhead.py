"""Overhead: a 10-node linear graph of trivial nodes, bare against `with_deadlines`.

Each iteration runs every variant once, in an order that rotates from one iteration to the next,
so drift (CPU frequency, caches, the garbage collector) hits all variants alike; the figures are
medians over the iterations. The wrapper cost per node is `(wrapped - bare) / nodes`.

Variants marked "ref" are not targets: they split the cost into its parts.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import gc
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.types import TimeoutPolicy

from langgraph_deadline import Outcome, Terminal, budgeted, deadline_input, with_deadlines

from ._common import (
    BenchState,
    Builder,
    Check,
    Section,
    Table,
    linear_graph,
    median,
    percentile,
)

__all__ = ["NODES", "run"]

NODES = 10
TARGET_RATIO = 1.10
TARGET_NO_DEADLINE_RATIO = 1.03
TARGET_SYNC_RATIO = 1.5
TIMEOUT = 60.0


async def _async_node(state: BenchState) -> dict[str, int]:
    return {"n": state["n"] + 1}


def _sync_node(state: BenchState) -> dict[str, int]:
    return {"n": state["n"] + 1}


def _fresh() -> dict[str, Any]:
    return {"n": 0}


def _verify(name: str, result: Any, *, trace: bool, outcome: bool) -> None:
    """Refuse to time a graph that does not do what the benchmark claims."""
    if not isinstance(result, Mapping) or result.get("n") != NODES:
        raise AssertionError(f"{name}: expected n == {NODES}, got {result!r}")
    records = result.get("deadline_trace") or []
    if len(records) != (NODES if trace else 0):
        raise AssertionError(f"{name}: unexpected step records {records!r}")
    ended = result.get("deadline_outcome")
    if outcome and not (isinstance(ended, Outcome) and ended.terminal is Terminal.COMPLETED):
        raise AssertionError(f"{name}: expected a completed outcome, got {ended!r}")


def _forward(inner: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """A `RunnableLambda` that only forwards to `inner`: the layer `with_deadlines` puts around
    each node, without any deadline logic."""

    def invoke(state: Any, config: RunnableConfig) -> Any:
        return inner.invoke(state, config)

    async def ainvoke(state: Any, config: RunnableConfig) -> Any:
        return await inner.ainvoke(state, config)

    return RunnableLambda(invoke, afunc=ainvoke, name=inner.get_name())


def _layered(builder: Builder) -> Builder:
    """`builder` with every node behind a forwarding `RunnableLambda`, as `with_deadlines` does."""
    layered = copy.copy(builder)
    layered.nodes = {}
    for name, spec in builder.nodes.items():
        if not isinstance(spec.runnable, Runnable):
            raise TypeError(f"node {name!r} is not a Runnable: {spec.runnable!r}")
        layered.nodes[name] = dataclasses.replace(spec, runnable=_forward(spec.runnable))
    return layered


def _timeout_policy(builder: Builder) -> Builder:
    """`builder` with LangGraph's own per-node timeout on every node (what users pick instead)."""
    for spec in builder.nodes.values():
        spec.timeout = TimeoutPolicy(run_timeout=TIMEOUT)
    return builder


def _rotated(names: list[str], i: int) -> list[str]:
    k = i % len(names)
    return names[k:] + names[:k]


async def _time_async(
    cases: Mapping[str, Callable[[], Awaitable[object]]], iterations: int, warmup: int
) -> dict[str, list[float]]:
    names = list(cases)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + iterations):
        for name in _rotated(names, i):
            call = cases[name]
            t0 = time.perf_counter_ns()
            await call()
            elapsed = time.perf_counter_ns() - t0
            if i >= warmup:
                samples[name].append(elapsed / 1000.0)
    return samples


def _time_sync(
    cases: Mapping[str, Callable[[], object]], iterations: int, warmup: int
) -> dict[str, list[float]]:
    names = list(cases)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + iterations):
        for name in _rotated(names, i):
            call = cases[name]
            t0 = time.perf_counter_ns()
            call()
            elapsed = time.perf_counter_ns() - t0
            if i >= warmup:
                samples[name].append(elapsed / 1000.0)
    return samples


def _thread_round_trip(iterations: int) -> float:
    """Median µs to start a thread in a copied context and wait for it: what `run_sync` does."""

    def round_trip() -> float:
        done = threading.Event()
        t0 = time.perf_counter_ns()
        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(done.set,), daemon=True).start()
        done.wait()
        return (time.perf_counter_ns() - t0) / 1000.0

    return median([round_trip() for _ in range(iterations)])


def _table(
    title: str, samples: dict[str, list[float]], labels: Mapping[str, str]
) -> tuple[Table, dict[str, float]]:
    base = median(samples["bare"])
    table = Table(title, ("variant", "median ms", "p90 ms", "ratio vs bare", "extra µs/node"))
    medians: dict[str, float] = {}
    for name, label in labels.items():
        values = samples[name]
        med = median(values)
        medians[name] = med
        table.add(
            label,
            f"{med / 1000.0:.3f}",
            f"{percentile(values, 90) / 1000.0:.3f}",
            f"{med / base:.2f}x",
            "-" if name == "bare" else f"{(med - base) / NODES:+.1f}",
        )
    return table, medians


def _async_section(iterations: int, warmup: int) -> tuple[Table, dict[str, float]]:
    builder = linear_graph(_async_node, NODES)
    bare = builder.compile()
    wrapped = with_deadlines(builder, timeout=TIMEOUT)
    no_deadline = with_deadlines(builder)
    layer = _layered(builder).compile()
    functions = linear_graph(budgeted(_async_node), NODES).compile()
    policy = _timeout_policy(linear_graph(_async_node, NODES)).compile()
    # One node each: with the ten-node runs, what a node costs apart from the run's own entry.
    bare_1 = linear_graph(_async_node, 1).compile()
    wrapped_1 = with_deadlines(linear_graph(_async_node, 1), timeout=TIMEOUT)
    policy_1 = _timeout_policy(linear_graph(_async_node, 1)).compile()

    def with_deadline_input() -> dict[str, Any]:
        return {**_fresh(), **deadline_input(TIMEOUT)}

    async def measure() -> dict[str, list[float]]:
        _verify("bare", await bare.ainvoke(_fresh()), trace=False, outcome=False)
        _verify("with_deadlines", await wrapped.ainvoke(_fresh()), trace=True, outcome=True)
        _verify("no deadline", await no_deadline.ainvoke(_fresh()), trace=False, outcome=True)
        _verify("layer", await layer.ainvoke(_fresh()), trace=False, outcome=False)
        _verify(
            "budgeted(fn)",
            await functions.ainvoke(with_deadline_input()),
            trace=True,
            outcome=False,
        )
        cases: dict[str, Callable[[], Awaitable[object]]] = {
            "bare": lambda: bare.ainvoke(_fresh()),
            "wrapped": lambda: wrapped.ainvoke(_fresh()),
            "no_deadline": lambda: no_deadline.ainvoke(_fresh()),
            "layer": lambda: layer.ainvoke(_fresh()),
            "functions": lambda: functions.ainvoke(with_deadline_input()),
            "policy": lambda: policy.ainvoke(_fresh()),
            "bare_1": lambda: bare_1.ainvoke(_fresh()),
            "wrapped_1": lambda: wrapped_1.ainvoke(_fresh()),
            "policy_1": lambda: policy_1.ainvoke(_fresh()),
        }
        return await _time_async(cases, iterations, warmup)

    gc.collect()
    samples = asyncio.run(measure())
    labels = {
        "bare": "bare: builder.compile().ainvoke",
        "wrapped": f"with_deadlines(builder, timeout={TIMEOUT:g}).ainvoke",
        "no_deadline": "ref: with_deadlines(builder).ainvoke, no deadline",
        "layer": "ref: bare + a forwarding RunnableLambda per node",
        "functions": "ref: add_node(budgeted(fn)) + deadline_input",
        "policy": f"alternative: LangGraph's TimeoutPolicy, add_node(..., timeout={TIMEOUT:g})",
    }
    table, medians = _table(
        f"Async overhead: {NODES}-node linear graph, trivial async nodes ({iterations} runs each)",
        samples,
        labels,
    )
    for name in ("bare_1", "wrapped_1", "policy_1"):
        medians[name] = median(samples[name])
    table.notes += [
        "ref rows split the cost. 'no deadline': every node wrapped; nothing bounds it, so it "
        "runs as bare (no plan, no timer, no record when it completes; it still answers the "
        "run's cancel signal). "
        "'forwarding RunnableLambda': only the Runnable layer with_deadlines puts around each "
        "node, no deadline logic. 'budgeted(fn)': the node function itself wrapped (no extra "
        "Runnable layer, no run-level backstop), deadline read from state. 'TimeoutPolicy': "
        "what a user would pick instead, LangGraph's own per-node timeout (one attempt of one "
        "node; no run deadline, no record).",
        "bare, with_deadlines and TimeoutPolicy also run a one-node graph in the same turns: "
        "with the ten-node runs they split each cost into what every node adds (the slope from "
        "one node to ten) and what a run adds once (its entry, its end); see the figures.",
    ]
    return table, medians


def _sync_section(iterations: int, warmup: int) -> tuple[Table, dict[str, float], float]:
    builder = linear_graph(_sync_node, NODES)
    bare = builder.compile()
    wrapped = with_deadlines(builder, timeout=TIMEOUT)
    no_deadline = with_deadlines(builder)
    layer = _layered(builder).compile()
    _verify("bare", bare.invoke(_fresh()), trace=False, outcome=False)
    _verify("with_deadlines", wrapped.invoke(_fresh()), trace=True, outcome=True)
    _verify("no deadline", no_deadline.invoke(_fresh()), trace=False, outcome=True)
    _verify("layer", layer.invoke(_fresh()), trace=False, outcome=False)
    cases: dict[str, Callable[[], object]] = {
        "bare": lambda: bare.invoke(_fresh()),
        "wrapped": lambda: wrapped.invoke(_fresh()),
        "no_deadline": lambda: no_deadline.invoke(_fresh()),
        "layer": lambda: layer.invoke(_fresh()),
    }
    gc.collect()
    samples = _time_sync(cases, iterations, warmup)
    thread_us = _thread_round_trip(max(200, iterations))
    labels = {
        "bare": "bare: builder.compile().invoke",
        "wrapped": f"with_deadlines(builder, timeout={TIMEOUT:g}).invoke",
        "no_deadline": "ref: with_deadlines(builder).invoke, no deadline (no thread)",
        "layer": "ref: bare + a forwarding RunnableLambda per node",
    }
    table, medians = _table(
        f"Sync overhead: {NODES}-node linear graph, trivial sync nodes ({iterations} runs each)",
        samples,
        labels,
    )
    table.notes.append(
        "under a deadline every sync node body runs on a worker thread (reused; a thread cannot "
        "be cancelled: the caller waits on it with a timeout and walks away when it overruns); "
        f"a bare thread start-and-wait round trip costs {thread_us:.0f} µs on this machine"
    )
    return table, medians, thread_us


def _per_node(medians: Mapping[str, float], name: str) -> float:
    return (medians[name] - medians["bare"]) / NODES


def _split(medians: Mapping[str, float], name: str) -> tuple[float, float]:
    """`name`'s cost above bare, split by the one-node runs beside the ten-node ones: µs per
    node (the slope from one node to ten) and µs per run (the rest: the run's own entry)."""
    one = medians[f"{name}_1"] - medians["bare_1"]
    node = (medians[name] - medians["bare"] - one) / (NODES - 1)
    return node, one - node


def run(*, quick: bool) -> Section:
    """Measure async and sync overhead; `quick` takes fewer samples."""
    async_iterations, sync_iterations, warmup = (150, 100, 20) if quick else (1000, 600, 50)
    section = Section()

    table, medians = _async_section(async_iterations, warmup)
    ratio = medians["wrapped"] / medians["bare"]
    wrapped, policy = _split(medians, "wrapped"), _split(medians, "policy")
    section.tables.append(table)
    section.figures += [
        ("async wall ratio, with_deadlines / bare", f"{ratio:.2f}x"),
        (
            "async wrapper cost per node",
            f"{_per_node(medians, 'wrapped'):.1f} µs, of which the Runnable layer alone "
            f"{_per_node(medians, 'layer'):.1f} µs",
        ),
        (
            "async cost split by 1- and 10-node runs, with_deadlines / TimeoutPolicy",
            f"per node {wrapped[0]:+.1f} / {policy[0]:+.1f} µs, "
            f"per run {wrapped[1]:+.1f} / {policy[1]:+.1f} µs",
        ),
    ]
    section.checks += [
        Check("async ainvoke wall ratio (with_deadlines / bare)", ratio, TARGET_RATIO, "x"),
        Check(
            "async ainvoke wall ratio with no deadline",
            medians["no_deadline"] / medians["bare"],
            TARGET_NO_DEADLINE_RATIO,
            "x",
        ),
    ]

    table, medians, thread_us = _sync_section(sync_iterations, warmup)
    section.tables.append(table)
    section.figures += [
        ("sync wall ratio, with_deadlines / bare", f"{medians['wrapped'] / medians['bare']:.2f}x"),
        (
            "sync wrapper cost per node",
            f"{_per_node(medians, 'wrapped'):.1f} µs, of which the thread "
            f"{(medians['wrapped'] - medians['no_deadline']) / NODES:.1f} µs "
            f"(bare thread round trip {thread_us:.0f} µs)",
        ),
    ]
    section.checks.append(
        Check(
            "sync invoke wall ratio (with_deadlines / bare)",
            medians["wrapped"] / medians["bare"],
            TARGET_SYNC_RATIO,
            "x",
        )
    )
    return section
