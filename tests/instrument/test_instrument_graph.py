"""Real `with_deadlines` runs that hit their deadline at a known step, seen by every backend:
LangChain callbacks, OpenTelemetry spans, Prometheus samples and the JSON-lines trace carry the
values of the records in state, and none of the run's arguments or message text."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_deadline import (
    DeadlineState,
    StepRecord,
    Terminal,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline._core.observe import set_observers
from langgraph_deadline._instrument.callbacks import RUN_EVENT, STEP_EVENT, CallbacksObserver
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline.types import StepStatus
from tests.chat_models import tool_calls

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry, generate_latest

from langgraph_deadline._instrument.otel import OtelObserver
from langgraph_deadline._instrument.prometheus import PrometheusObserver

TIMEOUT = 0.5
MARGIN = 0.5
ARGUMENT = "sk-live-7f3a-tool-argument"  # what the model passes to the tool
USER_TEXT = "my card is 4111-1111-1111-1111"  # what the user wrote
TOOL_TEXT = "order 42 ships to 1 Secret Lane"  # what the tool answered
SECRETS = (ARGUMENT, USER_TEXT, TOOL_TEXT, "4111", "Secret Lane", "sk-live")


class Msgs(MessagesState, DeadlineState):
    pass


class Collector(BaseCallbackHandler):
    """Collects custom events, and the name of every run they could attach to."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], uuid.UUID]] = []
        self.names: dict[uuid.UUID, str] = {}
        self.threads: set[str] = set()

    def on_custom_event(self, name: str, data: Any, *, run_id: uuid.UUID, **kw: Any) -> None:
        self.events.append((name, data, run_id))
        self.threads.add(threading.current_thread().name)

    def on_chain_start(
        self, serialized: dict[str, Any], inputs: dict[str, Any], *, run_id: uuid.UUID, **kw: Any
    ) -> None:
        self.names[run_id] = kw.get("name") or ""

    def steps(self) -> dict[str, dict[str, Any]]:
        return {data["name"]: data for name, data, _ in self.events if name == STEP_EVENT}


def _agent_graph() -> StateGraph[Any, Any, Any, Any]:
    """agent (asks for a tool with a secret argument) -> tools -> slow (never ends in time)."""

    @deadline_tool(cap=2.0)
    async def lookup(query: str) -> str:
        """Look up an order."""
        return TOOL_TEXT

    async def agent(state: Msgs) -> dict[str, Any]:
        return {"messages": [tool_calls(("lookup", {"query": ARGUMENT}))]}

    async def slow(state: Msgs) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"messages": [AIMessage("too late")]}

    b = StateGraph(Msgs)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode([lookup]))
    b.add_node("slow", slow)
    b.add_edge(START, "agent")
    b.add_edge("agent", "tools")
    b.add_edge("tools", "slow")
    b.add_edge("slow", END)
    return b


def _span_text(spans: tuple[ReadableSpan, ...]) -> str:
    return repr(
        [(s.name, dict(s.attributes or {}), [e.attributes for e in s.events]) for s in spans]
    )


@pytest.mark.anyio
async def test_every_backend_sees_the_step_that_ran_out_with_the_values_in_state(
    tmp_path: Path, otel: tuple[OtelObserver, InMemorySpanExporter]
) -> None:
    tracer, exporter = otel
    registry = CollectorRegistry()
    trace_file = tmp_path / "trace.jsonl"
    collector = Collector()
    with JsonlTraceWriter(trace_file) as writer:
        set_observers([CallbacksObserver(), tracer, PrometheusObserver(registry=registry), writer])
        graph = with_deadlines(_agent_graph(), timeout=TIMEOUT)
        t0 = time.monotonic()
        out = await graph.ainvoke(
            {"messages": [HumanMessage(USER_TEXT)]}, {"callbacks": [collector]}
        )
        took = time.monotonic() - t0

    # The run: cut at `slow`, on time; the secrets are in the state (so the checks below bite).
    assert took < TIMEOUT + MARGIN
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "slow"
    assert all(s in repr(out["messages"]) for s in (ARGUMENT, USER_TEXT, TOOL_TEXT))
    trace: dict[str, StepRecord] = {r.name: r for r in out["deadline_trace"]}
    assert list(trace) == ["agent", "lookup", "tools", "slow"]
    cut = trace["slow"]
    assert cut.status is StepStatus.TIMED_OUT
    assert cut.cancel_source == "run_deadline"
    assert cut.clamped
    assert cut.allocated_ms is not None
    assert cut.allocated_ms < TIMEOUT * 1000
    assert cut.elapsed_ms == pytest.approx(cut.allocated_ms, abs=200)
    run_id = next(data["run_id"] for _, data, _ in collector.events)

    # LangChain callbacks: one event per record, equal to it, attached to the node's own run.
    events = collector.steps()
    assert list(events) == list(trace)
    for name, rec in trace.items():
        assert events[name] == {**rec.to_dict(), "run_id": run_id, "deadline_at": _deadline(out)}
    slow_event_run = next(rid for _, d, rid in collector.events if d["name"] == "slow")
    assert collector.names[slow_event_run] == "slow"
    assert [n for n, _, _ in collector.events].count(RUN_EVENT) == 0  # top level: no parent run

    # OpenTelemetry: a span per step, with the record's values and times; one run span.
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"node agent", "tool lookup", "node tools", "node slow", RUN_SPAN}
    slow_span = spans["node slow"]
    attrs = dict(slow_span.attributes or {})
    assert attrs["deadline.status"] == "timed_out"
    assert attrs["deadline.cancel_source"] == "run_deadline"
    assert attrs["deadline.clamped"] is True
    assert attrs["deadline.kind"] == "node"
    assert attrs["deadline.attempt"] == 1
    assert attrs["deadline.run_id"] == run_id
    for key in ("remaining_ms", "allocated_ms", "elapsed_ms"):
        assert attrs[f"deadline.{key}"] == getattr(cut, key)
    assert slow_span.status.status_code is StatusCode.ERROR
    assert slow_span.start_time == int((cut.started_at or 0) * 1e9)
    assert spans["node agent"].status.status_code is StatusCode.UNSET
    run_attrs = dict(spans[RUN_SPAN].attributes or {})
    assert run_attrs["deadline.terminal"] == "deadline_exceeded"
    assert run_attrs["deadline.step"] == "slow"
    assert run_attrs["deadline.budget_ms"] == pytest.approx(TIMEOUT * 1000, abs=20)

    # Prometheus: latency by status, deadline exceeded at `slow` only, no abandoned work.
    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"langgraph_deadline_{name}", labels)

    slow = {"step": "slow", "kind": "node"}
    assert sample("step_duration_seconds_count", **slow, status="timed_out") == 1
    assert sample("step_duration_seconds_sum", **slow, status="timed_out") == pytest.approx(
        cut.elapsed_ms / 1000
    )
    assert sample("step_duration_seconds_count", step="lookup", kind="tool", status="completed")
    assert sample("step_deadline_exceeded_total", **slow) == 1
    assert sample("step_deadline_exceeded_total", step="agent", kind="node") is None
    assert sample("step_abandoned_total", **slow) is None
    assert sample("runs_total", terminal="deadline_exceeded") == 1

    # The JSON-lines trace: the same records, then the run.
    lines = [json.loads(line) for line in trace_file.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["step"] * 4 + ["run"]
    assert StepRecord.from_dict(lines[3]) == cut
    assert lines[4]["terminal"] == "deadline_exceeded"

    # Nothing sensitive anywhere.
    texts = {
        "callbacks": repr(collector.events),
        "otel": _span_text(exporter.get_finished_spans()),
        "prometheus": generate_latest(registry).decode(),
        "jsonl": trace_file.read_text(),
    }
    for backend, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked into {backend}"


RUN_SPAN = "langgraph_deadline.run"


def _deadline(out: dict[str, Any]) -> float:
    value = out["deadline"]  # epoch seconds in state
    assert isinstance(value, float)
    return value


class _SyncState(DeadlineState):
    log: list[str]


def _sync_graph() -> StateGraph[Any, Any, Any, Any]:
    def quick(state: _SyncState) -> dict[str, Any]:
        return {"log": ["quick"]}

    def blocking(state: _SyncState) -> dict[str, Any]:
        time.sleep(1.0)  # cannot be stopped: abandoned
        return {"log": ["blocking"]}

    b = StateGraph(_SyncState)
    b.add_node("quick", quick)
    b.add_node("blocking", blocking)
    b.add_edge(START, "quick")
    b.add_edge("quick", "blocking")
    b.add_edge("blocking", END)
    return b


@pytest.mark.anyio
async def test_sync_nodes_report_abandoned_work_from_their_threads() -> None:
    registry = CollectorRegistry()
    collector = Collector()
    set_observers([CallbacksObserver(), PrometheusObserver(registry=registry)])
    graph = with_deadlines(_sync_graph(), timeout=0.3)

    out = await graph.ainvoke({"log": []}, {"callbacks": [collector]})
    # ...and a sync `invoke` from a plain thread, callbacks included.
    done: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: done.update(out=graph.invoke({"log": []}, {"callbacks": [collector]}))
    )
    worker.start()
    worker.join(5)

    for result in (out, done["out"]):
        assert result["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert result["deadline_trace"][-1].status is StepStatus.ABANDONED
    statuses = [(d["name"], d["status"]) for n, d, _ in collector.events if n == STEP_EVENT]
    assert statuses == [("quick", "completed"), ("blocking", "abandoned")] * 2
    # `invoke` sends them from the node threads (under `ainvoke` the loop awaits the thread).
    assert collector.threads - {threading.main_thread().name}
    blocking = {"step": "blocking", "kind": "node"}
    assert registry.get_sample_value("langgraph_deadline_step_abandoned_total", blocking) == 2
    assert (
        registry.get_sample_value("langgraph_deadline_step_deadline_exceeded_total", blocking) == 2
    )


async def _custom_events(graph: Any) -> list[tuple[str, str, str]]:
    """(event, step, status) of each custom event `astream_events` shows for one run."""
    seen = []
    async for event in graph.astream_events({"messages": [HumanMessage(USER_TEXT)]}):
        if event["event"] == "on_custom_event":
            data: Any = event["data"]
            seen.append((event["name"], data["name"], data["status"]))
    return seen


@pytest.mark.anyio
async def test_astream_events_shows_the_step_records() -> None:
    set_observers([CallbacksObserver()])
    seen = await _custom_events(with_deadlines(_agent_graph(), timeout=TIMEOUT))
    assert seen == [
        (STEP_EVENT, "agent", "completed"),
        (STEP_EVENT, "lookup", "completed"),
        (STEP_EVENT, "tools", "completed"),
        (STEP_EVENT, "slow", "timed_out"),
    ]


@pytest.mark.anyio
async def test_off_switch_sends_no_custom_events() -> None:
    set_observers([])
    collector = Collector()
    graph = with_deadlines(_sync_graph(), timeout=0.3)
    out = await graph.ainvoke({"log": []}, {"callbacks": [collector]})
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert collector.events == []


@pytest.mark.anyio
async def test_the_default_callbacks_send_only_what_the_deadline_did() -> None:
    set_observers(None)  # the defaults: CallbacksObserver(deadline_only=True)
    seen = await _custom_events(with_deadlines(_agent_graph(), timeout=TIMEOUT))
    assert seen == [(STEP_EVENT, "slow", "timed_out")]  # the completed steps send nothing
