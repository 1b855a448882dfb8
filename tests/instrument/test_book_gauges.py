"""What a latency book learned, as a Prometheus collector and OpenTelemetry observable gauges:
each step's learned quantiles (flagged when a lower bound), its samples, its censored share and
the cap a `learned(...)` rule would choose, read from the real exposition (`generate_latest`)
and the real SDK (`InMemoryMetricReader`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_deadline import DeadlineState, with_deadlines
from langgraph_deadline.instrument import (
    OtelBookGauges,
    PrometheusBookCollector,
    PrometheusObserver,
    set_observers,
)
from langgraph_deadline.learn import LatencyBook, learned

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

QUANTILES = ("0.5", "0.9", "0.99")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _book() -> LatencyBook:
    """`search`: 90 finished in 0.1-0.19 s and 10 cut at 0.3 s (p50 and p90 known, p99 only
    "at least"); `plan`: 30 finished (fewer than min_samples); `stuck`: 1 finished, 9 cut."""
    book = LatencyBook(listen=False)
    for i in range(90):
        book.record("tool", "search", 0.1 + i * 0.001)
    for _ in range(10):
        book.record("tool", "search", 0.3, censored=True)
    for i in range(30):
        book.record("node", "plan", 0.02 + i * 0.0001)
    book.record("node", "stuck", 0.05)
    for _ in range(9):
        book.record("node", "stuck", 0.8, censored=True)
    return book


def _scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the text exposition, by (name, labels)."""
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _labels(kind: str, name: str, **more: str) -> frozenset[tuple[str, str]]:
    return frozenset({"kind": kind, "step": name, **more}.items())


def _collect(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[tuple[str, Any]], Any]]:
    """Every data point the reader collected, by metric name and attributes."""
    found: dict[str, dict[frozenset[tuple[str, Any]], Any]] = {}
    data = reader.get_metrics_data()
    for resource in [] if data is None else data.resource_metrics:  # None: nothing observed
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = found.setdefault(metric.name, {})
                for point in metric.data.data_points:  # type: ignore[union-attr]
                    points[frozenset((point.attributes or {}).items())] = point.value
    return found


def _attrs(kind: str, name: str, **more: str) -> frozenset[tuple[str, Any]]:
    extra = {f"deadline.{k}": v for k, v in more.items()}
    return frozenset({"deadline.kind": kind, "deadline.name": name, **extra}.items())


# -- Prometheus -------------------------------------------------------------------------------


def test_prometheus_shows_each_steps_learned_quantiles_censored_share_and_cap() -> None:
    book = _book()
    rule = learned(book, quantile=0.99, headroom=1.5, min_samples=50, cap=5.0)
    registry = CollectorRegistry()
    PrometheusBookCollector(book, rule=rule, registry=registry)
    got = _scrape(registry)

    for kind, name in (("tool", "search"), ("node", "plan"), ("node", "stuck")):
        sketch = book.sketch(name, kind)
        for label in QUANTILES:
            estimate = sketch.quantile(float(label))
            assert estimate is not None
            at = _labels(kind, name, quantile=label)
            assert got["langgraph_deadline_learned_seconds", at] == estimate.seconds
            assert got["langgraph_deadline_learned_at_least", at] == float(estimate.at_least)
        at = _labels(kind, name)
        assert got["langgraph_deadline_learned_samples", at] == sketch.count
        assert got["langgraph_deadline_learned_censored_ratio", at] == sketch.censored_share
        assert got["langgraph_deadline_learned_cap_seconds", at] == rule.cap(kind, name)

    def flag(kind: str, name: str, q: str) -> float:
        return got["langgraph_deadline_learned_at_least", _labels(kind, name, quantile=q)]

    # search: the p50 and p90 are among finished steps, the p99 among the cut ones
    assert [flag("tool", "search", q) for q in QUANTILES] == [0.0, 0.0, 1.0]
    assert [flag("node", "stuck", q) for q in QUANTILES] == [1.0, 1.0, 1.0]
    assert [flag("node", "plan", q) for q in QUANTILES] == [0.0, 0.0, 0.0]
    p99 = got["langgraph_deadline_learned_seconds", _labels("tool", "search", quantile="0.99")]
    assert p99 == pytest.approx(0.3, rel=0.01)  # at least the cut, not the last finished step
    assert got["langgraph_deadline_learned_censored_ratio", _labels("tool", "search")] == 0.1
    assert got["langgraph_deadline_learned_censored_ratio", _labels("node", "stuck")] == 0.9
    assert got["langgraph_deadline_learned_samples", _labels("tool", "search")] == 100
    # search is warm: 1.5 x its p99 (an "at least": more room); plan is cold: your cap stands
    assert got["langgraph_deadline_learned_cap_seconds", _labels("tool", "search")] == (
        pytest.approx(p99 * 1.5)
    )
    assert got["langgraph_deadline_learned_cap_seconds", _labels("node", "plan")] == 5.0


def test_prometheus_without_a_rule_shows_no_cap_and_a_cold_rule_without_cap_shows_none() -> None:
    book = _book()
    registry = CollectorRegistry()
    PrometheusBookCollector(book, registry=registry)
    text = generate_latest(registry).decode()
    assert "langgraph_deadline_learned_seconds{" in text
    assert "learned_cap_seconds" not in text

    other = CollectorRegistry()
    PrometheusBookCollector(book, rule=learned(book, min_samples=50), registry=other)
    caps = {
        dict(labels)["step"]: value
        for (name, labels), value in _scrape(other).items()
        if name == "langgraph_deadline_learned_cap_seconds"
    }
    assert set(caps) == {"search"}  # plan and stuck are cold, and no cap was given


def test_prometheus_reads_the_book_at_each_scrape_not_when_made() -> None:
    book = LatencyBook(listen=False)
    registry = CollectorRegistry()
    PrometheusBookCollector(book, rule=learned(book, min_samples=3, cap=9.0), registry=registry)
    assert not any("learned" in name for name, _ in _scrape(registry))

    samples = ("langgraph_deadline_learned_samples", _labels("tool", "t"))
    cap = ("langgraph_deadline_learned_cap_seconds", _labels("tool", "t"))
    for _ in range(3):
        book.record("tool", "t", 0.1)
    first = _scrape(registry)
    assert first[samples] == 3
    assert first[cap] == pytest.approx(0.15, rel=0.02)
    assert _scrape(registry) == first  # nothing new: the same read
    book.record("tool", "t", 2.0, censored=True)
    second = _scrape(registry)
    assert second[samples] == 4
    assert second["langgraph_deadline_learned_censored_ratio", _labels("tool", "t")] == 0.25
    assert second[cap] == pytest.approx(3.0, rel=0.02)  # the p99 is now ">= 2 s"


def test_prometheus_collector_made_again_replaces_the_one_before() -> None:
    registry = CollectorRegistry()
    first, second = LatencyBook(listen=False), LatencyBook(listen=False)
    first.record("tool", "a", 0.1)
    second.record("tool", "b", 0.2)
    PrometheusBookCollector(first, registry=registry)
    replacing = PrometheusBookCollector(second, registry=registry)  # no "Duplicated timeseries"
    PrometheusBookCollector(first, registry=registry, namespace="other")
    steps = {
        (name.split("_learned")[0], dict(labels)["step"])
        for name, labels in _scrape(registry)
        if name.endswith("_learned_samples")
    }
    assert steps == {("langgraph_deadline", "b"), ("other", "a")}

    registry.unregister(replacing)  # by hand: made again, it still registers
    PrometheusBookCollector(first, registry=registry)
    assert ("langgraph_deadline_learned_samples", _labels("tool", "a")) in _scrape(registry)


def test_prometheus_collector_shows_the_quantiles_asked_for() -> None:
    registry = CollectorRegistry()
    book = _book()
    PrometheusBookCollector(book, quantiles=[0.95, 0.999, 0.95], registry=registry)
    shown = {
        dict(labels)["quantile"]
        for name, labels in _scrape(registry)
        if name == "langgraph_deadline_learned_seconds"
    }
    assert shown == {"0.95", "0.999"}


def test_a_real_run_cut_at_its_cap_shows_as_a_censored_sample_beside_the_step_metrics() -> None:
    class State(DeadlineState):
        pass

    async def fast(state: State) -> dict[str, Any]:
        return {}

    async def hangs(state: State) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    builder = StateGraph(State)
    builder.add_node("gauge_fast", fast)
    builder.add_node("gauge_hangs", hangs)
    builder.add_edge(START, "gauge_fast")
    builder.add_edge("gauge_fast", "gauge_hangs")
    builder.add_edge("gauge_hangs", END)
    graph = with_deadlines(builder, timeout=5.0, caps={"gauge_hangs": 0.05})

    book = LatencyBook()
    registry = CollectorRegistry()
    set_observers([PrometheusObserver(registry=registry)])
    PrometheusBookCollector(book, rule=learned(book, min_samples=1, cap=1.0), registry=registry)
    for _ in range(2):
        asyncio.run(graph.ainvoke({}))
    got = _scrape(registry)

    hung = _labels("node", "gauge_hangs")
    assert got["langgraph_deadline_step_deadline_exceeded_total", hung] == 2
    assert got["langgraph_deadline_learned_samples", hung] == 2
    assert got["langgraph_deadline_learned_censored_ratio", hung] == 1.0
    median = _labels("node", "gauge_hangs", quantile="0.5")
    p50 = got["langgraph_deadline_learned_seconds", median]
    assert p50 >= 0.05 * 0.99  # at least the cap it was cut at
    assert got["langgraph_deadline_learned_at_least", median] == 1
    assert got["langgraph_deadline_learned_cap_seconds", hung] == pytest.approx(p50 * 1.5)
    assert got["langgraph_deadline_learned_censored_ratio", _labels("node", "gauge_fast")] == 0.0


# -- OpenTelemetry ----------------------------------------------------------------------------


def test_otel_gauges_show_each_steps_learned_quantiles_censored_share_and_cap() -> None:
    book = _book()
    rule = learned(book, quantile=0.99, headroom=1.5, min_samples=50, cap=5.0)
    reader = InMemoryMetricReader()
    OtelBookGauges(book, rule=rule, meter_provider=MeterProvider(metric_readers=[reader]))
    got = _collect(reader)

    for kind, name in (("tool", "search"), ("node", "plan"), ("node", "stuck")):
        sketch = book.sketch(name, kind)
        for label in QUANTILES:
            estimate = sketch.quantile(float(label))
            assert estimate is not None
            at = _attrs(kind, name, quantile=label)
            assert got["langgraph_deadline.learned.duration"][at] == estimate.seconds
            assert got["langgraph_deadline.learned.at_least"][at] == int(estimate.at_least)
        at = _attrs(kind, name)
        assert got["langgraph_deadline.learned.samples"][at] == sketch.count
        assert got["langgraph_deadline.learned.censored_ratio"][at] == sketch.censored_share
        assert got["langgraph_deadline.learned.cap"][at] == rule.cap(kind, name)

    at_least = got["langgraph_deadline.learned.at_least"]
    assert [at_least[_attrs("tool", "search", quantile=q)] for q in QUANTILES] == [0, 0, 1]
    assert got["langgraph_deadline.learned.censored_ratio"][_attrs("node", "stuck")] == 0.9
    assert got["langgraph_deadline.learned.cap"][_attrs("node", "plan")] == 5.0


def test_otel_gauges_have_units_and_read_the_book_at_each_collection() -> None:
    book = LatencyBook(listen=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    OtelBookGauges(book, meter_provider=provider)
    assert _collect(reader) == {}

    book.record("model", "llm", 1.0)
    book.record("model", "llm", 2.0, censored=True)
    got = _collect(reader)
    assert got["langgraph_deadline.learned.samples"] == {_attrs("model", "llm"): 2}
    assert got["langgraph_deadline.learned.censored_ratio"] == {_attrs("model", "llm"): 0.5}
    assert got.get("langgraph_deadline.learned.cap", {}) == {}  # no rule
    data = reader.get_metrics_data()
    assert data is not None
    units = {
        m.name: m.unit for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics
    }
    assert units["langgraph_deadline.learned.duration"] == "s"
    assert units["langgraph_deadline.learned.censored_ratio"] == "1"


def test_otel_gauges_made_again_on_one_provider_read_the_new_book(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    first, second = LatencyBook(listen=False), LatencyBook(listen=False)
    first.record("tool", "a", 0.1)
    second.record("tool", "b", 0.2)
    OtelBookGauges(first, meter_provider=provider)
    with caplog.at_level(logging.WARNING):
        OtelBookGauges(second, rule=learned(second, min_samples=1), meter_provider=provider)
    assert not caplog.records  # no instrument made twice
    got = _collect(reader)
    assert set(got["langgraph_deadline.learned.samples"]) == {_attrs("tool", "b")}
    assert got["langgraph_deadline.learned.cap"][_attrs("tool", "b")] == pytest.approx(
        0.3, rel=0.02
    )


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [PrometheusBookCollector, OtelBookGauges])
def test_bad_arguments_are_refused_before_anything_is_registered(make: Any) -> None:
    book = LatencyBook(listen=False)
    with pytest.raises(TypeError, match="book must be a LatencyBook"):
        make(None)
    with pytest.raises(TypeError, match="rule must be learned"):
        make(book, rule=2.0)
    with pytest.raises(ValueError, match="another book"):
        make(book, rule=learned(LatencyBook(listen=False)))
    with pytest.raises(TypeError, match="quantiles"):
        make(book, quantiles="0.5")
    with pytest.raises(TypeError, match="quantiles"):
        make(book, quantiles=[])
    with pytest.raises(TypeError, match="quantile must be a number"):
        make(book, quantiles=["0.5"])
    for q in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"quantiles must be in \(0, 1\]"):
            make(book, quantiles=[0.5, q])
