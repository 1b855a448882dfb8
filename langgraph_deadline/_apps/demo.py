"""The demo: one realistic multi-hop agent run against local services with naive per-step
timeouts, with one deadline, and with one deadline and hedged lookups, side by side.

planner (a streaming model that asks for three lookups) -> three tools in parallel against a
slow HTTP service (one request hangs: a straggler, the same request again answers) -> writer (a
streaming model that writes the answer).

One module because the three runs share one scenario, one table and one picture: apart, each
piece would need the others' constants.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from .. import DeadlineState, Hedge, Outcome, deadline_tools, with_deadlines
from ..instrument import JsonlTraceWriter, set_observers

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


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    label: str
    budget: float
    wall: float
    terminal: str
    tool_requests_past_deadline: int
    tokens_after_deadline: int | None
    model_requests_after_deadline: int | None
    lookups_answered: int
    answer: str  # what the user received: the run's last assistant message


class DemoState(MessagesState, DeadlineState):
    pass


def _tools(service: Any, *, naive: bool, hedged: bool = False) -> list[BaseTool]:
    """The same plain `@tool` lookups for every run: the naive one gives each HTTP call its
    own timeout, the deadline runs cap the tools node (`caps={"tools": TOOL_CAP}`), and the
    hedged run makes them read-only deadline tools that send a lookup again after
    `HEDGE_AFTER` s."""

    def make(name: str, delay: float) -> BaseTool:
        sent = itertools.count()

        async def lookup(query: str) -> str:
            timeout = NAIVE_TOOL_TIMEOUT if naive else None  # the deadline run needs none
            wait = 60.0 if name == STRAGGLER and next(sent) == 0 else delay
            async with httpx.AsyncClient(timeout=timeout) as client:
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
    return list(deadline_tools(tools, default=TOOL_CAP, read_only=list(LOOKUPS), hedge=hedge))


def _graph(model: Any, tools: list[BaseTool]) -> StateGraph[Any, Any, Any, Any]:
    planner_model = model.bind_tools(tools)

    async def planner(state: DemoState) -> dict[str, Any]:
        prompt = SystemMessage(
            "Plan the lookups needed to answer. Call order_status, shipping_docs and "
            "warehouse_stock, each with the order number."
        )
        return {"messages": [await planner_model.ainvoke([prompt, *state["messages"]])]}

    async def writer(state: DemoState) -> dict[str, Any]:
        ask = HumanMessage("Write the final answer for the customer from what the tools said.")
        return {"messages": [await model.ainvoke([*state["messages"], ask])]}

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
        ChatReply.text(_tokens(ANSWER), chunk_interval=TOKEN_INTERVAL),
    ]
    with FakeOpenAIServer(script, chunk_interval=0.01) as server:
        yield server


def _tokens(text: str) -> list[str]:
    words = text.split()
    return [words[0], *(f" {w}" for w in words[1:])]


def _answer(state: dict[str, Any]) -> str:
    """The run's answer to the user: its last assistant message that asks no tool."""
    for m in reversed(state.get("messages") or []):
        if isinstance(m, AIMessage) and not m.tool_calls:
            return m.text
    return ""


def _lookups_answered(state: dict[str, Any]) -> int:
    return sum(
        1
        for m in state.get("messages") or []
        if isinstance(m, ToolMessage) and m.status == "success"
    )


async def _one(
    label: str, opts: DemoOptions, *, naive: bool, trace: Path | None, hedged: bool = False
) -> Row:
    from langchain_openai import ChatOpenAI

    from ..testing import SlowServer

    with SlowServer() as service, _model_server(opts) as fake:
        model = ChatOpenAI(
            base_url=opts.base_url or fake.base_url,
            api_key=opts.api_key,  # type: ignore[arg-type]
            model=opts.model,
            streaming=True,
            timeout=NAIVE_MODEL_TIMEOUT if naive else None,
            max_retries=2 if naive else 0,
        )
        builder = _graph(model, _tools(service, naive=naive, hedged=hedged))
        caps = {"tools": TOOL_CAP}  # a cap on each tool call
        ours = with_deadlines(builder, timeout=opts.budget, caps=caps, reserve=RESERVE)
        graph = builder.compile() if naive else ours
        if trace is not None:
            writer = JsonlTraceWriter(trace)
            set_observers([writer])
        t0 = time.monotonic()
        deadline = t0 + opts.budget
        last: dict[str, Any] = {}
        try:
            question = {"messages": [HumanMessage("Where is my order 42, and when will it ship?")]}
            async for mode, chunk in graph.astream(question, stream_mode=["updates", "values"]):
                if mode == "updates":
                    for node in chunk:
                        opts.progress(f"  {label:<20} {time.monotonic() - t0:5.2f} s  {node} done")
                elif isinstance(chunk, dict):
                    last = chunk
        finally:
            if trace is not None:
                set_observers(None)
                writer.close()
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
            tool_requests_past_deadline=past,
            tokens_after_deadline=None if fake is None else fake.chunks_sent_after(deadline),
            model_requests_after_deadline=None
            if fake is None
            else len(fake.requests_after(deadline)),
            lookups_answered=_lookups_answered(last),
            answer=_answer(last),
        )


def _table(rows: list[Row]) -> str:
    head = (
        "run",
        "budget s",
        "wall s",
        "terminal",
        "lookups answered",
        "tool requests alive past deadline",
        "tokens streamed after deadline",
    )

    def n(value: int | None) -> str:
        return "n/a" if value is None else str(value)

    cells = [
        (
            r.label,
            f"{r.budget:.1f}",
            f"{r.wall:.2f}",
            r.terminal,
            f"{r.lookups_answered}/{len(LOOKUPS)}",
            str(r.tool_requests_past_deadline),
            n(r.tokens_after_deadline),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    out.append("")
    out.append("What the user received:")
    for r in rows:
        lines = (r.answer or "(no answer)").splitlines()
        text = "\n".join(textwrap.fill(line, width=96) for line in lines if line.strip())
        out += [f"  {r.label} (after {r.wall:.2f} s):", textwrap.indent(text, "    ")]
    return "\n".join(out)


def _plot(trace: Path, path: str, rows: list[Row]) -> str:
    try:
        from .._report.plot import write_plot
        from .._report.report import format_report
        from .._report.stats import step_stats
        from .._report.trace import read_trace
    except ImportError:
        return "(waterfall skipped: install the 'plot' extra for matplotlib)"
    data = read_trace([trace])
    stats = step_stats(data)
    if not data.runs:
        return "(no run recorded)"
    try:
        answers = [(f"{r.label}, after {r.wall:.2f} s ({r.terminal})", r.answer) for r in rows]
        out = write_plot(
            path,
            data,
            stats,
            data.runs[-1],
            report_text=format_report(data, stats),
            answers=answers,
        )
    except ImportError:
        return "(waterfall skipped: install the 'plot' extra for matplotlib)"
    return f"waterfall of the deadline run: {out}"


def run_demo(opts: DemoOptions) -> str:
    """Run the three variants; return the side-by-side table (and where the waterfall went)."""

    async def both() -> tuple[list[Row], str]:
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "demo-trace.jsonl"
            naive = await _one(
                f"naive ({NAIVE_TOOL_TIMEOUT:.0f}s/tool)", opts, naive=True, trace=None
            )
            ours = await _one("langgraph-deadline", opts, naive=False, trace=trace)
            hedged = await _one("hedged lookups", opts, naive=False, trace=None, hedged=True)
            rows = [naive, ours, hedged]
            note = _plot(trace, opts.plot, rows) if opts.plot else ""
        return rows, note

    rows, note = asyncio.run(both())
    return _table(rows) + ("\n\n" + note if note else "")
