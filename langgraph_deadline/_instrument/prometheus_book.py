"""A latency book's numbers as a Prometheus collector, read at scrape time (the `prometheus`
extra)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._core.extras import needs_extra
from .._learn.book import LatencyBook
from .._learn.policy import Learned
from .book import HELP, QUANTILES, Source

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

__all__ = ["PrometheusBookCollector"]

# The collector registered per (registry, namespace): made again, the new one replaces it.
_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, PrometheusBookCollector]] = (
    weakref.WeakKeyDictionary()
)
_COLLECTORS_LOCK = threading.Lock()


class PrometheusBookCollector:
    """A Prometheus collector of what `book` learned, read at scrape time (nothing is added to
    a step's path). It registers itself in `registry` (default: the global one). Gauges, with
    the labels `step` and `kind` of `PrometheusObserver`'s metrics:

    - `<ns>_learned_seconds`, label `quantile` too (`"0.5"`, `"0.9"`, `"0.99"`): the step's
      learned quantiles;
    - `<ns>_learned_at_least`, label `quantile` too: 1 when that quantile lies among the cut
      samples (the true value is that or more), else 0;
    - `<ns>_learned_samples`: finished and cut samples, with what other workers shared;
    - `<ns>_learned_censored_ratio`: the share of samples cut at their budget;
    - `<ns>_learned_cap_seconds` (with a `rule`): the cap `rule` would give the step now (your
      `cap` while the book is cold; none when that is None).

    `<ns>` is `namespace` (default `langgraph_deadline`). Made again for the same registry and
    namespace, the new collector replaces the one before. `registry.unregister(collector)`
    removes it.

    Args:
        book: the `LatencyBook` to read.
        rule: a `learned(book, ...)` whose cap to show, or None.
        quantiles: the quantiles to show, each in (0, 1].
        registry: where to register (None: `prometheus_client.REGISTRY`).
        namespace: the metric names' prefix.

    Raises:
        TypeError: `book` is not a `LatencyBook`, `rule` not a `learned(...)`, `quantiles` not
            a list of numbers.
        ValueError: `rule` learns from another book; a quantile outside (0, 1].
        ModuleNotFoundError: `prometheus-client` is not installed; the message says
            `pip install 'langgraph-deadline[prometheus]'`.
    """

    __slots__ = ("__weakref__", "_namespace", "_source")

    def __init__(
        self,
        book: LatencyBook,
        *,
        rule: Learned | None = None,
        quantiles: Sequence[float] = QUANTILES,
        registry: CollectorRegistry | None = None,
        namespace: str = "langgraph_deadline",
    ) -> None:
        self._source = Source(book, rule, quantiles)
        self._namespace = namespace
        with needs_extra("prometheus", "PrometheusBookCollector"):
            import prometheus_client

        reg = prometheus_client.REGISTRY if registry is None else registry
        with _COLLECTORS_LOCK:
            per_namespace = _COLLECTORS.setdefault(reg, {})
            before = per_namespace.get(namespace)
            if before is not None:
                with contextlib.suppress(KeyError):  # already unregistered by hand
                    reg.unregister(before)
            reg.register(self)
            per_namespace[namespace] = self

    def describe(self) -> list[Metric]:
        """The metric names, without reading the book (what a registry asks on `register`)."""
        return list(self._families())

    def collect(self) -> list[Metric]:
        """The book's numbers now (what a scrape asks)."""
        seconds, at_least, samples, censored, *cap = families = list(self._families())
        for row in self._source.rows():
            step = [row.name, row.kind]
            for label, estimate in row.quantiles:
                seconds.add_metric([*step, label], estimate.seconds)
                at_least.add_metric([*step, label], 1.0 if estimate.at_least else 0.0)
            samples.add_metric(step, row.samples)
            censored.add_metric(step, row.censored_ratio)
            if cap and row.cap is not None:
                cap[0].add_metric(step, row.cap)
        return families

    def _families(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        ns = self._namespace
        step, quantile = ["step", "kind"], ["step", "kind", "quantile"]
        yield GaugeMetricFamily(f"{ns}_learned_seconds", HELP["seconds"], labels=quantile)
        yield GaugeMetricFamily(
            f"{ns}_learned_at_least",
            HELP["at_least"],
            labels=quantile,
        )
        yield GaugeMetricFamily(f"{ns}_learned_samples", HELP["samples"], labels=step)
        yield GaugeMetricFamily(
            f"{ns}_learned_censored_ratio",
            HELP["censored"],
            labels=step,
        )
        if self._source.rule is not None:
            yield GaugeMetricFamily(f"{ns}_learned_cap_seconds", HELP["cap"], labels=step)

    def __repr__(self) -> str:
        return f"PrometheusBookCollector(namespace={self._namespace!r})"
