"""Fixtures the instrument tests share: observers restored after each test, an in-memory OTel."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from langgraph_deadline._instrument.otel import OtelObserver
from langgraph_deadline.instrument import get_observers, set_observers


@pytest.fixture(autouse=True)
def _restore_observers() -> Iterator[None]:
    saved = get_observers()
    yield
    set_observers(saved)


@pytest.fixture
def otel() -> tuple[OtelObserver, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelObserver(tracer_provider=provider), exporter
