"""Tokens a model streamed after its deadline reach every backend: a LangChain custom event, an
OpenTelemetry event (or span), a JSON line, a Prometheus count; and a real streamed call cut by
its deadline reports its late token to the OTel exporter and to the trace file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda

from langgraph_deadline import Terminal
from langgraph_deadline._core import sync_http
from langgraph_deadline._core.observe import TokensEvent, set_observers
from langgraph_deadline._instrument.callbacks import TOKENS_EVENT, CallbacksObserver
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline._report.trace import read_trace
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from tests.chat_models import openai_chat as chat

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_deadline._instrument.otel import OtelObserver

MARGIN = 0.5
SLOW = 0.05
EVENT = TokensEvent(step="model", tokens=3, run_id="run-1")


class Collector(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: uuid.UUID, **kw: Any) -> None:
        self.events.append((name, data))


def test_callbacks_send_the_late_tokens_to_the_current_runnable() -> None:
    seen = Collector()

    def body(x: int) -> int:
        CallbacksObserver().on_tokens_after_deadline(EVENT)
        return x

    RunnableLambda(body).invoke(1, {"callbacks": [seen]})
    assert seen.events == [(TOKENS_EVENT, {"run_id": "run-1", "step": "model", "tokens": 3})]
    assert TOKENS_EVENT == "langgraph_deadline.tokens_after_deadline"


def test_callbacks_send_nothing_outside_a_runnable() -> None:
    CallbacksObserver().on_tokens_after_deadline(EVENT)  # no parent run: dropped, no error


def test_otel_adds_an_event_to_the_recording_span(
    otel: tuple[OtelObserver, InMemorySpanExporter],
) -> None:
    obs, exporter = otel
    with obs._tracer.start_as_current_span("request"):
        obs.on_tokens_after_deadline(EVENT)
    [request] = exporter.get_finished_spans()
    [event] = request.events
    assert event.name == "langgraph_deadline.tokens_after_deadline"
    assert dict(event.attributes or {}) == {
        "deadline.run_id": "run-1",
        "deadline.step": "model",
        "deadline.tokens": 3,
    }


def test_otel_without_a_recording_span_writes_a_span_of_its_own(
    otel: tuple[OtelObserver, InMemorySpanExporter],
) -> None:
    obs, exporter = otel
    obs.on_tokens_after_deadline(TokensEvent(step="model", tokens=1))
    [span] = exporter.get_finished_spans()
    assert span.name == "langgraph_deadline.tokens_after_deadline"
    assert dict(span.attributes or {}) == {"deadline.step": "model", "deadline.tokens": 1}


def test_jsonl_writes_one_line_that_the_report_skips(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with JsonlTraceWriter(path) as writer:
        writer.on_tokens_after_deadline(EVENT)
    [line] = path.read_text().splitlines()
    assert json.loads(line) == {
        "v": 1,
        "event": "tokens_after_deadline",
        "run_id": "run-1",
        "step": "model",
        "tokens": 3,
    }
    trace = read_trace([path])
    assert trace.bad_lines == 0 and not trace.runs


def test_prometheus_counts_the_late_tokens() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from langgraph_deadline._instrument.prometheus import PrometheusObserver

    registry = CollectorRegistry()
    PrometheusObserver(registry=registry).on_tokens_after_deadline(EVENT)
    sample = registry.get_sample_value(
        "langgraph_deadline_tokens_after_deadline_total", {"step": "model"}
    )
    assert sample == 3


@pytest.fixture
def unclosed(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx as it comes, unwrapped: an abandoned sync step's connection is then not closed at
    its deadline (as for a client the library cannot reach), and tokens still arrive late."""
    import httpx
    import httpx2

    sync_http.ensure()
    for module in (httpx, httpx2):
        send = module.HTTPTransport.handle_request
        monkeypatch.setattr(module.HTTPTransport, "handle_request", send.__wrapped__)


@pytest.mark.usefixtures("unclosed")
def test_a_stream_cut_by_the_deadline_reports_its_late_token_to_otel_and_the_trace_file(
    server: FakeOpenAIServer,
    otel: tuple[OtelObserver, InMemorySpanExporter],
    tmp_path: Path,
) -> None:
    tracer, exporter = otel
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [], middleware=[DeadlineMiddleware(timeout=1.0)])
    path = tmp_path / "trace.jsonl"

    with JsonlTraceWriter(path) as writer:
        set_observers([tracer, writer])
        with tracer._tracer.start_as_current_span("request"):
            out = agent.invoke({"messages": [HumanMessage("count")]})
        assert server.wait_disconnected(MARGIN * 2)  # the late token is reported by then

    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    late = {"step": "model", "tokens": 1}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    tokens = [d for d in lines if d["event"] == "tokens_after_deadline"]
    assert [{k: d[k] for k in late} for d in tokens] == [late]
    # The sync run returns at the deadline, abandoning the model's thread, so the late token
    # usually arrives after the request span has ended: then it is a span of its own.
    spans = exporter.get_finished_spans()
    events = [e for s in spans for e in s.events if e.name == TOKENS_EVENT]
    own = [s for s in spans if s.name == TOKENS_EVENT]
    reported = [dict(x.attributes or {}) for x in [*events, *own]]
    assert [{k: a[f"deadline.{k}"] for k in late} for a in reported] == [late]
