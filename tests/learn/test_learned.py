"""Learned caps and min_viable: bounded by the user's, cold books fall back, real cuts."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import (
    DeadlineState,
    StepRecord,
    Terminal,
    budgeted,
    deadline_scope,
    deadline_tool,
    deadline_tools,
    with_deadlines,
)
from langgraph_deadline._core.plan import Step
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus

MARGIN = 0.25


def _book(name: str, finished: list[float], censored: list[float] = (), kind: str = "tool") -> Any:
    book = LatencyBook(listen=False)
    for s in finished:
        book.record(kind, name, s)
    for s in censored:
        book.record(kind, name, s, censored=True)
    return book


# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"quantile": 0.0}, ValueError, "quantile"),
        ({"quantile": 1.0}, ValueError, "quantile"),
        ({"quantile": "0.9"}, TypeError, "quantile"),
        ({"headroom": 0.9}, ValueError, "headroom"),
        ({"headroom": float("nan")}, ValueError, "headroom"),
        ({"min_samples": -1}, ValueError, "min_samples"),
        ({"min_samples": 2.5}, TypeError, "min_samples"),
        ({"p_viable": 1.5}, ValueError, "p_viable"),
        ({"cap": -1.0}, ValueError, "cap"),
        ({"cap": 1.0, "min_viable": 2.0}, ValueError, "min_viable"),
        ({"then": "answer"}, TypeError, "then"),
    ],
)
def test_bad_settings_fail_at_construction_naming_the_argument(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        learned(LatencyBook(listen=False), **kwargs)


def test_a_book_that_is_not_a_book_is_refused() -> None:
    with pytest.raises(TypeError, match="book must be a LatencyBook"):
        learned({"search": 1.0})  # type: ignore[arg-type]


# -- numbers ----------------------------------------------------------------------------------


def test_a_cold_book_falls_back_to_the_users_numbers() -> None:
    rule = learned(_book("search", [0.1] * 49), min_samples=50, cap=5.0, min_viable=0.2)
    assert rule.cap("tool", "search") == 5.0
    assert rule.min_viable("tool", "search") == 0.2
    assert learned(LatencyBook(listen=False)).cap("tool", "search") is None


def test_a_warm_book_gives_headroom_times_the_quantile() -> None:
    rule = learned(_book("search", [0.1] * 50), min_samples=50, headroom=2.0, cap=5.0)
    assert rule.cap("tool", "search") == pytest.approx(0.2, rel=0.02)


@settings(max_examples=50)
@given(
    st.lists(st.floats(min_value=1e-4, max_value=100.0), min_size=1, max_size=80),
    st.lists(st.floats(min_value=1e-4, max_value=100.0), max_size=40),
    st.floats(min_value=1e-3, max_value=50.0),
    st.floats(min_value=1.0, max_value=10.0),
)
def test_a_learned_cap_never_exceeds_the_users_cap(
    finished: list[float], censored: list[float], cap: float, headroom: float
) -> None:
    rule = learned(_book("t", finished, censored), min_samples=1, headroom=headroom, cap=cap)
    got = rule.cap("tool", "t")
    assert got is not None and got <= cap
    assert rule.bounded(cap / 2).cap("tool", "t") <= cap / 2  # type: ignore[operator]


def test_censored_samples_raise_the_learned_cap() -> None:
    fast = learned(_book("t", [0.1] * 90), min_samples=10, quantile=0.95, cap=10.0)
    cut = learned(_book("t", [0.1] * 90, [0.8] * 10), min_samples=10, quantile=0.95, cap=10.0)
    assert cut.cap("tool", "t") > 5 * fast.cap("tool", "t")  # type: ignore[operator]


def test_a_learned_min_viable_refuses_a_step_unlikely_to_finish_and_says_so() -> None:
    book = _book("search", [0.5] * 97 + [0.05] * 3)
    rule = learned(book, min_samples=50, p_viable=0.05, cap=5.0)
    with deadline_scope(0.4):
        plan = Step("search", "tool", rule, rule).plan()
    assert plan.skip
    record = plan.record(StepStatus.SKIPPED)
    assert record.note is not None and "p(finish in 0.39 s) = 0.03" in record.note
    assert "100 samples" in record.ran_out_reason()
    with deadline_scope(2.0):
        assert not Step("search", "tool", rule, rule).plan().skip


def test_a_step_given_its_whole_cap_is_never_refused() -> None:
    rule = learned(_book("search", [2.0] * 60), min_samples=50, cap=1.0)
    with deadline_scope(5.0):
        plan = Step("search", "tool", rule, rule).plan()
    assert plan.budget == 1.0 and not plan.skip


def test_then_keeps_back_the_time_of_the_steps_that_follow_when_it_fits() -> None:
    book = _book("search", [1.5] * 60)  # learned cap: 1.5 x 1.5 s
    for _ in range(60):
        book.record("node", "answer", 1.0)
    rule = learned(book, min_samples=50, quantile=0.9, then=["answer"])
    with deadline_scope(3.0):
        held = Step("search", "tool", rule).plan()
    assert held.budget == pytest.approx(2.0, abs=0.05)  # 3 s less the answer's 1 s
    # the time kept back is the step's own limit, not the deadline's: cut there like at a cap
    assert held.held == pytest.approx(1.0, abs=0.05) and not held.clamped
    assert held.note is not None and held.note.endswith(" s for answer")
    with deadline_scope(2.0):  # 2 - 1 leaves search less than its median: nothing kept back
        kept = Step("search", "tool", rule).plan()
    assert kept.budget == pytest.approx(2.0, abs=0.05)
    assert kept.held == 0.0 and kept.clamped and kept.note is None  # the deadline set it
    alone = learned(book, min_samples=50, quantile=0.9)
    with deadline_scope(3.0):
        assert Step("search", "tool", alone).plan().budget == pytest.approx(2.25, rel=0.02)


# -- on real steps ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_learned_tool_timeout_cuts_a_hang_at_what_the_tool_usually_takes(
    slow_server: SlowServer,
) -> None:
    book = _book("lookup", [0.05] * 60)
    rule = learned(book, min_samples=50, headroom=2.0, cap=10.0)

    @deadline_tool(cap=rule)
    async def lookup(query: str) -> str:
        """Lookup."""
        async with httpx.AsyncClient() as client:
            return (await client.get(slow_server.url("/slow?delay=5"))).text

    t0 = time.monotonic()
    call = {"type": "tool_call", "id": "c", "name": "lookup", "args": {"query": "q"}}
    msg = await lookup.ainvoke(call)
    assert time.monotonic() - t0 < 0.1 + MARGIN
    assert msg.status == "error" and "did not answer within 0.1 s" in msg.content
    assert book.sketch("lookup", "tool").censored == 0  # listen=False: only what we fed


def test_deadline_tools_take_a_learned_default_per_tool_name() -> None:
    book = _book("a", [0.1] * 60)
    rule = learned(book, min_samples=50, headroom=2.0, cap=3.0)

    def a(q: str) -> str:
        """A."""
        return q

    def b(q: str) -> str:
        """B."""
        return q

    ta, tb = deadline_tools([a, b], default_cap=rule)
    with deadline_scope(10.0):
        assert ta._step.plan(sync=True).budget == pytest.approx(0.2, rel=0.02)
        assert tb._step.plan(sync=True).budget == 3.0  # cold: the user's cap


class S(DeadlineState, total=False):
    delay: float
    text: str


@pytest.mark.anyio
@pytest.mark.serial  # its cap is 3 x the p99 of 20 quick runs: one run slowed by another worker's
# load to a second made the cap 3 s, above the 3 s request it must cut (CI, once)
async def test_a_graph_learns_its_nodes_cap_from_its_own_runs(slow_server: SlowServer) -> None:
    book = LatencyBook()
    try:

        async def fetch(state: S) -> dict[str, Any]:
            async with httpx.AsyncClient() as client:
                r = await client.get(slow_server.url(f"/slow?delay={state['delay']}"))
            return {"text": r.text}

        b = StateGraph(S)
        b.add_node("fetch", fetch)
        b.add_edge(START, "fetch")
        b.add_edge("fetch", END)
        rule = learned(book, min_samples=20, headroom=3.0)
        graph = with_deadlines(b, timeout=5.0, caps={"fetch": rule}, default_cap=4.0)

        cold = Step("fetch", "node", rule.bounded(4.0)).plan()
        assert cold.cap == 4.0
        for _ in range(20):
            out = await graph.ainvoke({"delay": 0.02})
            assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        assert book.count("fetch", "node") == 20

        t0 = time.monotonic()
        out = await graph.ainvoke({"delay": 3.0})
        took = time.monotonic() - t0
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert out["deadline_outcome"].step == "fetch"
        trace = [
            StepRecord.from_dict(r) if isinstance(r, dict) else r for r in out["deadline_trace"]
        ]
        fetch_record = [r for r in trace if r.name == "fetch"][-1]
        assert fetch_record.status is StepStatus.TIMED_OUT
        # cut near 3 x p99 of its runs (~0.02 s each; a loaded machine makes them slower, and
        # the cap with them), not at the 4 s default cap
        learned_cap = fetch_record.requested_ms
        assert learned_cap is not None and learned_cap < 1500
        assert took < learned_cap / 1000.0 + 0.5, took
        assert book.sketch("fetch", "node").censored == 1
    finally:
        book.detach()


def test_budgeted_takes_a_learned_cap() -> None:
    book = _book("work", [0.1] * 60, kind="node")
    node = budgeted(lambda s: s, cap=learned(book, min_samples=50, cap=2.0), name="work")
    assert callable(node)
    with pytest.raises(ValueError, match="min_viable"):
        budgeted(lambda s: s, cap=learned(book, cap=1.0), min_viable=2.0)


def test_the_report_shows_learned_quantiles_censored_share_and_cap() -> None:
    from langgraph_deadline._report.learned import format_learned
    from langgraph_deadline._report.trace import Trace

    def rec(ms: float, status: StepStatus) -> StepRecord:
        return StepRecord(
            name="search",
            kind="tool",
            attempt=1,
            remaining_ms=None,
            requested_ms=None,
            allocated_ms=None,
            clamped=False,
            elapsed_ms=ms,
            status=status,
        )

    loose = tuple([rec(100.0, StepStatus.COMPLETED)] * 9 + [rec(800.0, StepStatus.TIMED_OUT)])
    text = format_learned(Trace(runs=(), loose=loose), min_samples=5)
    row = next(line.split() for line in text.splitlines() if line.startswith("search"))
    assert row[:4] == ["search", "tool", "10", "10%"]
    assert float(row[4]) == pytest.approx(100, rel=0.01)
    assert row[6].startswith(">=") and float(row[6][2:]) == pytest.approx(800, rel=0.01)
    assert float(row[7]) == pytest.approx(1200, rel=0.01)  # p99 (>= 800 ms) x 1.5


def test_the_agent_middleware_takes_learned_tool_caps() -> None:
    from langgraph_deadline.agents import DeadlineMiddleware

    book = _book("lookup", [0.1] * 60)
    rule = learned(book, min_samples=50, headroom=2.0, cap=3.0)
    middleware = DeadlineMiddleware(timeout=10, tool_caps={"lookup": rule}, default_tool_cap=rule)
    assert middleware.settings.tool_caps["lookup"] is rule
    with deadline_scope(10.0):
        plan = Step("lookup", "tool", middleware.settings.tool_cap("lookup")).plan()
    assert plan.budget == pytest.approx(0.2, rel=0.02)
    with pytest.raises(TypeError, match=r"tool_caps\['lookup'\]"):
        DeadlineMiddleware(tool_caps={"lookup": "fast"})  # type: ignore[dict-item]
