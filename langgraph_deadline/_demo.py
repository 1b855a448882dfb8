"""The demo: the same real multi-hop graph run twice against a slow loopback service, once with
naive per-step timeouts and once with one deadline, side by side."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
from langgraph.graph import END, START, StateGraph

from ._graph import with_deadlines
from ._records import Terminal
from ._state import DeadlineState
from .testing import SlowServer

__all__ = ["run_demo"]

STEP_TIMEOUT = 2.0  # what a team typically puts on every step
RETRIES = 1


class DemoState(DeadlineState, total=False):
    question: str
    plan: str
    docs: list[str]
    answer: str


@dataclass
class Row:
    label: str
    budget: float
    wall: float
    terminal: str
    open_after_deadline: int
    requests: int
    steps_after_deadline: int


def _build(server: SlowServer, *, naive: bool, started: list[tuple[str, float]]) -> Any:
    """planner -> retrieve (a slow search service) -> answer."""

    def step(name: str) -> None:
        started.append((name, time.monotonic()))

    async def guarded(coro: Any) -> Any:
        # The naive pattern: a fresh per-step timeout, and a retry that refreshes it.
        for attempt in range(RETRIES + 1):
            try:
                return await asyncio.wait_for(coro(), STEP_TIMEOUT)
            except TimeoutError:
                if attempt == RETRIES:
                    return None
        return None

    async def planner(state: DemoState) -> dict[str, Any]:
        step("planner")
        await asyncio.sleep(0.2)
        return {"plan": f"search for {state['question']!r}"}

    async def retrieve(state: DemoState) -> dict[str, Any]:
        step("retrieve")

        async def call() -> str:
            async with httpx.AsyncClient(timeout=None) as client:
                r = await client.get(server.url("/slow?delay=6&service=search"))
                return r.text

        doc = await guarded(call) if naive else await call()
        return {"docs": [doc or "(search timed out)"]}

    async def answer(state: DemoState) -> dict[str, Any]:
        step("answer")
        await asyncio.sleep(0.2)
        return {"answer": f"answer from {len(state.get('docs', []))} document(s)"}

    b = StateGraph(DemoState)
    b.add_node("planner", planner)
    b.add_node("retrieve", retrieve)
    b.add_node("answer", answer)
    b.add_edge(START, "planner")
    b.add_edge("planner", "retrieve")
    b.add_edge("retrieve", "answer")
    b.add_edge("answer", END)
    return b


async def _one(label: str, budget: float, *, naive: bool) -> Row:
    started: list[tuple[str, float]] = []
    with SlowServer() as server:
        builder = _build(server, naive=naive, started=started)
        graph = builder.compile() if naive else with_deadlines(builder, timeout=budget)
        t0 = time.monotonic()
        deadline = t0 + budget
        out = await graph.ainvoke({"question": "why was the order late?"})
        wall = time.monotonic() - t0
        await asyncio.sleep(0.05)  # let the server notice closed connections
        outcome = out.get("deadline_outcome")
        if naive:
            terminal = "completed (late)" if wall > budget else "completed"
        else:
            terminal = str(outcome.terminal if outcome else Terminal.COMPLETED)
        open_after = sum(
            1
            for r in server.requests
            if (r.disconnected or r.answered or time.monotonic()) > deadline + 0.05
        )
        return Row(
            label=label,
            budget=budget,
            wall=wall,
            terminal=terminal,
            open_after_deadline=open_after,
            requests=len(server.requests),
            steps_after_deadline=sum(1 for _, t in started if t > deadline),
        )


def _table(rows: list[Row]) -> str:
    head = (
        "run",
        "budget s",
        "wall s",
        "terminal",
        "requests",
        "HTTP requests alive past deadline",
        "steps started past deadline",
    )
    cells = [
        (
            r.label,
            f"{r.budget:.1f}",
            f"{r.wall:.2f}",
            r.terminal,
            str(r.requests),
            str(r.open_after_deadline),
            str(r.steps_after_deadline),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, sep, *body])


def run_demo(budget: float = 1.5) -> str:
    """Run both variants and return the side-by-side table."""

    async def both() -> list[Row]:
        naive = await _one(
            f"naive: {STEP_TIMEOUT:.0f}s per step + {RETRIES} retry", budget, naive=True
        )
        ours = await _one("langgraph-deadline", budget, naive=False)
        return [naive, ours]

    return _table(asyncio.run(both()))
