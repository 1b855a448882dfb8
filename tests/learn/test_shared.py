"""One book for many workers: sketches merged through a LangGraph store (in memory, PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.store.memory import InMemoryStore

from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline.learn import LatencyBook

ROOT = Path(__file__).resolve().parents[2]


def test_a_new_book_reads_back_what_another_flushed() -> None:
    store = InMemoryStore()
    first = LatencyBook(store=store, listen=False)
    for _ in range(30):
        first.record("tool", "search", 0.1)
    first.flush()
    second = LatencyBook(store=store, listen=False)
    second.record("tool", "search", 0.8, censored=True)
    assert second.count("search", "tool") == 31
    sketch = second.sketch("search", "tool")
    assert (sketch.finished, sketch.censored) == (30, 1)
    assert first.sketch("search", "tool").count == 30  # first has not read second's yet
    second.flush()
    first.flush()
    assert first.sketch("search", "tool").count == 31


def test_a_flush_starts_by_itself_every_n_samples_off_the_recording_thread() -> None:
    store = InMemoryStore()
    book = LatencyBook(store=store, listen=False, flush_every=10, flush_seconds=3600)
    for _ in range(10):
        book.record("tool", "search", 0.1)
    end = time.monotonic() + 5
    while not store.search(("langgraph_deadline", "latency")) and time.monotonic() < end:
        time.sleep(0.01)
    assert LatencyBook(store=store, listen=False).count("search", "tool") == 10


def test_an_idle_book_reads_what_another_learned_within_its_flush_interval() -> None:
    store = InMemoryStore()
    idle = LatencyBook(store=store, listen=False, flush_seconds=0.2)
    busy = LatencyBook(store=store, listen=False, flush_seconds=0.2)
    for _ in range(24):  # fewer than flush_every, within flush_seconds: no flush by the count
        busy.record("tool", "search", 0.1)
    # Nobody flushes by hand and the idle book records nothing: the books' timers do it.
    end = time.monotonic() + 5
    while idle.count("search", "tool") < 24 and time.monotonic() < end:
        time.sleep(0.02)
    assert idle.count("search", "tool") == 24
    assert idle.sketch("search", "tool").finished == 24


def test_books_that_hear_the_same_process_count_its_samples_once() -> None:
    class Query(DeadlineState, total=False):
        q: str

    def search(state: Query) -> dict[str, Any]:
        return {}

    store = InMemoryStore()
    # A graph module LangGraph Server runs once per graph it names makes its book five times.
    books = [LatencyBook(store=store, flush_seconds=3600) for _ in range(5)]
    builder = StateGraph(Query).add_node("search", search).add_edge(START, "search")
    graph = with_deadlines(builder, timeout=5.0)
    for _ in range(20):
        graph.invoke({"q": "boots"})
    for book in books:
        book.flush()
    assert books[0].count("search", "node") == 20
    other_process = LatencyBook(store=store, listen=False)
    assert other_process.count("search", "node") == 20  # not 100
    assert len(store.search(("langgraph_deadline", "latency"))) == 1


def test_a_store_that_fails_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(InMemoryStore):
        def put(self, *args: object, **kwargs: object) -> None:
            raise OSError("down")

    book = LatencyBook(store=Broken(), listen=False)
    book.record("tool", "search", 0.1)
    book.flush()
    assert "could not be reached" in caplog.text


def test_a_store_or_namespace_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="store"):
        LatencyBook(store=object())
    with pytest.raises(ValueError, match="namespace"):
        LatencyBook(store=InMemoryStore(), namespace=("a.b",))


WORKER = textwrap.dedent(
    """
    import sys
    from langgraph.store.postgres import PostgresStore
    from langgraph_deadline.learn import LatencyBook

    url, seconds, censored = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "cut"
    with PostgresStore.from_conn_string(url) as store:
        book = LatencyBook(store=store, listen=False)
        for _ in range(100):
            book.record("tool", "search", seconds, censored=censored)
        book.flush()
        print(book.count("search", "tool"))
    """
)


def test_two_processes_share_one_postgres_backed_book(postgres: str) -> None:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(postgres) as store:
        store.setup()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def worker(seconds: float, how: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", WORKER, postgres, str(seconds), how],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return int(done.stdout.strip())

    assert worker(0.1, "done") == 100  # the first worker: its own samples
    assert worker(0.8, "cut") == 200  # the second read the first's back on start
    with PostgresStore.from_conn_string(postgres) as store:
        sketch = LatencyBook(store=store, listen=False).sketch("search", "tool")
    assert (sketch.finished, sketch.censored) == (100, 100)
    p90 = sketch.quantile(0.9)
    assert p90 is not None and p90.at_least and p90.seconds == pytest.approx(0.8, rel=0.02)
