"""Shared pieces: the benchmark state, a linear graph builder, statistics and result tables."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from langgraph.graph import END, START, StateGraph

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

    from langgraph_deadline.testing import FakeOpenAIServer

from langgraph_deadline import DeadlineState

__all__ = [
    "BenchState",
    "Builder",
    "Check",
    "chain_graph",
    "GcMeter",
    "Section",
    "Table",
    "linear_graph",
    "machine",
    "median",
    "percentile",
]


class BenchState(DeadlineState):
    """The state of every benchmark graph: one counter, plus the deadline fields."""

    n: int


Builder = StateGraph[Any, Any, Any, Any]


def linear_graph(node: Callable[..., Any], length: int) -> Builder:
    """START -> n0 -> n1 -> ... -> n{length-1} -> END, every node running `node`."""
    return chain_graph([node] * length)


def chain_graph(nodes: Sequence[Callable[..., Any]]) -> Builder:
    """START -> n0 -> n1 -> ... -> END, node `n{i}` running `nodes[i]`."""
    builder: Builder = StateGraph(BenchState)
    previous = START
    for i, node in enumerate(nodes):
        name = f"n{i}"
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


# -- statistics -----------------------------------------------------------------------------------


def streaming_chat(server: FakeOpenAIServer, model: str) -> ChatOpenAI:
    """A real `ChatOpenAI` that streams from the local fake server, with no SDK retries."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(
        base_url=server.base_url,
        api_key=SecretStr("test"),
        model=model,
        streaming=True,
        max_retries=0,
    )


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], p: float) -> float:
    """The `p`-th percentile (0-100), interpolated between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class GcMeter:
    """What the cyclic garbage collector took while the block ran (`gc.callbacks`): its
    collections, the full ones (generation 2) among them, and the CPU seconds they took (process
    time: on a loaded machine the wall time of a collection also counts the other processes)."""

    __slots__ = ("_started", "collections", "full", "seconds")

    def __init__(self) -> None:
        self.collections = 0
        self.full = 0
        self.seconds = 0.0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        self.collections += 1
        self.full += info["generation"] == 2
        self.seconds += time.process_time() - self._started

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def text(self) -> str:
        return f"{self.collections} ({self.full} full), {self.seconds * 1000:.0f} ms"


# -- results --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """A measured figure against its target."""

    name: str
    value: float
    target: float
    unit: str

    @property
    def ok(self) -> bool:
        return self.value <= self.target

    def render(self) -> str:
        verdict = "ok  " if self.ok else "MISS"
        target = f"{self.target:g}{self.unit}"
        return f"[{verdict}] {self.name}: {self.value:.3g}{self.unit} (target <= {target})"


@dataclasses.dataclass(slots=True)
class Table:
    """Rows of figures, rendered as aligned text or as a Markdown table."""

    title: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def add(self, *cells: str) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"expected {len(self.headers)} cells, got {len(cells)}")
        self.rows.append(cells)

    def text(self) -> str:
        widths = [
            max(len(r[i]) for r in (self.headers, *self.rows)) for i in range(len(self.headers))
        ]

        def line(cells: tuple[str, ...]) -> str:
            first = cells[0].ljust(widths[0])
            rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
            return "  ".join((first, *rest)).rstrip()

        out = [self.title, "-" * len(self.title), line(self.headers)]
        out += [line(r) for r in self.rows]
        out += [f"  * {n}" for n in self.notes]
        return "\n".join(out)

    def markdown(self) -> str:
        out = [f"### {self.title}", ""]
        out.append("| " + " | ".join(self.headers) + " |")
        numeric = [all(_numeric(r[i]) for r in self.rows) for i in range(len(self.headers))]
        out.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out)


def _numeric(cell: str) -> bool:
    return cell[:1].isdigit() or cell[:1] in "+-"


@dataclasses.dataclass(slots=True)
class Section:
    """What one benchmark module reports: its tables, its headline figures, its checks."""

    tables: list[Table] = dataclasses.field(default_factory=list)
    figures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    checks: list[Check] = dataclasses.field(default_factory=list)


def machine() -> str:
    """One line naming this machine and the versions that matter to the figures."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = []
    for dist in ("langgraph", "langchain-core", "anyio"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return (
        f"{platform.system()} {platform.machine()}, {cpus} cores, "
        f"Python {platform.python_version()}, " + ", ".join(versions)
    )
