"""A cut that lands in a PostgreSQL query, with psycopg (LangGraph's Postgres checkpointer and
store use it): the query is cancelled in the server and the connection stays usable.

psycopg answers a cancellation by cancelling the query in the server and waiting for it to end,
without a shield; cancelled again meanwhile, it closes the connection for good ("query
cancellation interrupted"). A worker with one connection (`AsyncPostgresSaver.from_conn_string`)
then lost every later checkpoint: seen in CI, where a run's own deadline cut the checkpoint read
that writes the run's outcome."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, StateGraph

from langgraph_deadline import DeadlineState, Terminal, with_deadlines

pytestmark = pytest.mark.anyio
MARGIN = 0.5


class Lookup(DeadlineState, total=False):
    query: str
    rows: Sequence[Any]


@pytest.fixture
async def saver(postgres: str) -> AsyncIterator[AsyncPostgresSaver]:
    async with AsyncPostgresSaver.from_conn_string(postgres) as saver:
        await saver.setup()
        yield saver


def _closed_by_psycopg(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]


async def test_a_node_cut_in_a_query_leaves_its_connection_usable(
    postgres: str, saver: AsyncPostgresSaver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:

        async def lookup(state: Lookup) -> dict[str, Any]:
            cur = await conn.execute("select pg_sleep(10)")  # a query slower than the budget
            return {"rows": await cur.fetchall()}

        builder = StateGraph(Lookup)
        builder.add_node("lookup", lookup)
        builder.add_edge(START, "lookup")
        graph = with_deadlines(builder, timeout=0.4, checkpointer=saver)
        cfg: RunnableConfig = {"configurable": {"thread_id": "cut-in-a-query"}}

        t0 = time.monotonic()
        out = await graph.ainvoke({"query": "late"}, cfg)
        assert time.monotonic() - t0 < 0.4 + MARGIN
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert _closed_by_psycopg(caplog) == []
        assert not conn.closed
        assert await (await conn.execute("select 1")).fetchone() == (1,)
        # the query was cancelled in the server, not left running there
        cur = await conn.execute(
            "select count(*) from pg_stat_activity where query = 'select pg_sleep(10)'"
            " and state = 'active'"
        )
        assert await cur.fetchone() == (0,)
    saved = (await graph.aget_state(cfg)).values
    assert saved["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


class _SlowReads(AsyncPostgresSaver):
    """The real saver, whose reads take `slow` s once set (a database under load); `cut`
    counts the reads cancelled on the way."""

    slow = 0.0
    cut = 0

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            if self.slow:
                async with self._cursor() as cur:
                    await cur.execute("select pg_sleep(%s)", (self.slow,))
            return await super().aget_tuple(config)
        except asyncio.CancelledError:
            self.cut += 1
            raise


async def test_the_runs_deadline_does_not_cut_the_writing_of_its_own_end(
    postgres: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with _SlowReads.from_conn_string(postgres) as saver:
        await saver.setup()

        async def search(state: Lookup) -> dict[str, Any]:
            saver.slow = 0.5  # from here on: the run ends while the database is slow
            await anyio_sleep_forever()
            return {}

        builder = StateGraph(Lookup)
        builder.add_node("search", search)
        builder.add_edge(START, "search")
        # the node ends at 0.2 s (0.4 s kept back), the run's own deadline comes at 0.6 s: in
        # the middle of reading the checkpoint to write the outcome into it
        graph = with_deadlines(builder, timeout=0.6, reserve=0.4, checkpointer=saver)
        cfg: RunnableConfig = {"configurable": {"thread_id": "end-written"}}

        out = await graph.ainvoke({"query": "late"}, cfg)
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert _closed_by_psycopg(caplog) == []
        assert saver.cut == 0  # the run's end was read and written whole, once
        saver.slow = 0.0
        saved = (await graph.aget_state(cfg)).values
        assert saved["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert [r.name for r in saved["deadline_trace"]] == ["search"]


async def anyio_sleep_forever() -> None:
    import anyio

    await anyio.sleep_forever()
