"""A step cut at its idle cap is told apart everywhere it is seen: its record, the Prometheus
stalled counter, its OpenTelemetry span, the JSONL trace and the report read from it. A real
`ChatOpenAI` stream stalls mid-answer against `FakeOpenAIServer`."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from langgraph_deadline import DeadlineExceeded, budgeted_model, deadline_scope
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline._instrument.otel import OtelObserver
from langgraph_deadline._instrument.prometheus import PrometheusObserver
from langgraph_deadline._report.report import format_report
from langgraph_deadline._report.stats import step_stats
from langgraph_deadline._report.trace import read_trace
from langgraph_deadline.instrument import set_observers
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.agents.support import chat_named


@pytest.mark.anyio
async def test_a_stalled_model_call_is_counted_spanned_traced_and_reported(
    server: FakeOpenAIServer,
    otel: tuple[OtelObserver, InMemorySpanExporter],
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    observer, spans = otel
    path = tmp_path / "trace.jsonl"
    with JsonlTraceWriter(path) as writer:
        set_observers([PrometheusObserver(registry=registry), observer, writer])
        server.enqueue(ChatReply.counting(20, chunk_interval=0.01).stalling(after=3))
        llm = budgeted_model(chat_named(server, "gpt-stall"), idle_cap=0.3)
        async with deadline_scope(5.0):
            with pytest.raises(DeadlineExceeded, match="stalled"):
                await llm.ainvoke("hi")

    labels = {"step": "gpt-stall", "kind": "model"}
    assert registry.get_sample_value("langgraph_deadline_step_stalled_total", labels) == 1.0
    (span,) = [s for s in spans.get_finished_spans() if s.name == "model gpt-stall"]
    assert span.attributes is not None
    assert span.attributes["deadline.cancel_source"] == "stalled"
    assert str(span.attributes["deadline.note"]).startswith("no progress for 0.")
    assert float(span.attributes["deadline.gap_ms"]) >= 300.0  # type: ignore[arg-type]
    trace = read_trace([path])
    text = format_report(trace, step_stats(trace))
    (stats,) = [s for s in step_stats(trace) if s.name == "gpt-stall"]
    assert stats.stalled == 1
    (row,) = [line.split() for line in text.splitlines() if line.startswith("gpt-stall")]
    assert row[-4:-2] == ["0", "1"]  # abandoned 0, stalled 1 (then the cap and its sample count)
    assert "stalled: cut at their idle cap" in text
