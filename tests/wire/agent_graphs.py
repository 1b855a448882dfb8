"""The graphs `tests/wire/test_agent_server.py` serves on the Agent Server's worker processes.

Each run tells the slow service which process runs it (`pid` in its query), and each node that
finishes writes it to the state: the tests see which worker ran what, even of a run that was cut.
`SLOW_URL` names the slow service (a `SlowServer`)."""

from __future__ import annotations

import operator
import os
from typing import Annotated, Any

import httpx
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.types import DeadlineGraph

__all__ = ["FLUSH_SECONDS", "LEARNED_FROM", "NAMESPACE", "RESERVE", "make_approve", "make_search"]

RESERVE = 0.2
FLUSH_SECONDS = 1.0  # the shared latency book's (`agent_book.py`)
NAMESPACE = ("tests", "latency")  # where it keeps its sketches in the server's store
LEARNED_FROM = 12  # the samples it needs before it caps a step


class Search(DeadlineState, total=False):
    query: str
    delay: float  # how long the slow service takes to answer
    workers: Annotated[list[int], operator.add]  # the processes that ran a node, in order
    approved: bool
    documents: list[str]


async def search(state: Search) -> dict[str, Any]:
    """One GET under the run's deadline: the hooks send the time left and cut the timeouts."""
    params = {"q": state["query"], "delay": str(state.get("delay", 0.0)), "pid": os.getpid()}
    async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:
        response = await client.get(os.environ["SLOW_URL"], params=params)
    return {"documents": [response.text], "workers": [os.getpid()]}


def ask(state: Search) -> dict[str, Any]:
    """Stops the run for a human's approval (a node re-runs from its top when resumed)."""
    return {"approved": bool(interrupt({"query": state["query"], "pid": os.getpid()}))}


def make_search() -> DeadlineGraph:
    """At most 30 s per run, 0.2 s of it kept to answer; up to 10 s of queue time counted."""
    builder = StateGraph(Search).add_node("search", search).add_edge(START, "search")
    return with_deadlines(builder, timeout=30.0, reserve=RESERVE, queue_time=10.0)


def make_approve() -> DeadlineGraph:
    """Approval first, then the search: the run pauses between its two nodes."""
    builder = StateGraph(Search).add_node("ask", ask).add_node("search", search)
    builder.add_edge(START, "ask").add_edge("ask", "search")
    return with_deadlines(builder, timeout=30.0, reserve=RESERVE, queue_time=10.0)
