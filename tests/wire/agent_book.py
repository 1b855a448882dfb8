"""A served graph whose search cap is learned by one `LatencyBook` shared by every worker
process, through a `PostgresStore` on the server's own database (`DATABASE_URI`), written as
docs/howto/learned-budgets.md#in-a-served-graph says. `langgraph.json` names two graphs from this
module, so LangGraph Server runs it twice in each worker: two books per process, one entry."""

from __future__ import annotations

import os

from langgraph.graph import START, StateGraph
from langgraph.store.postgres import PostgresStore
from psycopg import Connection
from psycopg.rows import dict_row

from langgraph_deadline import with_deadlines
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.types import DeadlineGraph

from .agent_graphs import FLUSH_SECONDS, LEARNED_FROM, NAMESPACE, Search, search

__all__ = ["book", "make_learn"]

conn = Connection.connect(
    os.environ["DATABASE_URI"], autocommit=True, prepare_threshold=0, row_factory=dict_row
)
store = PostgresStore(conn)
store.setup()  # once per database; harmless when done
book = LatencyBook(store=store, namespace=NAMESPACE, flush_seconds=FLUSH_SECONDS)
lookup_cap = learned(book, min_samples=LEARNED_FROM, headroom=3.0, cap=5.0)


def make_learn() -> DeadlineGraph:
    """The search as step `lookup` (a name of its own in the book: the book hears every graph
    of the process), capped at 3 x its learned p99 once `LEARNED_FROM` samples are in (5 s
    until then)."""
    builder = StateGraph(Search).add_node("lookup", search).add_edge(START, "lookup")
    return with_deadlines(builder, timeout=30.0, caps={"lookup": lookup_cap}, default_cap=5.0)
