"""RemoteGraph against a real LangGraph dev server (`langgraph dev`, in-memory, offline): the
deadline goes along in the input's `deadline` field and in the request headers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.pregel.remote import RemoteGraph
from langgraph_sdk.client import LangGraphClient

from langgraph_deadline import DeadlineState, Terminal, with_deadlines
from langgraph_deadline.http import deadline_hooks
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

from .langgraph_dev import ROOT, langgraph_dev

CONFIG = ROOT / "examples" / "across_services" / "langgraph.json"
SERVER_RESERVE = 0.2  # examples.across_services.retriever.make_graph
LATE = 0.4


@pytest.fixture(scope="module")
def search() -> Iterator[SlowServer]:
    with SlowServer() as server:
        yield server


@pytest.fixture(scope="module")
def dev_server(search: SlowServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`langgraph dev` on a free loopback port, serving the retriever graph of the example."""
    workdir = tmp_path_factory.mktemp("langgraph-dev")  # it writes .langgraph_api/ here
    with langgraph_dev(CONFIG, workdir, {"SEARCH_URL": search.url("/slow?delay=10")}) as url:
        yield url


class State(DeadlineState, total=False):
    query: str
    documents: list[str]


def _planner(url: str, timeout: float) -> Any:
    """A local graph whose one node is the remote retriever, reached through the hooks."""
    http = httpx.AsyncClient(base_url=url, event_hooks=deadline_hooks(), timeout=30.0)
    remote = RemoteGraph("retriever", client=LangGraphClient(http), name="retriever")
    builder = StateGraph(State)
    builder.add_node("retriever", remote)
    builder.add_edge(START, "retriever")
    builder.add_edge("retriever", END)
    return with_deadlines(builder, timeout=timeout)


@pytest.mark.anyio
async def test_remote_graph_on_langgraph_server_stops_at_the_callers_deadline(
    dev_server: str, search: SlowServer
) -> None:
    search.requests.clear()
    graph = _planner(dev_server, timeout=3.0)
    t0 = time.monotonic()
    out = await graph.ainvoke({"query": "late order"})
    took = time.monotonic() - t0

    # The run on the server ended deadline_exceeded in its own step, in time for the answer
    # to come back before the caller's deadline.
    outcome = out["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert outcome.step == "search"
    assert 3.0 - SERVER_RESERVE - 0.1 < took < 3.0 + LATE
    cut = [r for r in out["deadline_trace"] if r.name == "search"]
    assert cut
    assert cut[-1].status is StepStatus.TIMED_OUT

    # The server-side search request was cancelled: the search service saw the socket close.
    assert search.wait_disconnected(2.0)
    (request,) = search.requests
    # It ran under the caller's deadline, from the input's `deadline` field (less the server
    # graph's reserve) ...
    sent_deadline = int(request.headers["x-request-deadline"]) / 1000
    assert abs(sent_deadline - (out["deadline"] - SERVER_RESERVE)) < 0.05
    # ... and the caller's headers reached the server's graph too (in its config).
    assert 0 < int(request.query["caller_timeout_ms"]) <= 3000
