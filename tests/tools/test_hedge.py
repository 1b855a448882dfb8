"""Hedged read-only tools, against a real loopback server: a call that has not answered after
its delay gets a second copy, the first answer wins, the loser's connection is closed at the
server, the hedge budget bounds the extra load, and the run's deadline bounds everything."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_deadline import (
    DeadlineState,
    Hedge,
    StepRecord,
    deadline_scope,
    deadline_tool,
    deadline_tools,
    with_deadlines,
)
from langgraph_deadline._tools.hedge import PROBE_S, WINDOW_S, HedgeBudget
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, SlowServer
from langgraph_deadline.types import StepStatus
from tests.agents.support import ask, assert_valid_history
from tests.chat_models import openai_chat as chat

MARGIN = 0.5  # a loaded 2-core machine

pytestmark = pytest.mark.anyio


def _call(query: str = "boots", id: str = "call-1") -> dict[str, Any]:
    return {"type": "tool_call", "id": id, "name": "search", "args": {"query": query}}


def _search(
    server: SlowServer,
    delays: list[float],
    hedge: Hedge,
    *,
    client: httpx.AsyncClient | None = None,
    **options: Any,
) -> Any:
    """A read-only search whose n-th request takes `delays[n]` s (the last one after that),
    over `client` (shared by every call, as a process's client is) or a client of its own."""
    n = itertools.count()

    @deadline_tool(read_only=True, hedge=hedge, **options)
    async def search(query: str) -> str:
        """Search the catalogue."""
        params = {"delay": delays[min(next(n), len(delays) - 1)], "q": query}
        if client is not None:
            return (await client.get(server.url("/slow"), params=params)).text
        async with httpx.AsyncClient() as own:
            return (await own.get(server.url("/slow"), params=params)).text

    return search


class _State(DeadlineState):
    messages: list[Any]


def _tool_graph(tool: Any) -> StateGraph[Any, Any, Any, Any]:
    """START -> a ToolNode with `tool`: give it an AIMessage with tool calls."""
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(_State)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "tools")
    return builder


def _tool_records(steps: list[StepRecord]) -> list[StepRecord]:
    return [r for r in steps if r.kind == "tool"]


# -- the race ----------------------------------------------------------------------------------


async def test_a_straggler_is_hedged_the_fast_copy_answers_and_the_loser_is_closed_at_the_server(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    search = _search(slow_server, [5.0, 0.02], Hedge(after=0.1), cap=3.0)

    t0 = time.monotonic()
    message = await search.ainvoke(_call())
    took = time.monotonic() - t0

    assert isinstance(message, ToolMessage) and message.status == "success"
    assert '"delay": 0.02' in message.text  # the second copy's answer
    assert took < 1.0 + MARGIN  # not the straggler's 5 s
    # the server notes its answer after writing it: the client may have read it before
    assert slow_server.wait_for(lambda rs: rs[1].answered is not None, 1.0)
    assert slow_server.wait_disconnected(1.0)
    first, second = slow_server.requests
    assert first.disconnected is not None and first.answered is None  # the loser was closed
    assert first.disconnected - second.answered < MARGIN
    [record] = _tool_records(steps)
    assert (record.status, record.hedges, record.winner) == (StepStatus.COMPLETED, 1, 1)


async def test_the_loser_over_a_client_shared_by_the_process_is_closed_and_leaves_the_pool(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    async with httpx.AsyncClient() as client:
        search = _search(slow_server, [5.0, 0.02], Hedge(after=0.1), client=client, cap=3.0)

        message = await search.ainvoke(_call())

        assert '"delay": 0.02' in message.text
        assert slow_server.wait_disconnected(1.0)
        assert slow_server.wait_for(lambda rs: rs[1].answered is not None, 1.0)
        first, second = slow_server.requests
        assert first.disconnected is not None and first.answered is None  # closed, not left
        assert second.answered is not None and first.disconnected - second.answered < MARGIN
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert all(c.is_idle() or c.is_closed() for c in pool.connections)


async def test_a_call_that_answers_before_the_delay_is_not_hedged(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    search = _search(slow_server, [0.01], Hedge(after=1.0))

    message = await search.ainvoke(_call())

    assert message.status == "success"
    assert len(slow_server.requests) == 1
    [record] = _tool_records(steps)
    assert (record.hedges, record.winner) == (0, None)


async def test_the_first_copy_can_still_win_and_the_hedge_is_closed(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    search = _search(slow_server, [0.3, 5.0], Hedge(after=0.05), cap=3.0)

    message = await search.ainvoke(_call())

    assert '"delay": 0.3' in message.text
    assert slow_server.wait_disconnected(1.0)
    assert slow_server.requests[1].disconnected is not None
    [record] = _tool_records(steps)
    assert (record.hedges, record.winner) == (1, 0)


async def test_a_copy_that_fails_leaves_the_other_to_answer(slow_server: SlowServer) -> None:
    n = itertools.count()

    @deadline_tool(read_only=True, hedge=Hedge(after=0.05), cap=3.0)
    async def search(query: str) -> str:
        """Search the catalogue."""
        i = next(n)
        async with httpx.AsyncClient() as client:
            r = await client.get(slow_server.url("/slow"), params={"delay": 0.2 if i else 0.1})
        if i == 0:
            raise RuntimeError("the first copy broke")
        return r.text

    message = await search.ainvoke(_call())

    assert message.status == "success" and '"delay": 0.2' in message.text


@pytest.mark.parametrize("shared", [False, True], ids=["own-client", "shared-client"])
async def test_nothing_runs_past_the_deadline(
    slow_server: SlowServer, steps: list[StepRecord], shared: bool
) -> None:
    hedge = Hedge(after=0.05, max_copies=3, floor_per_s=10.0)
    async with httpx.AsyncClient() as client:
        search = _search(slow_server, [5.0], hedge, client=client if shared else None, cap=3.0)
        graph = with_deadlines(_tool_graph(search), timeout=0.4, reserve=0.05)

        t0 = time.monotonic()
        out = await graph.ainvoke({"messages": [AIMessage("", tool_calls=[_call()])]})
        took = time.monotonic() - t0

    # the tool's answer (on a loaded machine the run's own end may also add its closing reply)
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error" and "did not answer within" in message.text
    assert took < 0.4 + MARGIN
    assert len(slow_server.requests) == 3  # every copy it could start
    assert slow_server.wait_disconnected(1.0, count=3)  # and every one closed at the server
    assert all(r.answered is None for r in slow_server.requests)
    [record] = _tool_records(steps)
    # its own cut ends it, or, on a loaded machine, its node's cut (10 ms later) while its
    # copies still close: the record says the same either way
    assert (record.status, record.hedges, record.winner) == (StepStatus.TIMED_OUT, 2, None)
    assert record.clamped and record.allocated_ms is not None and record.allocated_ms <= 350


async def test_no_copy_starts_when_the_time_left_cannot_fit_a_typical_call(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    book = LatencyBook(listen=False)
    for _ in range(60):
        book.record("tool", "search", 0.2)  # p50 = p95 = 0.2 s
    search = _search(slow_server, [5.0], Hedge(book=book, min_samples=50), cap=0.35)

    message = await search.ainvoke(_call())  # at 0.2 s, 0.15 s is left: less than a typical call

    assert message.status == "error"
    [record] = _tool_records(steps)
    assert (record.hedges, record.hedge_held) == (0, "time")
    # one request (none, on a machine so loaded that the first did not reach the server in time)
    assert len(slow_server.requests) <= 1


def _tailed_book() -> LatencyBook:
    """A book that knows the tool: 9 calls in 10 take 0.2 s, the 10th 2 s (p50 0.2, p95 2)."""
    book = LatencyBook(listen=False)
    for i in range(100):
        book.record("tool", "search", 0.2 if i % 10 else 2.0)
    return book


async def test_under_a_deadline_the_copy_starts_while_it_can_still_answer_in_time(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    book = _tailed_book()  # p50 0.2 s, p95 2 s
    search = _search(slow_server, [5.0, 0.02], Hedge(book=book), cap=1.0)

    # The learned delay (2 s) is past the step's 1 s: the copy starts when 1.5 typical calls
    # (0.3 s) are left, at 0.7 s, rather than never.
    message = await search.ainvoke(_call())

    assert message.status == "success" and '"delay": 0.02' in message.text
    [record] = _tool_records(steps)
    assert (record.hedges, record.winner, record.hedge_held) == (1, 1, None)
    assert 600 <= record.elapsed_ms < 1000


# -- the delay ---------------------------------------------------------------------------------


def test_the_delay_is_the_books_quantile_once_warm_and_after_until_then() -> None:
    book = LatencyBook(listen=False)
    hedge = Hedge(book=book, after=0.5, quantile=0.95, min_samples=50)
    assert hedge.delay("search") == 0.5
    for i in range(100):
        book.record("tool", "search", 0.1 if i < 95 else 1.0)
    assert hedge.delay("search") == pytest.approx(0.1, rel=0.03)
    assert hedge.typical("search") == pytest.approx(0.1, rel=0.03)
    assert Hedge(book=LatencyBook(listen=False)).delay("search") is None  # cold, no after


# -- the budget --------------------------------------------------------------------------------


class _Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_allows_its_share_of_calls_plus_the_floor_and_forgets_after_the_window() -> None:
    clock = _Clock()
    budget = HedgeBudget(max_extra=0.05, floor_per_s=0.0, clock=clock)
    for _ in range(40):
        budget.deposit()
    assert [budget.withdraw() for _ in range(3)] == [None, None, "budget"]  # 5 % of 40
    clock.now += WINDOW_S
    assert budget.withdraw() == "budget"  # the calls left the window with their share
    floored = HedgeBudget(max_extra=0.05, floor_per_s=0.1, clock=clock)
    assert [floored.withdraw() for _ in range(2)] == [None, "budget"]  # 0.1/s over 10 s


def test_the_floor_is_a_floor_under_the_share_not_more_on_top_of_it() -> None:
    """A quiet tool gets the floor; a busy one its share and no more (5 % means 5 %)."""
    clock = _Clock()
    quiet = HedgeBudget(max_extra=0.05, floor_per_s=1.0, clock=clock)
    for _ in range(100):  # 5 % of 100 is 5 copies; the floor, 1 a second over 10 s, is 10
        quiet.deposit()
    assert [quiet.withdraw() for _ in range(11)] == [None] * 10 + ["budget"]
    busy = HedgeBudget(max_extra=0.05, floor_per_s=1.0, clock=clock)
    for _ in range(400):  # 5 % of 400 is 20 copies, more than the floor's 10
        busy.deposit()
    assert [busy.withdraw() for _ in range(21)] == [None] * 20 + ["budget"]


def test_calls_the_budget_held_get_the_next_copies_before_calls_just_past_their_delay() -> None:
    """The longer a call has run past its delay, the likelier it is a straggler: a call the
    budget held is served before one that has only just run past its delay."""
    clock = _Clock()
    budget = HedgeBudget(max_extra=0.05, floor_per_s=0.0, clock=clock)
    for _ in range(20):
        budget.deposit()
    assert budget.withdraw() is None  # 5 % of 20: one copy
    assert budget.withdraw() == "budget"  # a straggler, held: it waits for the next copy
    for _ in range(20):
        budget.deposit()  # one copy more
    assert budget.withdraw() == "budget"  # a call just past its delay: the straggler is ahead
    assert budget.withdraw(queued=True) is None  # the straggler asks again, and gets it
    for _ in range(20):
        budget.deposit()
    budget.leave()  # the other held call answered by itself: it no longer waits
    assert budget.withdraw() is None  # so a new late call gets the copy


def test_the_budget_tells_an_outage_from_stragglers_and_forgets_it_when_the_backend_recovers() -> (
    None
):
    budget = HedgeBudget(max_extra=1.0, floor_per_s=100.0, outage_share=0.5, clock=_Clock())
    for _ in range(9):
        budget.deposit()
        assert budget.withdraw() is None  # late, but 9 calls are too few to tell
    budget.deposit()
    assert budget.withdraw() == "outage"  # 10 of 10 ran past their delay
    assert budget.withdraw(first=False) == "outage"  # a call's second wish tells nothing
    for _ in range(8):
        budget.tell(late=False)  # the backend answers in time again
    budget.deposit()
    assert budget.withdraw() is None  # 8 of about the last 10 in time: stragglers again
    for i in range(1, 41):
        budget.deposit()
        if i % 20:
            budget.tell(late=False)
        else:
            assert budget.withdraw() is None  # 1 call in 20 late: never an outage


def test_the_budget_backs_off_while_copies_do_not_answer_first_and_probes_once_a_second() -> None:
    clock = _Clock()
    budget = HedgeBudget(max_extra=1.0, floor_per_s=100.0, outage_share=0.5, clock=clock)
    for _ in range(10):  # stragglers: the copy answers first
        budget.deposit()
        assert budget.withdraw(first=False) is None
        budget.answered(by_copy=True)
    lost = 0
    while True:  # every copy is slow too: the first request keeps answering first
        budget.deposit()
        if budget.withdraw(first=False) is not None:
            break
        budget.answered(by_copy=False)
        lost += 1
    assert lost <= 10  # a few copies that lost tell it (and the first copy of the pause probes)
    assert budget.withdraw(first=False) == "outage"
    clock.now += PROBE_S
    assert budget.withdraw(first=False) is None  # one copy a second still starts
    assert budget.withdraw(first=False) == "outage"
    for _ in range(3):  # the backend recovers: the probes' copies answer first
        budget.answered(by_copy=True)
        clock.now += PROBE_S
        budget.withdraw(first=False)
    assert [budget.withdraw(first=False) for _ in range(5)] == [None] * 5
    never = HedgeBudget(max_extra=1.0, floor_per_s=100.0, outage_share=None, clock=clock)
    for _ in range(20):
        never.deposit()
        assert never.withdraw(first=False) is None
        never.answered(by_copy=False)


async def test_the_hedge_budget_caps_extra_calls_under_a_burst(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    hedge = Hedge(after=0.05, max_extra=0.05, floor_per_s=0.0, outage_share=None)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        search = _search(slow_server, [0.6], hedge, client=client, cap=10.0)

        calls = (search.ainvoke(_call(id=f"c{i}")) for i in range(40))
        messages = await asyncio.gather(*calls)

    assert [m.status for m in messages] == ["success"] * 40
    extra = len(slow_server.requests) - 40
    assert 1 <= extra <= 2  # 5 % of 40 calls, though every call was past its delay
    assert sum(r.hedges for r in _tool_records(steps)) == extra


async def test_a_straggler_the_budget_held_until_its_time_ran_out_is_recorded_as_held_by_budget(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    """Held by the hedge budget again and again, then by its time left, then cut: the record
    says the budget held its copies (the report and the metrics count that), and how often."""
    book = LatencyBook(listen=False)
    for _ in range(60):
        book.record("tool", "search", 0.1)  # p50 = p95 = 0.1 s
    hedge = Hedge(book=book, min_samples=50, max_extra=0.05, floor_per_s=0.0, outage_share=None)
    search = _search(slow_server, [5.0], hedge, cap=0.8)

    message = await search.ainvoke(_call())  # past its delay at 0.1 s: no copy is affordable

    assert message.status == "error"
    [record] = _tool_records(steps)
    assert (record.status, record.hedges, record.hedge_held) == (StepStatus.TIMED_OUT, 0, "budget")
    note = record.note or ""
    counts = dict(
        (why, int(n)) for why, n in (p.split() for p in note.split("not started: ")[1].split(", "))
    )
    assert list(counts) == ["budget", "time"]  # asked every 25 ms from 0.1 s, then time ran out
    assert counts["budget"] >= 5 and counts["time"] == 1
    assert len(slow_server.requests) == 1


async def test_a_call_the_budget_held_gets_its_copy_once_other_calls_refill_it(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # 5 %, no floor: the straggler alone has earned 0.05 of a copy, and is held; 20 calls
    # later the budget has one, and the straggler, still waiting, gets it.
    hedge = Hedge(after=0.2, max_extra=0.05, floor_per_s=0.0, outage_share=None)
    async with httpx.AsyncClient() as client:
        search = _search(slow_server, [1.5, 0.01], hedge, client=client, cap=5.0)

        t0 = time.monotonic()
        straggler = asyncio.ensure_future(search.ainvoke(_call(id="straggler")))
        await asyncio.sleep(0.3)  # held at 0.2 s
        for i in range(20):  # one after the other: each well inside its delay
            assert (await search.ainvoke(_call(id=f"c{i}"))).status == "success"
        message = await straggler
        took = time.monotonic() - t0

    assert '"delay": 0.01' in message.text  # its copy's answer, not its own 1.5 s one
    assert took < 1.5
    [hedged] = [r for r in _tool_records(steps) if r.hedges]
    assert (hedged.hedges, hedged.winner, hedged.hedge_held) == (1, 1, "budget")
    assert len(slow_server.requests) - 21 <= 1  # within 5 % of the 21 calls


async def _slow_for_everyone(
    server: SlowServer, hedge: Hedge, steps: list[StepRecord], calls: int
) -> tuple[int, list[StepRecord]]:
    """`calls` calls, 8 at a time, every request 0.1 s (an outage): the requests beyond one a
    call that reached the server, and the calls' records."""
    steps.clear()
    server.requests.clear()
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        search = _search(server, [0.1], hedge, client=client, cap=10.0)
        queue = iter(range(calls))

        async def worker() -> None:
            for i in queue:
                message = await search.ainvoke(_call(id=f"c{i}"))
                assert message.status == "success"

        await asyncio.gather(*(worker() for _ in range(8)))
    return len(server.requests) - calls, _tool_records(steps)


async def test_a_call_the_budget_held_leaves_the_queue_when_it_ends_answered_or_cut(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # Every call runs past its delay and the budget allows one copy in 20: most calls wait for a
    # copy, then answer by themselves, or are cut by their deadline while they wait. None may
    # stay counted as waiting (it would hold back the copies of every later call).
    hedge = Hedge(after=0.05, max_extra=0.05, floor_per_s=0.0, outage_share=None)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        search = _search(slow_server, [0.3], hedge, client=client, cap=10.0)

        async def calls(deadline: float | None) -> list[Any]:
            async def one(i: int) -> Any:
                with deadline_scope(deadline):
                    return await search.ainvoke(_call(id=f"c{i}"))

            return await asyncio.gather(*(one(i) for i in range(16)))

        answered = await calls(None)
        cut = await calls(0.2)
    assert all(m.status == "success" for m in answered)
    assert all(m.status == "error" for m in cut)
    assert [r.hedge_held for r in _tool_records(steps)].count("budget") >= 20
    assert search._hedge_budget._queued == 0


async def test_hedging_backs_off_while_the_backend_is_slow_for_everyone(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # A floor of 10 hedges a second would let every one of these calls send a second copy.
    spent, records = await _slow_for_everyone(
        slow_server, Hedge(after=0.02, floor_per_s=10.0, outage_share=None), steps, 40
    )
    # Without the back-off, every slow call sent a second copy (a few are cancelled before
    # they send, when the first answers meanwhile on a loaded machine).
    assert sum(r.hedges for r in records) == 40 and spent >= 30
    backed, records = await _slow_for_everyone(
        slow_server, Hedge(after=0.02, floor_per_s=10.0), steps, 40
    )
    # Before 10 calls are seen nothing tells an outage (the first 8 hedge); then none hedges.
    assert backed <= 10
    held = [r.hedge_held for r in records]
    assert held.count("outage") >= 40 - 10
    assert backed <= sum(r.hedges for r in records) <= 10  # (a copy may be cancelled unsent)


async def _forty_calls(
    server: SlowServer,
    hedge: Hedge,
    delay: Callable[[str, bool], float],
    steps: list[StepRecord],
) -> list[StepRecord]:
    """40 calls of a hedged search, 8 at a time over one client: a request of query `q` takes
    `delay(q, first)` s (`first`: the call's first request, else a copy). Their records."""
    steps.clear()
    sent: dict[str, int] = {}

    @deadline_tool(read_only=True, hedge=hedge, cap=10.0)
    async def search(query: str) -> str:
        """Search the catalogue."""
        sent[query] = sent.get(query, 0) + 1
        params = {"delay": delay(query, sent[query] == 1), "q": query}
        return (await client.get(server.url("/slow"), params=params)).text

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        queue = iter(range(40))

        async def worker() -> None:
            for i in queue:
                message = await search.ainvoke(_call(f"q{i}", id=f"c{i}"))
                assert message.status == "success"

        await asyncio.gather(*(worker() for _ in range(8)))
    return _tool_records(steps)


async def test_hedging_backs_off_while_its_copies_answer_after_the_first_request(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # Every call runs past its delay, and its copy takes longer than its first request: copies
    # that win nothing. (`outage_share=1.0`: the share of late calls alone never says outage.)
    def copies_lose(query: str, first: bool) -> float:
        return 0.1 if first else 0.4

    always = await _forty_calls(
        slow_server, Hedge(after=0.02, floor_per_s=10.0, outage_share=None), copies_lose, steps
    )
    assert sum(r.hedges for r in always) == 40
    assert {r.winner for r in always} == {0}
    records = await _forty_calls(
        slow_server, Hedge(after=0.02, floor_per_s=10.0, outage_share=1.0), copies_lose, steps
    )
    # The first two waves of 8 hedge before 10 hedged calls have told; then one a second.
    assert sum(r.hedges for r in records) <= 16 + 2
    assert [r.hedge_held for r in records].count("outage") >= 40 - 18


async def test_copies_beaten_before_they_ran_a_typical_call_do_not_make_hedging_back_off(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # A low trigger (p90 on a wide latency) hedges many calls just past their delay, whose first
    # request answers soon after the copy started: those copies lose without having had a
    # chance, while every straggler's copy wins. That is hedging working, not an outage: the
    # stragglers must keep their copies. (Counted as losses, 7 in 10 hedged calls told "copies
    # do not help", and every straggler after the tenth hedged call waited 3 s for its first
    # request.) `outage_share=1.0`: the share of late calls alone never says outage here.
    book = LatencyBook(listen=False)
    for _ in range(100):
        book.record("tool", "search", 0.2)  # the delay and the typical call: 0.2 s

    def three_in_ten_straggle(query: str, first: bool) -> float:
        if int(query[1:]) % 10 < 3:
            return 3.0 if first else 0.05
        return 0.25 if first else 0.6

    hedge = Hedge(book=book, floor_per_s=10.0, outage_share=1.0)
    records = await _forty_calls(slow_server, hedge, three_in_ten_straggle, steps)
    assert len(records) == 40
    assert [r.hedge_held for r in records].count("outage") == 0
    assert sorted(r.winner for r in records if r.hedges) == [0] * 28 + [1] * 12


async def test_copies_a_deadline_started_early_do_not_tell_whether_copies_help(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    # Under a deadline a copy starts before the delay, while it can still answer in time: its
    # first request, not a straggler, often answers first. That says nothing of an outage, and
    # must not make the tool's hedging back off.
    book = LatencyBook(listen=False)
    for i in range(100):
        book.record("tool", "search", 0.6 if i % 10 else 6.0)  # p50 0.6 s, p95 6 s
    sent: dict[str, int] = {}

    @deadline_tool(read_only=True, hedge=Hedge(book=book, floor_per_s=10.0), cap=3.0)
    async def search(query: str) -> str:
        """Search the catalogue."""
        sent[query] = sent.get(query, 0) + 1
        first = sent[query] == 1
        delay = (2.4 if first else 1.0) if query.startswith("a") else (5.0 if first else 0.02)
        url = slow_server.url("/slow")
        return (await client.get(url, params={"delay": delay, "q": query})).text

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        # 16 calls whose copy starts at 2.1 s (1.5 typical calls before the step's end; a copy
        # is sent while at least one typical call, 0.6 s, is left) and loses to the first request
        await asyncio.gather(*(search.ainvoke(_call(f"a{i}", id=f"a{i}")) for i in range(16)))
        early = _tool_records(steps)
        assert sum(r.hedges for r in early) >= 10 and {r.winner for r in early} == {0}
        steps.clear()
        # two stragglers after them: both still get their copy, and both copies answer
        calls = (search.ainvoke(_call(f"b{i}", id=f"b{i}")) for i in (1, 2))
        messages = await asyncio.gather(*calls)
    assert all('"delay": 0.02' in m.text for m in messages)
    assert [(r.hedges, r.winner, r.hedge_held) for r in _tool_records(steps)] == [(1, 1, None)] * 2


async def test_the_winner_cancels_the_loser_before_its_answer_travels_back(
    slow_server: SlowServer,
) -> None:
    """The loser is cancelled the moment the winning tool coroutine returns, from inside
    LangChain's tool task: not once the answer has made its way back up to the copy (one loop
    iteration more) or to the race (three more); counted in iterations, not ms. The 3 left are
    httpcore's clean-up of the cancelled request (its lock, then the close)."""
    loop = asyncio.get_running_loop()
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        loop.call_soon(tick)

    seen: dict[str, int] = {}
    delays = iter([5.0, 0.02])

    @deadline_tool(read_only=True, hedge=Hedge(after=0.1), cap=3.0)
    async def search(query: str) -> str:
        """Search the catalogue."""
        delay = next(delays)
        async with httpx.AsyncClient() as own:
            try:
                text = (await own.get(slow_server.url("/slow"), params={"delay": delay})).text
            except asyncio.CancelledError:
                seen["cancelled"] = ticks
                raise
        seen["answered"] = ticks
        return text

    loop.call_soon(tick)
    message = await search.ainvoke(_call())
    assert '"delay": 0.02' in message.text
    assert seen["cancelled"] - seen["answered"] <= 3


async def test_the_loser_is_already_cancelled_when_the_loop_next_runs_after_the_winner_answers(
    slow_server: SlowServer,
) -> None:
    """No loop iteration between the winning coroutine's return and the loser's cancellation
    (each iteration runs whatever else is ready: under load, milliseconds): what the loop runs
    next, scheduled by the winner as it returns, finds the loser's request cancelled."""
    loop = asyncio.get_running_loop()
    delays = iter([5.0, 0.02])
    loser: list[asyncio.Task[Any]] = []
    cancelling: list[int] = []

    @deadline_tool(read_only=True, hedge=Hedge(after=0.1), cap=3.0)
    async def search(query: str) -> str:
        """Search the catalogue."""
        delay = next(delays)
        if delay > 1.0:
            task = asyncio.current_task()  # the task LangChain runs this copy's coroutine in
            assert task is not None
            loser.append(task)
        async with httpx.AsyncClient() as own:
            text = (await own.get(slow_server.url("/slow"), params={"delay": delay})).text
        loop.call_soon(lambda: cancelling.append(loser[0].cancelling()))
        return text

    message = await search.ainvoke(_call())

    assert '"delay": 0.02' in message.text
    assert cancelling == [1]  # cancelled once, before anything else ran
    assert slow_server.wait_disconnected(1.0)
    assert slow_server.requests[0].answered is None


async def test_a_tool_class_of_its_own_is_hedged_and_its_loser_closed(
    slow_server: SlowServer, steps: list[StepRecord]
) -> None:
    """A `BaseTool` with an `_arun` of its own (no coroutine to tell the race it answered)
    wins when its call returns: the loser is closed all the same."""
    delays = iter([5.0, 0.02])

    class Search(BaseTool):
        name: str = "search"
        description: str = "Search the catalogue."

        def _run(self, query: str) -> str:
            raise NotImplementedError

        async def _arun(self, query: str) -> str:
            async with httpx.AsyncClient() as own:
                params = {"delay": next(delays), "q": query}
                return (await own.get(slow_server.url("/slow"), params=params)).text

    search = deadline_tool(Search(), read_only=True, hedge=Hedge(after=0.1), cap=3.0)

    message = await search.ainvoke(_call())

    assert message.status == "success" and '"delay": 0.02' in message.text
    assert slow_server.wait_disconnected(1.0)
    first, _ = slow_server.requests
    assert first.disconnected is not None and first.answered is None
    [record] = _tool_records(steps)
    assert (record.hedges, record.winner) == (1, 1)


# -- what is refused ---------------------------------------------------------------------------


async def _read(query: str) -> str:
    """Read something."""
    return query


def test_a_tool_that_is_not_read_only_refuses_hedge() -> None:
    with pytest.raises(ValueError, match=r"tool '_read': hedge needs read_only=True"):
        deadline_tool(_read, hedge=Hedge(after=0.1))
    with pytest.raises(ValueError, match="hedge needs read_only=True"):
        deadline_tool(_read, side_effect=True, hedge=Hedge(after=0.1))
    with pytest.raises(ValueError, match="hedge needs read_only=True"):
        deadline_tools([_read], hedge=Hedge(after=0.1))


def test_a_sync_tool_refuses_hedge() -> None:
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    with pytest.raises(ValueError, match="hedge needs an async tool"):
        deadline_tool(lookup, read_only=True, hedge=Hedge(after=0.1))


def test_deadline_tools_hedges_only_the_read_only_tools() -> None:
    async def write(query: str) -> str:
        """Write something."""
        return query

    read, written = deadline_tools([_read, write], read_only=["_read"], hedge=Hedge(after=0.1))
    assert read.options.hedge == Hedge(after=0.1) and written.options.hedge is None


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({}, ValueError, "needs after= .* or book="),
        ({"after": -1.0}, ValueError, "after"),
        ({"after": float("nan")}, ValueError, "after"),
        ({"after": 0.1, "quantile": 1.0}, ValueError, "quantile must be in"),
        ({"after": 0.1, "max_extra": 0.0}, ValueError, "max_extra must be in"),
        ({"after": 0.1, "floor_per_s": -1.0}, ValueError, "floor_per_s must be >= 0"),
        ({"after": 0.1, "max_copies": 1}, ValueError, "max_copies must be >= 2"),
        ({"after": 0.1, "max_copies": 2.0}, TypeError, "max_copies must be an int"),
        ({"after": 0.1, "min_samples": 0}, ValueError, "min_samples must be >= 1"),
        ({"book": "book"}, TypeError, "book must be a LatencyBook"),
        ({"after": 0.1, "outage_share": 0.0}, ValueError, r"outage_share must be in \(0, 1\]"),
        ({"after": 0.1, "outage_share": 1.5}, ValueError, "outage_share must be in"),
        ({"after": 0.1, "outage_share": float("nan")}, ValueError, "outage_share must be a finite"),
        ({"after": 0.1, "outage_share": "half"}, TypeError, "outage_share must be a number"),
    ],
)
def test_a_bad_hedge_is_refused_naming_the_argument(
    kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        Hedge(**kwargs)


def test_a_hedge_that_is_not_a_hedge_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="hedge must be a Hedge, got float"):
        deadline_tool(_read, read_only=True, hedge=0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hedge must be a Hedge"):
        deadline_tools([_read], read_only=["_read"], hedge="p95")  # type: ignore[arg-type]


def test_hedge_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        Hedge(0.1)  # type: ignore[misc]
    hedge = Hedge(after=1, quantile=0.9)
    assert isinstance(hedge.after, float) and hedge.after == 1.0
    with pytest.raises(AttributeError):
        hedge.after = 0.2  # type: ignore[misc]


# -- in a graph and an agent -------------------------------------------------------------------


async def test_a_hedged_tool_in_a_tool_node_of_a_graph_with_deadlines_answers(
    slow_server: SlowServer,
) -> None:
    search = _search(slow_server, [5.0, 0.02], Hedge(after=0.1), cap=3.0)
    graph = with_deadlines(_tool_graph(search), timeout=2.0)

    t0 = time.monotonic()
    out = await graph.ainvoke({"messages": [AIMessage("", tool_calls=[_call()])]})

    assert time.monotonic() - t0 < 1.0 + MARGIN
    answer = out["messages"][-1]
    assert isinstance(answer, ToolMessage) and '"delay": 0.02' in answer.text
    [record] = [r for r in out["deadline_trace"] if r.name == "search"]
    assert (record.hedges, record.winner) == (1, 1)
    assert slow_server.wait_disconnected(1.0)


async def test_a_hedged_tool_in_create_agent_answers_the_model(
    slow_server: SlowServer, server: FakeOpenAIServer
) -> None:
    search = _search(slow_server, [5.0, 0.02], Hedge(after=0.1), cap=3.0)
    server.enqueue(
        ChatReply.tool_call("search", {"query": "boots"}), ChatReply.text("Boots in stock.")
    )
    agent = create_agent(chat(server), [search], middleware=[DeadlineMiddleware(timeout=5.0)])

    t0 = time.monotonic()
    out = await agent.ainvoke(ask())

    assert time.monotonic() - t0 < 2.0 + MARGIN
    assert_valid_history(out["messages"])
    assert out["messages"][-1].text == "Boots in stock."
    seen = server.requests[1].body["messages"]  # what the model read back
    assert any(m["role"] == "tool" and '"delay": 0.02' in m["content"] for m in seen)
    assert slow_server.wait_disconnected(1.0)
    assert slow_server.requests[0].disconnected is not None
