"""Agents: what a model keeps streaming after the run's deadline, measured at the server.

The same `create_agent` agent, with the real `ChatOpenAI(streaming=True)` talking over loopback
to the local OpenAI-compatible server (`FakeOpenAIServer`), which streams a `TOKENS`-token answer,
one chunk every `INTERVAL` s: longer than the `DEADLINE`. `RUNS` runs per variant (`QUICK_RUNS`
with `--quick`), `BATCH` at a time. Per run, at the server:

- tokens after the deadline: token chunks the server sent after the run's deadline instant;
- stop: when the server stopped sending (the client disconnected, or the answer ended), relative
  to the deadline; negative when it was before it;
- late requests: requests that started after the deadline (SDK retries).

Variants:
- DeadlineMiddleware: `middleware=[DeadlineMiddleware(timeout=DEADLINE)]`; the deadline is the
  one the run stamped in state. Every run must end `deadline_exceeded`.
- per-request timeout: no middleware, `ChatOpenAI(timeout=DEADLINE)`; the deadline is the call
  instant plus `DEADLINE`. The SDK's timeout is per read, and a chunk arrives every `INTERVAL`:
  it never fires, and the whole answer streams.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langgraph_deadline import Deadline, Terminal
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer

from ._common import Check, Section, Table, percentile

__all__ = ["DEADLINE", "RUNS", "run"]

RUNS = 100
QUICK_RUNS = 30
BATCH = 10
DEADLINE = 0.5
INTERVAL = 0.02
TOKENS = 60  # 1.2 s of answer: 35 chunks past the deadline if nothing stops it
TARGET_CHUNKS_P99 = 1.0
TARGET_STOP_P99_MS = 50.0


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return query


class _Sample:
    __slots__ = ("chunks_after", "late_requests", "overshoot_ms", "stop_ms", "terminal")

    def __init__(self) -> None:
        self.chunks_after = 0
        self.late_requests = 0
        self.stop_ms = float("nan")
        self.overshoot_ms = float("nan")
        self.terminal = ""


async def _one(
    agent: Any, deadline_of: Callable[[dict[str, Any], float], float]
) -> tuple[str, float, float, dict[str, Any]]:
    marker = uuid.uuid4().hex
    called = time.monotonic()
    out: dict[str, Any] = await agent.ainvoke({"messages": [HumanMessage(f"count {marker}")]})
    returned = time.monotonic()
    return marker, deadline_of(out, called), returned, out


async def _variant(
    server: FakeOpenAIServer,
    agent: Any,
    runs: int,
    deadline_of: Callable[[dict[str, Any], float], float],
) -> list[_Sample]:
    samples: list[_Sample] = []
    done = 0
    seen = len(server.requests)
    while done < runs:
        size = min(BATCH, runs - done)
        gc.collect()
        results = await asyncio.gather(*(_one(agent, deadline_of) for _ in range(size)))
        if not await server.await_idle(DEADLINE + TOKENS * INTERVAL + 5.0):
            raise AssertionError("the server still streams long after every answer should end")
        by_marker: dict[str, list[Any]] = {}
        for r in server.requests[seen:]:
            by_marker.setdefault(str(r.body["messages"][-1]["content"]).split()[-1], []).append(r)
        seen = len(server.requests)
        for marker, deadline, returned, out in results:
            reqs = by_marker[marker]  # the first request, and any SDK retries of it
            req = reqs[-1]
            s = _Sample()
            s.chunks_after = sum(r.chunks_sent_after(deadline) for r in reqs)
            stopped = req.disconnected if req.disconnected is not None else req.ended
            s.stop_ms = (stopped - deadline) * 1000.0 if stopped is not None else float("nan")
            s.late_requests = sum(r.started > deadline for r in reqs)
            s.overshoot_ms = (returned - deadline) * 1000.0
            outcome = out.get("deadline_outcome")
            s.terminal = str(outcome.terminal) if outcome is not None else "answered, late"
            samples.append(s)
        done += size
    return samples


def run(*, quick: bool) -> Section:
    """Measure tokens after the deadline and the deadline-to-disconnect time, both variants."""
    runs = QUICK_RUNS if quick else RUNS
    reply = ChatReply.counting(TOKENS, chunk_interval=INTERVAL)

    def stamped(out: dict[str, Any], called: float) -> float:
        return Deadline.at(out["deadline"])._mono

    def from_call(out: dict[str, Any], called: float) -> float:
        return called + DEADLINE

    async def measure() -> dict[str, list[_Sample]]:
        results: dict[str, list[_Sample]] = {}
        with FakeOpenAIServer(default_reply=reply) as server:
            model = ChatOpenAI(
                base_url=server.base_url,
                api_key=SecretStr("test"),
                model="gpt-fake",
                streaming=True,
            )
            agent = create_agent(model, [lookup], middleware=[DeadlineMiddleware(timeout=DEADLINE)])
            results["middleware"] = await _variant(server, agent, runs, stamped)
        with FakeOpenAIServer(default_reply=reply) as server:
            model = ChatOpenAI(
                base_url=server.base_url,
                api_key=SecretStr("test"),
                model="gpt-fake",
                streaming=True,
                timeout=DEADLINE,
            )
            agent = create_agent(model, [lookup])
            results["timeout"] = await _variant(server, agent, runs, from_call)
        return results

    results = asyncio.run(measure())
    labels = {
        "middleware": f"DeadlineMiddleware(timeout={DEADLINE:g})",
        "timeout": f"ChatOpenAI(timeout={DEADLINE:g}) only",
    }
    table = Table(
        f"Agents: {runs} runs x 2 variants, {BATCH} at a time; a {TOKENS}-token answer, one chunk "
        f"every {INTERVAL * 1000:g} ms; {DEADLINE:g} s deadline",
        (
            "variant",
            "tokens after p50",
            "p99",
            "max",
            "stop p50 ms",
            "p99 ms",
            "late requests",
            "ends as",
        ),
    )
    for name, samples in results.items():
        chunks = [float(s.chunks_after) for s in samples]
        stops = [s.stop_ms for s in samples]
        ends: dict[str, int] = {}
        for s in samples:
            ends[s.terminal] = ends.get(s.terminal, 0) + 1
        table.add(
            labels[name],
            f"{percentile(chunks, 50):.0f}",
            f"{percentile(chunks, 99):.0f}",
            f"{max(chunks):.0f}",
            f"{percentile(stops, 50):+.1f}",
            f"{percentile(stops, 99):+.1f}",
            str(sum(s.late_requests for s in samples)),
            ", ".join(f"{k} x{v}" for k, v in sorted(ends.items())),
        )
    expected = str(Terminal.DEADLINE_EXCEEDED)
    if any(s.terminal != expected for s in results["middleware"]):
        raise AssertionError("every DeadlineMiddleware run must end deadline_exceeded")
    table.notes.append(
        "tokens after: token chunks the server sent after the run's deadline (the middleware's "
        "stamped deadline; for the timeout-only agent, call instant + deadline)"
    )
    table.notes.append(
        "stop: when the server saw the client leave (or sent the answer's end), minus the "
        "deadline; the middleware's model budget ends a 10 ms hand-off before it"
    )
    table.notes.append(
        "the OpenAI SDK's timeout is per read: a stream that trickles never trips it, so the "
        "timeout-only agent streams every token of the answer"
    )
    mw = results["middleware"]
    chunks_p99 = percentile([float(s.chunks_after) for s in mw], 99)
    stop_p99 = percentile([s.stop_ms for s in mw], 99)
    section = Section(tables=[table])
    section.figures.append(
        (
            "agent: tokens after the deadline p50 / p99, DeadlineMiddleware",
            _pair([float(s.chunks_after) for s in mw], "{:.0f}", ""),
        )
    )
    section.figures.append(
        (
            "agent: tokens after the deadline p50 / p99, ChatOpenAI timeout only",
            _pair([float(s.chunks_after) for s in results["timeout"]], "{:.0f}", ""),
        )
    )
    section.figures.append(
        (
            "agent: deadline -> server disconnect p50 / p99, DeadlineMiddleware",
            _pair([s.stop_ms for s in mw], "{:+.1f}", " ms"),
        )
    )
    section.checks.append(
        Check("agent tokens after the deadline p99", chunks_p99, TARGET_CHUNKS_P99, " chunks")
    )
    section.checks.append(
        Check("agent deadline -> disconnect p99", stop_p99, TARGET_STOP_P99_MS, " ms")
    )
    return section


def _pair(values: list[float], fmt: str, unit: str) -> str:
    return f"{fmt.format(percentile(values, 50))} / {fmt.format(percentile(values, 99))}{unit}"
