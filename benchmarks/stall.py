"""Stall limits: how many answers are complete by the deadline when the writer model sometimes
stops sending mid-answer, without an idle cap, with a fixed one, and with a learned one.

A one-node agent (`with_deadlines` over a `StateGraph`: its `writer` node calls
`budgeted_model(writer, fallbacks=[fast], idle_cap=...)`), each run with its own deadline.
Two fake models behind the local OpenAI-compatible server (`FakeOpenAIServer`), called with the
real `ChatOpenAI(streaming=True)` over loopback: the writer streams `TOKENS` tokens, one every
`INTERVAL` s; in `STALL_SHARE` of its calls (seeded, the same for every variant) it stops after
a random number of them for `STALL` s, the connection open. The fast model streams a short
answer. `RUNS` runs per variant, `CONCURRENCY` at a time, after `WARM` warm-up runs.

The issue's figures are a 4 s deadline and a 10 s stall; every time here is halved (a 2 s
deadline, a 5 s stall, a 1 s answer) to keep the benchmark to about a minute; the ratios are
the same.

Variants:
- no idle cap: a stalled writer holds the run until the deadline cuts it (no answer).
- fixed idle cap `FIXED` s: a stalled writer is cut as stalled, the fallback answers.
- learned idle cap: `learned(book)` (p99 of each stream's longest gap x 1.5, never above the
  cap), the book warmed by `WARM` healthy calls (watched, not cut, while cold).

A run answers when its final answer is complete (the writer's whole answer or the fallback's)
and returned before its deadline. Tokens after the deadline: token chunks the servers sent for
a run after that run's deadline had passed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, budgeted_model, with_deadlines
from langgraph_deadline.learn import LatencyBook, learned
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer

from ._common import Check, Section, Table, streaming_chat

__all__ = ["run"]

RUNS = 200
QUICK_RUNS = 60
WARM = 60
CONCURRENCY = 4  # a 2-core machine: more streams at once and the client falls behind
DEADLINE = 2.0  # the 4 s, halved
STALL = 5.0  # the 10 s, halved
STALL_SHARE = 0.05
TOKENS = 40
INTERVAL = 0.025  # 40 tokens in 1 s
FAST_TOKENS = 10
FAST_INTERVAL = 0.01
FIXED = 0.25
TARGET = 0.99
WRITER = " ".join(f"w{i}" for i in range(TOKENS))
FAST = " ".join(f"f{i}" for i in range(FAST_TOKENS))
_HEALTHY = ChatReply.text(WRITER, chunk_interval=INTERVAL)


class _State(DeadlineState, total=False):
    question: str
    answer: str


def _script(n: int, seed: int) -> list[ChatReply]:
    """`n` writer replies, `STALL_SHARE` of them (seeded places) stalling mid-answer."""
    rng = random.Random(seed)
    stalls = set(rng.sample(range(n), max(1, round(n * STALL_SHARE))))
    replies = []
    for i in range(n):
        reply = _HEALTHY
        if i in stalls:
            reply = reply.stalling(after=rng.randrange(3, TOKENS - 3), seconds=STALL)
        replies.append(reply)
    return replies


def _graph(llm: Any) -> Any:
    async def writer(state: _State) -> dict[str, Any]:
        reply = await llm.ainvoke(state["question"])
        return {"answer": reply.content}

    b = StateGraph(_State)
    b.add_node("writer", writer)
    b.add_edge(START, "writer")
    b.add_edge("writer", END)
    return with_deadlines(b, timeout=DEADLINE)


class _Result:
    __slots__ = ("answered", "cap", "late_tokens", "stalls_cut")

    def __init__(self) -> None:
        self.cap = "-"  # the idle cap at the end (a learned one as learned)
        self.answered = 0
        self.late_tokens = 0
        self.stalls_cut = 0


async def _variant(runs: int, idle_cap: Callable[[LatencyBook], Any] | None) -> _Result:
    script = _script(runs, seed=34)
    book = LatencyBook(listen=True)
    fast_reply = ChatReply.text(FAST, chunk_interval=FAST_INTERVAL)
    async with (
        FakeOpenAIServer([_HEALTHY] * WARM + script, default_reply=_HEALTHY) as writer_server,
        FakeOpenAIServer(default_reply=fast_reply) as fast_server,
    ):
        cap = None if idle_cap is None else idle_cap(book)
        llm = budgeted_model(
            streaming_chat(writer_server, "writer"),
            fallbacks=[streaming_chat(fast_server, "fast")],
            idle_cap=cap,
        )
        graph = _graph(llm)
        # Every variant warms up (its connections too); the book hears healthy streams
        # (watched, not cut, while it is cold).
        for i in range(0, WARM, CONCURRENCY):
            await asyncio.gather(
                *(graph.ainvoke({"question": f"warm {i + j}"}) for j in range(CONCURRENCY))
            )
        result = _Result()
        ends: dict[str, float] = {}

        async def one(i: int) -> None:
            question = f"question {i}"
            start = time.monotonic()
            ends[question] = start + DEADLINE
            out = await graph.ainvoke({"question": question})
            done = time.monotonic() - start
            if out.get("answer") in (WRITER, FAST) and done <= DEADLINE:
                result.answered += 1
            trace = out.get("deadline_trace") or []
            result.stalls_cut += sum(1 for r in trace if r.stalled)

        for i in range(0, runs, CONCURRENCY):
            await asyncio.gather(*(one(i + j) for j in range(min(CONCURRENCY, runs - i))))
        await writer_server.await_idle(STALL + 2.0)
        for server in (writer_server, fast_server):
            for request in server.requests:
                question = str(request.body.get("messages", [{}])[-1].get("content", ""))
                end = ends.get(question)
                if end is not None:
                    result.late_tokens += request.chunks_sent_after(end)
        if isinstance(cap, float):
            result.cap = f"{cap * 1000:.0f} ms"
        elif cap is not None:
            now = cap.idle_cap("model", "writer")
            result.cap = "cold" if now is None else f"{now * 1000:.0f} ms"
        book.detach()
        return result


VARIANTS: dict[str, Callable[[LatencyBook], Any] | None] = {
    "no idle cap": None,
    f"idle_cap={FIXED:g} s": lambda book: FIXED,
    "idle_cap=learned(book)": lambda book: learned(book),
}


def run(*, quick: bool) -> Section:
    """Complete answers by the deadline, stalls cut and tokens after the deadline, per variant."""
    runs = QUICK_RUNS if quick else RUNS

    async def measure() -> dict[str, _Result]:
        return {name: await _variant(runs, make) for name, make in VARIANTS.items()}

    results = asyncio.run(measure())
    stalled = sum(r.stall_after is not None for r in _script(runs, seed=34))
    table = Table(
        f"Stall limits: {runs} runs per variant, {CONCURRENCY} at a time, deadline "
        f"{DEADLINE:g} s; the writer streams {TOKENS} tokens in {TOKENS * INTERVAL:g} s and "
        f"stalls for {STALL:g} s mid-answer in {stalled} of them; fallback: {FAST_TOKENS} "
        f"tokens in {FAST_TOKENS * FAST_INTERVAL:g} s",
        (
            "variant",
            "idle cap",
            "complete answers by the deadline",
            "stalls cut",
            "tokens after deadline",
        ),
    )
    section = Section(tables=[table])
    for name, res in results.items():
        table.add(
            name,
            res.cap,
            f"{100.0 * res.answered / runs:.1f} %",
            str(res.stalls_cut),
            str(res.late_tokens),
        )
        section.figures.append(
            (f"stall: complete by the deadline, {name}", f"{res.answered}/{runs}")
        )
    best = results["idle_cap=learned(book)"]
    section.checks.append(
        Check(
            "stall: learned idle cap, answers not complete by the deadline",
            100.0 * (runs - best.answered) / runs,
            100.0 * (1.0 - TARGET),
            " %",
        )
    )
    section.checks.append(
        Check("stall: learned idle cap, tokens after the deadline", best.late_tokens, 0, "")
    )
    table.notes.append(
        "times halved from the issue's (4 s deadline, 10 s stall) to keep the run short"
    )
    table.notes.append(
        "complete: the writer's whole answer or the fallback's, returned before the deadline; "
        "stalls cut: model calls cut as stalled; tokens after deadline: chunks the servers sent "
        "for a run after its deadline"
    )
    return section
