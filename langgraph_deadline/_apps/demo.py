"""The demo: one realistic multi-hop agent run against local services with naive per-step
timeouts, with one deadline, with one deadline and hedged lookups, and with one deadline and
learned caps, side by side.

planner (a streaming model that asks for three lookups) -> three tools in parallel against a
slow HTTP service (one request hangs: a straggler, the same request again answers) -> writer (a
streaming model that writes the answer).

The learned run's `LatencyBook` hears the deadline runs before it, a few warm-up rounds of the
lookups without the straggler and a few short answers of the model (the book's history of
ordinary traffic), and is attached to the run (`with_deadlines(book=)`): each lookup's cap is
then its learned p90 x 2, at most the deadline run's cap, so the hanging request is cut once it
is late by what that lookup usually takes; the writer's learned time is kept back from the
lookups, and its model call gets the `max_tokens` that fits and is told that length (the
length hint): the local model, a stand-in for one that keeps to the length it is asked for
(`follows_length_hint`), answers the sentences that fit, and the run completes in time.

The runs share one scenario (this module); the table and the picture are `demo_output.py`,
the learned run's warm-up and caps `demo_learned.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from .. import (
    DeadlineState,
    Hedge,
    Outcome,
    budgeted_model,
    deadline_tools,
    with_deadlines,
)
from ..instrument import JsonlTraceWriter, set_observers
from ..learn import LatencyBook, Learned
from .demo_learned import learned_note, learned_rule, warm_up, warm_up_writer
from .demo_output import Row, Span, answer_of, lookups_answered, plot, quiet_run_log, span_of, table

__all__ = ["DemoOptions", "run_demo"]

NAIVE_TOOL_TIMEOUT = 8.0  # what teams put on each tool
NAIVE_MODEL_TIMEOUT = 20.0  # and on each model call
TOOL_CAP = 2.0  # the deadline run's cap per tool call (it still never exceeds what is left)
RESERVE = 0.2  # the deadline run keeps this to tell the user how it ended
TOKEN_INTERVAL = 0.04  # seconds between streamed tokens: a 6 s answer
ANSWER = (
    "Thanks for your patience. Your order 42 was packed on Friday and shipped on Monday with "
    "the standard carrier; the tracking number is in your confirmation e-mail. The shipping "
    "documents show two parcels: the first left our Leeds warehouse on Monday evening and is "
    "due on Thursday, the second is waiting for the last item to come back in stock. As soon "
    "as the warehouse confirms the stock level we will send the second parcel by express "
    "delivery at no extra cost, and you will get a new tracking link the same day. We are "
    "sorry for the wait, and thank you again for shopping with us."
)
ANSWER_TOKENS = len(ANSWER.split())  # about 150 words, one token each
LOOKUPS = {"order_status": 0.3, "shipping_docs": 0.5, "warehouse_stock": 0.4}  # service delays
STRAGGLER = "warehouse_stock"  # its first request hangs (60 s); the same request again answers
HEDGE_AFTER = 0.6  # the hedged run sends a lookup again when it has not answered by then
FOUND = {  # what each lookup answers, when it answers
    "order_status": "order 42 packed on Friday, shipped on Monday (standard carrier)",
    "shipping_docs": "2 parcels: #1 left Leeds on Monday, due Thursday; #2 waits for stock",
    "warehouse_stock": "the missing item is back in stock on Wednesday",
}


@dataclasses.dataclass(frozen=True, slots=True)
class DemoOptions:
    budget: float = 4.0
    base_url: str | None = None  # a real OpenAI-compatible endpoint instead of the local one
    api_key: str = "not-needed"
    model: str = "fake-model"
    plot: str | None = "langgraph-deadline-demo.png"
    progress: Callable[[str], None] = print


class DemoState(MessagesState, DeadlineState):
    pass


def _tools(
    service: Any, *, naive: bool, hedged: bool = False, straggle: bool = True
) -> list[BaseTool]:
    """The same plain `@tool` lookups for every run: the naive one gives each HTTP call its
    own timeout, the deadline runs cap the tools node (`caps={"tools": TOOL_CAP}`, or learned
    caps), and the hedged run makes them read-only deadline tools that send a lookup again
    after `HEDGE_AFTER` s. Without `straggle` no request hangs (the learned run's warm-up)."""

    def make(name: str, delay: float) -> BaseTool:
        sent = itertools.count()

        async def lookup(query: str) -> str:
            timeout = NAIVE_TOOL_TIMEOUT if naive else None  # the deadline run needs none
            hangs = straggle and name == STRAGGLER and next(sent) == 0
            wait = 60.0 if hangs else delay
            async with httpx.AsyncClient(timeout=timeout, verify=_tls()) as client:
                r = await client.get(service.url(f"/slow?delay={wait}&tool={name}"))
            r.raise_for_status()
            return FOUND[name]

        lookup.__name__ = name
        lookup.__doc__ = f"Look up {name.replace('_', ' ')} for an order."
        return tool(lookup)

    tools = [make(name, delay) for name, delay in LOOKUPS.items()]
    if not hedged:
        return tools
    hedge = Hedge(after=HEDGE_AFTER)
    return list(deadline_tools(tools, default_cap=TOOL_CAP, read_only=list(LOOKUPS), hedge=hedge))


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: building one costs tens of ms of CPU, which would
    show in the lookups' latencies (and in what the learned run's book hears)."""
    return ssl.create_default_context()


def _graph(
    model: Any, tools: list[BaseTool], writer_model: Any = None
) -> StateGraph[Any, Any, Any, Any]:
    planner_model = model.bind_tools(tools)
    writer_model = model if writer_model is None else writer_model

    async def planner(state: DemoState) -> dict[str, Any]:
        prompt = SystemMessage(
            "Plan the lookups needed to answer. Call order_status, shipping_docs and "
            "warehouse_stock, each with the order number."
        )
        return {"messages": [await planner_model.ainvoke([prompt, *state["messages"]])]}

    async def writer(state: DemoState) -> dict[str, Any]:
        ask = HumanMessage("Write the final answer for the customer from what the tools said.")
        return {"messages": [await writer_model.ainvoke([*state["messages"], ask])]}

    def route(state: DemoState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "writer"

    b = StateGraph(DemoState)
    b.add_node("planner", planner)
    b.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    b.add_node("writer", writer)
    b.add_edge(START, "planner")
    b.add_conditional_edges("planner", route, ["tools", "writer"])
    b.add_edge("tools", "writer")
    b.add_edge("writer", END)
    return b


@contextlib.contextmanager
def _model_server(opts: DemoOptions) -> Iterator[Any]:
    if opts.base_url is not None:
        yield None
        return
    from ..testing import ChatReply, FakeOpenAIServer

    calls = [ChatReply.tool_call(name, {"query": "order 42"}) for name in LOOKUPS]
    script = [
        ChatReply.tool_calls(*(c.calls[0] for c in calls)),
        # a stand-in for a model that keeps to the length its prompt asks for (the length hint)
        ChatReply.text(_tokens(ANSWER), chunk_interval=TOKEN_INTERVAL, follows_length_hint=True),
    ]
    with FakeOpenAIServer(script, chunk_interval=0.01) as server:
        yield server


def _tokens(text: str) -> list[str]:
    words = text.split()
    return [words[0], *(f" {w}" for w in words[1:])]


async def _one(
    label: str,
    opts: DemoOptions,
    *,
    naive: bool,
    trace: Path | None,
    hedged: bool = False,
    tool_cap: float | Learned = TOOL_CAP,
    book: LatencyBook | None = None,
) -> Row:
    from ..testing import SlowServer

    with SlowServer() as service, _model_server(opts) as fake:
        model = _chat_model(opts, fake, naive=naive)
        # With a book attached, the writer's budgeted model gets the max_tokens that fits.
        writer = None if book is None else budgeted_model(model)
        builder = _graph(model, _tools(service, naive=naive, hedged=hedged), writer)
        caps = {"tools": tool_cap}  # a cap on each tool call
        ours = with_deadlines(builder, timeout=opts.budget, caps=caps, reserve=RESERVE, book=book)
        graph = builder.compile() if naive else ours
        if trace is not None:
            traced = JsonlTraceWriter(trace)
            set_observers([traced])
        t0, started_at = time.monotonic(), time.time()
        deadline = t0 + opts.budget
        try:
            last, lookups_done, nodes = await _watch(graph, label, opts, t0)
        finally:
            if trace is not None:
                set_observers(None)
                traced.close()
        wall = time.monotonic() - t0
        await asyncio.sleep(0.1)  # let the servers see closed connections
        outcome = last.get("deadline_outcome")
        if isinstance(outcome, Outcome):
            terminal = str(outcome.terminal)
        else:
            terminal = "completed, late" if wall > opts.budget else "completed"
        past = sum(
            1
            for r in service.requests
            if (r.disconnected or r.answered or time.monotonic()) > deadline + 0.05
        )
        return Row(
            label=label,
            budget=opts.budget,
            wall=wall,
            terminal=terminal,
            lookups_done=lookups_done,
            tool_requests_past_deadline=past,
            tokens_after_deadline=None if fake is None else fake.chunks_sent_after(deadline),
            model_requests_after_deadline=None
            if fake is None
            else len(fake.requests_after(deadline)),
            lookups_answered=lookups_answered(last),
            answer=answer_of(last),
            started_at=started_at,
            nodes=tuple(nodes),
        )


def _chat_model(opts: DemoOptions, fake: Any, *, naive: bool) -> Any:
    """The demo's `ChatOpenAI`: the naive run's with the fixed timeout and retries users
    write, ours with neither (the deadline bounds its calls)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=opts.base_url or fake.base_url,
        api_key=opts.api_key,  # type: ignore[arg-type]
        model=opts.model,
        streaming=True,
        timeout=NAIVE_MODEL_TIMEOUT if naive else None,
        max_retries=2 if naive else 0,
    )


async def _watch(
    graph: Any, label: str, opts: DemoOptions, t0: float
) -> tuple[dict[str, Any], float | None, list[Span]]:
    """Ask the question and follow the run's stream, saying each node as it ends: the last
    state, when the lookups were done (None: never), and each node's start and end."""
    last: dict[str, Any] = {}
    lookups_done = None
    reported: set[str] = set()
    nodes: list[Span] = []  # each node's start and end, as the stream told them
    question = {"messages": [HumanMessage("Where is my order 42, and when will it ship?")]}
    async for mode, chunk in graph.astream(question, stream_mode=["updates", "values"]):
        if mode == "updates":
            for node in chunk:
                at = time.monotonic() - t0
                if node in reported or node == "deadline":  # the closing update
                    end = "completed" if node == "deadline" else f"ended in {node}"
                    opts.progress(f"  {label:<20} {at:5.2f} s  run {end}")
                    continue
                reported.add(node)
                lookups_done = at if node == "tools" else lookups_done
                nodes.append(span_of(node, chunk, nodes[-1].end if nodes else 0.0, at))
                opts.progress(f"  {label:<20} {at:5.2f} s  {node} {nodes[-1].said}")
        elif isinstance(chunk, dict):
            last = chunk
    return last, lookups_done, nodes


def _warm_up_tools(service: Any) -> list[BaseTool]:
    return _tools(service, naive=False, straggle=False)


def run_demo(opts: DemoOptions) -> str:
    """Run the four variants; return the side-by-side table (and where the waterfall went)."""

    async def all_runs() -> tuple[list[Row], list[str], str]:
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "demo-trace.jsonl"
            naive = await _one(
                f"naive ({NAIVE_TOOL_TIMEOUT:.0f}s/tool)", opts, naive=True, trace=None
            )
            book = LatencyBook()  # hears every step from here on (the naive run has none)
            try:
                ours = await _one("langgraph-deadline", opts, naive=False, trace=trace)
                hedged = await _one("hedged lookups", opts, naive=False, trace=None, hedged=True)
                await warm_up(_warm_up_tools, TOOL_CAP, opts.progress)
                if opts.base_url is None:  # a real endpoint's writer learns in the run itself
                    await warm_up_writer(book, ANSWER_TOKENS, TOKEN_INTERVAL, opts.progress)
                rule = learned_rule(book, TOOL_CAP)
                note = learned_note(rule, book, list(LOOKUPS), TOOL_CAP)
                smart = await _one(
                    "book attached",
                    opts,
                    naive=False,
                    trace=None,
                    tool_cap=rule,
                    book=book,
                )
            finally:
                book.detach()
            rows = [naive, ours, hedged, smart]
            where = plot(trace, opts.plot, rows, traced=ours, beside=naive) if opts.plot else ""
        return rows, [note], where

    with quiet_run_log():
        rows, notes, where = asyncio.run(all_runs())
    return table(rows, len(LOOKUPS), notes) + ("\n\n" + where if where else "")
