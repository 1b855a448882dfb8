"""A `create_agent` run's records name the step they ran inside (each tool call its own `tools`
node), and the report attributes a cut tool call to its node: that node's time is no healthy
sample, counts as exceeded, and the suggested cap is above the time it was cut at."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

from langgraph_deadline import Terminal, terminal_of, with_deadlines
from langgraph_deadline._core.observe import get_observers, set_observers
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline._report.report import format_report
from langgraph_deadline._report.stats import step_stats
from langgraph_deadline._report.trace import read_trace
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.testing._chat_script import ScriptedToolCall
from tests.chat_models import openai_chat

CAP = 0.5  # each tool call's cap (a cap on the tools node)


@tool
async def check_stock(item: str) -> str:
    """How many of an item are in stock."""
    await asyncio.sleep(30)  # the backend hangs
    return "3"


@tool
async def get_price(item: str) -> str:
    """The price of an item."""
    await asyncio.sleep(0.02)
    return "$2"


@pytest.mark.anyio
async def test_a_cut_tool_call_is_attributed_to_its_own_tools_node(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    calls = [ScriptedToolCall("check_stock", {"item": "pen"}), ScriptedToolCall("get_price")]
    server.enqueue(ChatReply.tool_calls(*calls), ChatReply.text("No stock figure; $2."))
    agent = create_agent(openai_chat(server, max_retries=0), [check_stock, get_price])
    graph = with_deadlines(agent, timeout=10.0, caps={"tools": CAP})
    path = tmp_path / "trace.jsonl"
    saved = get_observers()
    try:
        with JsonlTraceWriter(path) as writer:
            set_observers([writer])
            out = await graph.ainvoke({"messages": [("user", "pens?")]})
    finally:
        set_observers(saved)
    assert terminal_of(out) is Terminal.COMPLETED  # the model went on without the stock

    trace = read_trace([path])
    (run,) = trace.runs
    nodes = {r.link: r for r in run.steps if r.name == "tools"}
    assert len(nodes) == 2  # one tools node per tool call
    stock = next(r for r in run.steps if r.name == "check_stock")
    price = next(r for r in run.steps if r.name == "get_price")
    assert stock.status.cut and not price.status.cut
    assert stock.parent in nodes and price.parent in nodes and stock.parent != price.parent

    stats = {s.name: s for s in step_stats(trace)}
    tools = stats["tools"]
    assert tools.exceeded_rate == 0.5  # the node whose call was cut, not both
    assert tools.healthy == 1
    assert tools.cap_at_least
    assert tools.recommended_cap_ms is not None
    assert tools.recommended_cap_ms > nodes[stock.parent].elapsed_ms > CAP * 1000
    cut = stats["check_stock"]
    assert cut.exceeded_rate == 1.0
    assert cut.recommended_cap_ms is not None and cut.recommended_cap_ms > stock.elapsed_ms
    assert stats["get_price"].exceeded_rate == 0.0
    rows = {
        line.split()[0]: line.split()
        for line in format_report(trace, list(stats.values())).splitlines()
        if line.strip()
    }
    assert rows["tools"][8] == "50%"
    assert rows["tools"][-2].startswith(">=")
