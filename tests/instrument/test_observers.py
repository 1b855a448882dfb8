"""Observers one by one, fed hand-made events: fields, defaults, dispatch contexts, no errors."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from langgraph_deadline import Outcome, StepRecord, Terminal
from langgraph_deadline._core.observe import (
    INSTRUMENT_ENV,
    RunEvent,
    StepEvent,
    emit_step,
    get_observers,
    run_fields,
    set_observers,
    step_fields,
)
from langgraph_deadline._instrument.callbacks import STEP_EVENT, CallbacksObserver
from langgraph_deadline._instrument.jsonl import JsonlTraceWriter
from langgraph_deadline.types import StepStatus

RECORD = StepRecord(
    name="search",
    kind="tool",
    attempt=2,
    remaining_ms=900.0,
    requested_ms=500.0,
    allocated_ms=500.0,
    clamped=False,
    elapsed_ms=500.5,
    status=StepStatus.TIMED_OUT,
    cancel_source="step_cap",
    started_at=1_700_000_000.25,
)
STEP = StepEvent(RECORD, "run-1", 1_700_000_001.0)
RUN = RunEvent(
    outcome=Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step="search",
        reason="httpx said: GET https://x/?api_key=SECRET timed out",
        elapsed_ms=990.0,
    ),
    run_id="run-1",
    started_at=1_700_000_000.0,
    deadline_at=1_700_000_001.0,
    reserve_s=0.05,
)


@pytest.fixture(autouse=True)
def _restore_observers() -> Iterator[None]:
    saved = get_observers()
    yield
    set_observers(saved)


class Collector(BaseCallbackHandler):
    """Collects custom events and the runs they attach to."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, uuid.UUID, str]] = []
        self.names: dict[uuid.UUID, str] = {}

    def on_custom_event(self, name: str, data: Any, *, run_id: uuid.UUID, **kw: Any) -> None:
        self.events.append((name, data, run_id, threading.current_thread().name))

    def on_chain_start(
        self, serialized: dict[str, Any], inputs: dict[str, Any], *, run_id: uuid.UUID, **kw: Any
    ) -> None:
        self.names[run_id] = kw.get("name") or ""


# -- what leaves the process -----------------------------------------------------------------


def test_step_fields_are_the_record_plus_run_id_and_deadline() -> None:
    fields = step_fields(STEP)
    assert fields == {**RECORD.to_dict(), "run_id": "run-1", "deadline_at": 1_700_000_001.0}
    # A field added to StepRecord must be added to the whitelist on purpose (and fail here).
    assert set(fields) - {"run_id", "deadline_at"} == set(RECORD.to_dict())
    assert all(isinstance(v, str | int | float | bool) or v is None for v in fields.values())


def test_run_fields_leave_out_the_reason() -> None:
    fields = run_fields(RUN)
    assert "SECRET" not in repr(fields)
    assert fields == {
        "run_id": "run-1",
        "terminal": "deadline_exceeded",
        "step": "search",
        "elapsed_ms": 990.0,
        "started_at": 1_700_000_000.0,
        "deadline_at": 1_700_000_001.0,
        "budget_ms": 1000.0,
        "reserve_ms": 50.0,
    }


# -- defaults and the off switch --------------------------------------------------------------


def test_defaults_are_langchain_callbacks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INSTRUMENT_ENV, raising=False)
    set_observers(None)
    assert repr(get_observers()) == "(CallbacksObserver(deadline_only=True),)"
    monkeypatch.setenv(INSTRUMENT_ENV, "callbacks")
    set_observers(None)
    assert repr(get_observers()) == "(CallbacksObserver(),)"


def test_env_var_adds_otel_and_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.trace")
    pytest.importorskip("prometheus_client")
    from langgraph_deadline._instrument.otel import OtelObserver
    from langgraph_deadline._instrument.prometheus import PrometheusObserver

    monkeypatch.setenv(INSTRUMENT_ENV, " OTel , prometheus,prometheus,opentelemetry")
    set_observers(None)
    assert [type(o) for o in get_observers()] == [
        CallbacksObserver,
        OtelObserver,
        PrometheusObserver,
    ]
    set_observers(None)  # made again: the global registry must not refuse the metrics
    assert len(get_observers()) == 3


def test_env_var_off_switches_every_default_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INSTRUMENT_ENV, "off")
    set_observers(None)
    assert get_observers() == ()


def test_unknown_or_missing_backend_is_logged_and_left_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(INSTRUMENT_ENV, "statsd,prometheus")
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # "not installed"
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline"):
        set_observers(None)
    assert repr(get_observers()) == "(CallbacksObserver(deadline_only=True),)"
    monkeypatch.setenv(INSTRUMENT_ENV, "callbacks")
    set_observers(None)
    assert repr(get_observers()) == "(CallbacksObserver(),)"
    assert "unknown backend 'statsd'" in caplog.text
    assert "pip install 'langgraph-deadline[prometheus]'" in caplog.text


def test_empty_list_switches_instrumentation_off() -> None:
    set_observers([])
    assert get_observers() == ()


def test_an_object_without_the_hooks_is_refused() -> None:
    with pytest.raises(TypeError, match="on_step"):
        set_observers([object()])  # type: ignore[list-item]


def test_a_failing_observer_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def on_step(self, event: StepEvent) -> None:
            raise RuntimeError("boom")

        def on_run(self, event: RunEvent) -> None:
            raise RuntimeError("boom")

    set_observers([Broken()])
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline"):
        emit_step(RECORD, "run-1", None)
    assert "failed on a step event" in caplog.text


# -- LangChain callbacks ----------------------------------------------------------------------


def test_callbacks_send_nothing_and_do_not_raise_outside_a_runnable() -> None:
    CallbacksObserver().on_step(STEP)
    CallbacksObserver().on_run(RUN)


def test_callbacks_reach_the_current_runnable_from_sync_code() -> None:
    seen = Collector()

    def body(x: int) -> int:
        CallbacksObserver().on_step(STEP)
        return x

    RunnableLambda(body, name="body").invoke(1, {"callbacks": [seen]})
    [(name, data, run_id, _)] = seen.events
    assert name == STEP_EVENT
    assert data == step_fields(STEP)
    assert seen.names[run_id] == "body"


def test_callbacks_reach_the_current_runnable_from_a_worker_thread() -> None:
    seen = Collector()

    def body(x: int) -> int:  # a sync function under ainvoke runs in an executor thread
        CallbacksObserver().on_step(STEP)
        return x

    asyncio.run(RunnableLambda(body, name="body").ainvoke(1, {"callbacks": [seen]}))
    [(_, data, run_id, thread)] = seen.events
    assert thread != threading.main_thread().name
    assert data["name"] == "search"
    assert seen.names[run_id] == "body"


def test_callbacks_reach_async_handlers_from_async_code() -> None:
    got: list[tuple[str, Any]] = []

    class AsyncCollector(AsyncCallbackHandler):
        async def on_custom_event(self, name: str, data: Any, **kw: Any) -> None:
            got.append((name, data))

    async def body(x: int) -> int:
        CallbacksObserver().on_step(STEP)
        CallbacksObserver().on_run(RUN)
        return x

    asyncio.run(RunnableLambda(body).ainvoke(1, {"callbacks": [AsyncCollector()]}))
    assert got == [(STEP_EVENT, step_fields(STEP)), ("langgraph_deadline.run", run_fields(RUN))]


def test_callbacks_never_raise_even_when_a_handler_asks_to() -> None:
    class Raising(BaseCallbackHandler):
        raise_error = True

        def on_custom_event(self, *args: Any, **kw: Any) -> None:
            raise RuntimeError("handler bug")

    def body(x: int) -> int:
        CallbacksObserver().on_step(STEP)
        return x

    assert RunnableLambda(body).invoke(1, {"callbacks": [Raising()]}) == 1


# -- OpenTelemetry ----------------------------------------------------------------------------


def _otel() -> tuple[Any, Any]:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from langgraph_deadline._instrument.otel import OtelObserver

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelObserver(tracer_provider=provider), exporter


def test_otel_step_span_has_the_record_times_and_attributes() -> None:
    from opentelemetry.trace import StatusCode

    obs, exporter = _otel()
    obs.on_step(STEP)
    [span] = exporter.get_finished_spans()
    assert span.name == "tool search"
    assert span.start_time == int(RECORD.started_at * 1e9)  # type: ignore[operator]
    assert span.end_time - span.start_time == int(RECORD.elapsed_ms * 1e6)
    assert dict(span.attributes) == {
        "deadline.run_id": "run-1",
        "deadline.deadline_at": 1_700_000_001.0,
        "deadline.name": "search",
        "deadline.kind": "tool",
        "deadline.attempt": 2,
        "deadline.status": "timed_out",
        "deadline.remaining_ms": 900.0,
        "deadline.requested_ms": 500.0,
        "deadline.allocated_ms": 500.0,
        "deadline.clamped": False,
        "deadline.elapsed_ms": 500.5,
        "deadline.side_effect_started": False,
        "deadline.cancel_source": "step_cap",
        "deadline.started_at": 1_700_000_000.25,
        "deadline.hedges": 0,  # not hedged; `winner` is None, so left out
    }
    assert span.status.status_code is StatusCode.ERROR


def test_otel_run_span_and_event_on_the_current_span() -> None:
    obs, exporter = _otel()
    provider_tracer = obs._tracer
    with provider_tracer.start_as_current_span("request"):
        obs.on_run(RUN)
    run_span, request = exporter.get_finished_spans()
    assert run_span.name == "langgraph_deadline.run"
    assert run_span.attributes["deadline.terminal"] == "deadline_exceeded"
    assert run_span.attributes["deadline.budget_ms"] == 1000.0
    assert run_span.end_time - run_span.start_time == int(990.0 * 1e6)
    [event] = request.events
    assert event.name == "langgraph_deadline.run"
    assert event.attributes["deadline.step"] == "search"
    assert "SECRET" not in repr(run_span.attributes) + repr(event.attributes)


def test_otel_completed_step_without_a_start_time_is_unset_and_ends_now() -> None:
    from opentelemetry.trace import StatusCode

    obs, exporter = _otel()
    record = StepRecord(
        name="n",
        kind="node",
        attempt=1,
        remaining_ms=None,
        requested_ms=None,
        allocated_ms=None,
        clamped=False,
        elapsed_ms=3.0,
        status=StepStatus.COMPLETED,
    )
    obs.on_step(StepEvent(record, None, None))
    [span] = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.UNSET
    assert "deadline.allocated_ms" not in span.attributes  # None is left out
    assert span.end_time - span.start_time == 3_000_000


# -- Prometheus -------------------------------------------------------------------------------


def test_prometheus_counts_steps_runs_and_tokens_in_its_registry() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from langgraph_deadline._instrument.prometheus import (
        PrometheusObserver,
        count_tokens_after_deadline,
    )

    registry = CollectorRegistry()
    obs = PrometheusObserver(registry=registry)
    set_observers([obs])
    obs.on_step(STEP)
    obs.on_step(StepEvent(dataclass_replace(RECORD, status=StepStatus.ABANDONED), None, None))
    obs.on_run(RUN)
    count_tokens_after_deadline(12, step="llm")
    count_tokens_after_deadline(0, step="llm")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"langgraph_deadline_{name}", labels)

    labels = {"step": "search", "kind": "tool"}
    assert value("step_duration_seconds_count", **labels, status="timed_out") == 1
    assert value("step_duration_seconds_sum", **labels, status="timed_out") == pytest.approx(0.5005)
    assert value("step_deadline_exceeded_total", **labels) == 2
    assert value("step_abandoned_total", **labels) == 1
    assert value("runs_total", terminal="deadline_exceeded") == 1
    assert value("tokens_after_deadline_total", step="llm") == 12


def test_prometheus_counts_hedged_copies_and_the_calls_a_hedge_answered() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from langgraph_deadline._instrument.prometheus import PrometheusObserver

    registry = CollectorRegistry()
    obs = PrometheusObserver(registry=registry)
    done = dataclass_replace(RECORD, status=StepStatus.COMPLETED)
    obs.on_step(StepEvent(done, None, None))  # not hedged
    obs.on_step(StepEvent(dataclass_replace(done, hedges=1, winner=1), None, None))  # hedge won
    obs.on_step(StepEvent(dataclass_replace(done, hedges=2, winner=0), None, None))  # first won
    labels = {"step": "search", "kind": "tool"}
    assert registry.get_sample_value("langgraph_deadline_step_hedges_total", labels) == 3
    assert registry.get_sample_value("langgraph_deadline_step_hedge_wins_total", labels) == 1
    obs.on_step(StepEvent(dataclass_replace(done, hedge_held="outage"), None, None))
    obs.on_step(StepEvent(dataclass_replace(done, hedge_held="outage"), None, None))
    obs.on_step(StepEvent(dataclass_replace(done, hedge_held="budget"), None, None))
    held = "langgraph_deadline_step_hedges_held_total"
    assert registry.get_sample_value(held, {**labels, "reason": "outage"}) == 2
    assert registry.get_sample_value(held, {**labels, "reason": "budget"}) == 1


def test_otel_step_span_says_a_call_was_hedged_and_which_copy_won() -> None:
    obs, exporter = _otel()
    obs.on_step(StepEvent(dataclass_replace(RECORD, hedges=1, winner=1), "run-1", None))
    [span] = exporter.get_finished_spans()
    assert span.attributes is not None
    assert (span.attributes["deadline.hedges"], span.attributes["deadline.winner"]) == (1, 1)
    obs.on_step(StepEvent(dataclass_replace(RECORD, hedge_held="outage"), "run-1", None))
    held = exporter.get_finished_spans()[-1].attributes
    assert held is not None and held["deadline.hedge_held"] == "outage"


def test_a_hedged_record_round_trips_and_an_old_one_reads_as_not_hedged() -> None:
    hedged = dataclass_replace(RECORD, hedges=1, winner=1)
    assert StepRecord.from_dict(hedged.to_dict()) == hedged
    held = dataclass_replace(RECORD, hedge_held="budget")
    assert StepRecord.from_dict(held.to_dict()) == held
    old = {k: v for k, v in RECORD.to_dict().items() if k not in ("hedges", "winner", "hedge_held")}
    assert StepRecord.from_dict(old) == RECORD


def test_prometheus_observer_made_twice_on_one_registry_shares_its_metrics() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from langgraph_deadline._instrument.prometheus import PrometheusObserver

    registry = CollectorRegistry()
    PrometheusObserver(registry=registry).on_step(STEP)
    PrometheusObserver(registry=registry).on_step(STEP)
    PrometheusObserver(registry=registry, namespace="other").on_step(STEP)
    labels = {"step": "search", "kind": "tool"}
    assert registry.get_sample_value("langgraph_deadline_step_deadline_exceeded_total", labels) == 2
    assert registry.get_sample_value("other_step_deadline_exceeded_total", labels) == 1


def test_tokens_after_deadline_must_be_a_non_negative_int() -> None:
    pytest.importorskip("prometheus_client")
    from langgraph_deadline._instrument.prometheus import count_tokens_after_deadline

    with pytest.raises(ValueError, match=">= 0"):
        count_tokens_after_deadline(-1, step="llm")
    with pytest.raises(TypeError, match="int"):
        count_tokens_after_deadline(1.5, step="llm")  # type: ignore[arg-type]
    set_observers([])
    count_tokens_after_deadline(3, step="llm")  # no Prometheus observer: nothing to do


# -- JSON lines -------------------------------------------------------------------------------


def test_jsonl_writer_is_flushed_per_line_and_safe_across_threads(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with JsonlTraceWriter(path) as writer:
        writer.on_step(STEP)
        assert json.loads(path.read_text()) == {"v": 1, "event": "step", **step_fields(STEP)}

        def hammer() -> None:
            for _ in range(200):
                writer.on_step(STEP)
                writer.on_run(RUN)

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 1 + 8 * 200 * 2
    assert sum(line["event"] == "run" for line in lines) == 1600
    assert "SECRET" not in path.read_text()
    writer.on_step(STEP)  # closed: dropped, no error
    assert len(path.read_text().splitlines()) == len(lines)


def dataclass_replace(record: StepRecord, **changes: Any) -> StepRecord:
    import dataclasses

    return dataclasses.replace(record, **changes)
