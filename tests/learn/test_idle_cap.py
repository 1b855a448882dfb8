"""`learned(book).idle_cap`: an idle cap from the longest gaps of a step's streams, never raised
by the stalls it cut (their gaps are censored), never above the user's cap, None while cold."""

from __future__ import annotations

import pytest

from langgraph_deadline._learn.book import GAP
from langgraph_deadline._learn.policy import IDLE_HEADROOM
from langgraph_deadline.learn import LatencyBook, learned


def test_cold_it_gives_none_so_the_step_is_only_watched() -> None:
    book = LatencyBook(listen=False)
    for _ in range(49):
        book.record(GAP, "writer", 0.05)
    assert learned(book, min_samples=50).idle_cap("model", "writer") is None


def test_warm_it_is_the_headroom_times_the_quantile() -> None:
    book = LatencyBook(listen=False)
    for _ in range(100):
        book.record(GAP, "writer", 0.05)
    cap = learned(book, headroom=1.5).idle_cap("model", "writer")
    assert cap == pytest.approx(0.05 * 1.5 * IDLE_HEADROOM, rel=0.1)


def test_stalls_cut_at_the_cap_do_not_raise_it() -> None:
    book = LatencyBook(listen=False)
    for _ in range(95):
        book.record(GAP, "writer", 0.05)
    rule = learned(book)
    first = rule.idle_cap("model", "writer")
    assert first is not None
    for _ in range(5 * 4):  # 5 % of streams stall, again and again, each cut at the cap
        book.record(GAP, "writer", first, censored=True)
        book.record(GAP, "writer", 0.05)  # (and healthy ones go on)
    assert rule.idle_cap("model", "writer") == pytest.approx(first, rel=0.1)


def test_it_is_never_above_the_users_cap() -> None:
    book = LatencyBook(listen=False)
    for _ in range(60):
        book.record(GAP, "writer", 4.0)
    assert learned(book, cap=2.0).idle_cap("model", "writer") == 2.0
