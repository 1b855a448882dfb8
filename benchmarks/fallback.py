"""Model fallback that knows the clock: how many calls answer by their deadline, and with which
model, when the main model is often too slow for the time a request has.

Two fake models behind the local OpenAI-compatible server (`FakeOpenAIServer`), each called
with the real `ChatOpenAI(streaming=True)` over loopback: `gpt-slow` answers after a lognormal
delay (median `SLOW[0]` s), `gpt-fast` after one of median `FAST[0]` s. Each call has its own
deadline, drawn from `DEADLINES` (a tight, a middling and a generous request). `RUNS` calls per
variant (`QUICK_RUNS` with `--quick`), `CONCURRENCY` at a time; every variant gets the same
seeded delays and deadlines. A call answers by its deadline when it returned an answer before
its deadline passed.

Variants:
- main only: `budgeted_model(slow)`, cut at the deadline.
- LangChain `with_fallbacks`: `slow.with_fallbacks([fast])` under `asyncio.timeout(deadline)`;
  it falls back on errors only, and the timeout cancels the whole chain.
- fallback after a cut: `budgeted_model(slow, cap=CAP, fallbacks=[fast])`, no book: the main is
  cut at its cap when time is left, and the fast model gets the rest.
- learned fallback: the same with `book=` (a `LatencyBook` warmed by `WARM` calls of the
  main, still learning during the runs): the main is passed over when its learned p90 does not
  fit the call's budget (no request is sent to it).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langgraph_deadline import DeadlineExceeded, budgeted_model, deadline_scope
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer

from ._common import Section, Table, percentile

__all__ = ["run"]

RUNS = 240
QUICK_RUNS = 60
WARM = 30
CONCURRENCY = 24
DEADLINES = (0.4, 0.8, 1.6)
SLOW = (0.7, 0.45)  # median seconds to the answer, lognormal sigma
FAST = (0.08, 0.3)
CAP = 0.5
MAIN, BACKUP = "main answer", "fallback answer"


def _draws(n: int, seed: int) -> list[tuple[float, float, float]]:
    """(deadline, slow delay, fast delay) for each call."""
    rng = random.Random(seed)
    return [
        (
            rng.choice(DEADLINES),
            SLOW[0] * rng.lognormvariate(0.0, SLOW[1]),
            FAST[0] * rng.lognormvariate(0.0, FAST[1]),
        )
        for _ in range(n)
    ]


def _chat(server: FakeOpenAIServer, model: str) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.base_url,
        api_key=SecretStr("test"),
        model=model,
        streaming=True,
        max_retries=0,
    )


class _Call:
    __slots__ = ("answered", "by", "late_ms")

    def __init__(self, by: str, late_ms: float) -> None:
        self.by = by  # "main", "fallback" or "none"
        self.late_ms = late_ms  # return instant minus the deadline
        self.answered = by != "none" and late_ms <= 0.0


Invoke = Callable[[float], Awaitable[Any]]


async def _one(invoke: Invoke, deadline: float) -> _Call:
    start = time.monotonic()
    try:
        reply = await invoke(deadline)
    except (DeadlineExceeded, TimeoutError):
        reply = None
    late = (time.monotonic() - start - deadline) * 1000.0
    text = reply.content if isinstance(reply, BaseMessage) else ""
    by = "main" if text == MAIN else "fallback" if text == BACKUP else "none"
    return _Call(by, late)


async def _variant(
    draws: list[tuple[float, float, float]], make: Callable[..., Awaitable[Invoke]]
) -> tuple[list[_Call], int]:
    """Run every draw through the call `make(slow_model, fast_model)` builds (a variant that
    warms up first gets the warm-up replies before the draws')."""
    warm = _warm_delays() if make is _learned else []
    slow_replies = [ChatReply.text(MAIN, delay=s) for s in warm]
    slow_replies += [ChatReply.text(MAIN, delay=s) for _, s, _ in draws]
    fast_replies = [ChatReply.text(BACKUP, delay=f) for _, _, f in draws]
    async with (
        FakeOpenAIServer(slow_replies, default_reply=ChatReply.text(MAIN, delay=SLOW[0])) as slow,
        FakeOpenAIServer(fast_replies, default_reply=ChatReply.text(BACKUP)) as fast,
    ):
        invoke = await make(_chat(slow, "gpt-slow"), _chat(fast, "gpt-fast"))
        sent_before = len(slow.requests)
        calls: list[_Call] = []
        for i in range(0, len(draws), CONCURRENCY):
            batch = draws[i : i + CONCURRENCY]
            calls += await asyncio.gather(*(_one(invoke, d) for d, _, _ in batch))
        await slow.await_idle(5.0)
        return calls, len(slow.requests) - sent_before


async def _main_only(slow: ChatOpenAI, fast: ChatOpenAI) -> Invoke:
    llm = budgeted_model(slow)

    async def invoke(deadline: float) -> Any:
        async with deadline_scope(deadline):
            return await llm.ainvoke("question")

    return invoke


async def _with_fallbacks(slow: ChatOpenAI, fast: ChatOpenAI) -> Invoke:
    chain = slow.with_fallbacks([fast])

    async def invoke(deadline: float) -> Any:
        async with asyncio.timeout(deadline):
            return await chain.ainvoke("question")

    return invoke


async def _after_cut(slow: ChatOpenAI, fast: ChatOpenAI) -> Invoke:
    llm = budgeted_model(slow, cap=CAP, fallbacks=[fast])

    async def invoke(deadline: float) -> Any:
        async with deadline_scope(deadline):
            return await llm.ainvoke("question")

    return invoke


_BOOKS: list[LatencyBook] = []  # held here: a book listens only while referenced


async def _learned(slow: ChatOpenAI, fast: ChatOpenAI) -> Invoke:
    book = LatencyBook()
    _BOOKS.append(book)
    llm = budgeted_model(slow, fallbacks=[fast], book=book)
    warm = budgeted_model(slow, name="gpt-slow")
    for i in range(0, WARM, CONCURRENCY):  # the book hears the main answer a few times
        n = min(CONCURRENCY, WARM - i)
        await asyncio.gather(*(warm.ainvoke("warm-up") for _ in range(n)))

    async def invoke(deadline: float) -> Any:
        async with deadline_scope(deadline):
            return await llm.ainvoke("question")

    return invoke


VARIANTS: dict[str, Callable[..., Awaitable[Invoke]]] = {
    "main only (budgeted_model)": _main_only,
    "LangChain with_fallbacks + asyncio.timeout": _with_fallbacks,
    f"fallbacks=[fast], main cap {CAP:g} s": _after_cut,
    "fallbacks=[fast] + LatencyBook (p90)": _learned,
}


def run(*, quick: bool) -> Section:
    """Share of calls that answer by their deadline, and which model answered, per variant."""
    runs = QUICK_RUNS if quick else RUNS
    draws = _draws(runs, seed=7)

    async def measure() -> dict[str, tuple[list[_Call], int]]:
        return {name: await _variant(draws, make) for name, make in VARIANTS.items()}

    results = asyncio.run(measure())
    _BOOKS.clear()
    table = Table(
        f"Model fallback: {runs} calls per variant, {CONCURRENCY} at a time; deadlines "
        f"{', '.join(f'{d:g}' for d in DEADLINES)} s; gpt-slow median {SLOW[0]:g} s, gpt-fast "
        f"median {FAST[0]:g} s",
        (
            "variant",
            "answered by deadline",
            *(f"at {d:g} s" for d in DEADLINES),
            "by main",
            "by fallback",
            "requests to slow",
            "overshoot p99 ms",
        ),
    )
    section = Section(tables=[table])
    per_deadline = [d for d, _, _ in draws]
    for name, (calls, sent) in results.items():
        ok = sum(c.answered for c in calls)
        cells = []
        for d in DEADLINES:
            mine = [c for c, dd in zip(calls, per_deadline, strict=True) if dd == d]
            cells.append(f"{100.0 * sum(c.answered for c in mine) / max(1, len(mine)):.0f} %")
        late = [max(0.0, c.late_ms) for c in calls]
        table.add(
            name,
            f"{100.0 * ok / len(calls):.0f} %",
            *cells,
            str(sum(c.by == "main" and c.answered for c in calls)),
            str(sum(c.by == "fallback" and c.answered for c in calls)),
            str(sent),
            f"{percentile(late, 99):.1f}",
        )
        section.figures.append(
            (f"fallback: answered by the deadline, {name}", f"{ok}/{len(calls)}")
        )
    table.notes.append(
        "answered by deadline: an answer returned before the call's deadline; by main / by "
        "fallback: which model gave those answers"
    )
    table.notes.append(
        "requests to slow: requests the slow model's server received (the learned variant's "
        f"{WARM} warm-up calls left out): a main passed over is never sent a request"
    )
    table.notes.append(
        "overshoot p99: how long after its deadline a call returned, answered or not (0: before)"
    )
    return section


def _warm_delays() -> list[float]:
    rng = random.Random(11)
    return [SLOW[0] * rng.lognormvariate(0.0, SLOW[1]) for _ in range(WARM)]
