"""A run LangGraph re-enters after its deadline: a served run whose worker died mid-node is
re-queued by the Agent Server and run again with the same input and run id; LangGraph takes it
for a resume of the pending node. Once the deadline has passed the node is refused, and the run
ends `deadline_exceeded` like any run that ran out, its outcome in its thread, its deadline the
one it had (`tests/wire/test_agent_server.py` kills a real worker)."""

from __future__ import annotations

import copy
import time
from typing import Any

import anyio
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, with_deadlines

from .test_late_start import ENTRIES, _run

RUN_ID = "1f0c2a3e-0000-4000-8000-000000000036"


class Job(DeadlineState, total=False):
    query: str
    answer: str


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["values", "updates"])
@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_run_reentered_after_its_deadline_ends_deadline_exceeded_in_its_thread(
    entry: str, mode: str
) -> None:
    saver = InMemorySaver()
    left: list[Any] = []
    ran: list[str] = []

    def work(state: Job) -> dict[str, Any]:
        ran.append(state["query"])
        # The worker dies here: what it leaves is the checkpoint with this node pending.
        left.append(copy.deepcopy((saver.storage, saver.writes, saver.blobs)))
        raise RuntimeError("the worker process died")

    graph = with_deadlines(
        StateGraph(Job).add_node("work", work).add_edge(START, "work"), checkpointer=saver
    )
    # The server's config: the run id in the metadata, as LangGraph keeps it in the checkpoint.
    cfg: Any = {"configurable": {"thread_id": "t"}, "metadata": {"run_id": RUN_ID}}
    # Time enough to reach the node on a loaded machine (0.3 s was not: the node was refused).
    job = {"query": "late orders", "deadline": time.time() + 1.5}
    with pytest.raises(RuntimeError):
        graph.invoke(job, cfg)
    saver.storage, saver.writes, saver.blobs = left[0]
    # The deadline passes while the dead worker's run waits to be re-queued.
    await anyio.sleep(max(0.0, job["deadline"] - time.time()) + 0.1)

    got = await _run(graph, entry, job, cfg, mode)  # the same input, the same run id

    assert ran == ["late orders"]  # not run again
    if entry.endswith("invoke") or mode == "values":
        assert got[-1]["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    else:
        assert got[-1]["deadline"]["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    snapshot = await graph.aget_state(cfg)
    assert snapshot.values["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert snapshot.values["deadline"] == job["deadline"]  # not a fresh budget
    assert snapshot.next == ("work",)  # pending: a resume that grants time runs it
