"""The latency book hears step records by kind and name; censored for cut steps."""

from __future__ import annotations

import gc

from langgraph_deadline import StepRecord
from langgraph_deadline._core.record import commit_record
from langgraph_deadline.instrument import set_observers
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.types import StepStatus


def _record(status: StepStatus, elapsed_ms: float, name: str = "search") -> StepRecord:
    return StepRecord(
        name=name,
        kind="tool",
        attempt=1,
        remaining_ms=None,
        requested_ms=None,
        allocated_ms=None,
        clamped=False,
        elapsed_ms=elapsed_ms,
        status=status,
    )


def test_finished_steps_are_samples_and_cut_ones_are_censored() -> None:
    book = LatencyBook(listen=False)
    book.add(_record(StepStatus.COMPLETED, 100.0))
    book.add(_record(StepStatus.TIMED_OUT, 800.0))
    book.add(_record(StepStatus.ABANDONED, 800.0))
    book.add(_record(StepStatus.STALE, 800.0))
    for ignored in (StepStatus.SKIPPED, StepStatus.FAILED, StepStatus.CANCELLED):
        book.add(_record(ignored, 5.0))
    sketch = book.sketch("search", "tool")
    assert (sketch.finished, sketch.censored) == (1, 3)
    assert book.count("search", "tool") == 4
    assert book.count("search", "node") == 0


def test_a_book_hears_every_step_even_with_instrumentation_off() -> None:
    book = LatencyBook()
    set_observers([])
    try:
        commit_record(_record(StepStatus.COMPLETED, 50.0, name="heard"), None)
    finally:
        set_observers(None)
        book.detach()
    assert book.count("heard", "tool") == 1


def test_a_book_nobody_keeps_stops_listening() -> None:
    from langgraph_deadline._core import observe

    book = LatencyBook()
    assert any(ref() is book for ref in observe._listeners)
    listening = len(observe._listeners)
    del book
    gc.collect()
    assert len(observe._listeners) == listening - 1
    assert all(ref() is not None for ref in observe._listeners)


def test_a_key_holds_at_most_64_kib_and_keys_are_bounded() -> None:
    book = LatencyBook(listen=False, max_keys=2)
    assert book.bytes_per_key() <= 64 * 1024
    for name in ("a", "b", "c"):
        book.record("tool", name, 0.1)
    assert [name for _, name in book.names()] == ["a", "b"]


def test_books_merge() -> None:
    one, two = LatencyBook(listen=False), LatencyBook(listen=False)
    one.record("tool", "t", 0.1)
    two.record("tool", "t", 0.2, censored=True)
    one.merge(two)
    assert one.sketch("t", "tool").count == 2
    assert one.sketch("t").censored == 1
