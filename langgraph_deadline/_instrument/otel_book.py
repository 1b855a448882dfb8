"""A latency book's numbers as OpenTelemetry observable gauges, read when a metric reader
collects (the `otel` extra)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._core.extras import needs_extra
from .._learn.book import LatencyBook
from .._learn.policy import Learned
from .._learn.sketch import Estimate
from .book import HELP, QUANTILES, Row, Source

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

__all__ = ["OtelBookGauges"]


class _Gauges:
    """The observable gauges of one meter provider; their callbacks read `source`."""

    __slots__ = ("source",)

    def __init__(self, source: Source) -> None:
        self.source = source

    def seconds(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_quantile(lambda e: e.seconds)

    def at_least(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_quantile(lambda e: 1 if e.at_least else 0)

    def samples(self, options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        return [Observation(r.samples, _attributes(r)) for r in self.source.rows()]

    def censored(self, options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        return [Observation(r.censored_ratio, _attributes(r)) for r in self.source.rows()]

    def cap(self, options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        if self.source.rule is None:
            return []
        rows = self.source.rows()
        return [Observation(r.cap, _attributes(r)) for r in rows if r.cap is not None]

    def _per_quantile(self, value: Callable[[Estimate], float]) -> list[Observation]:
        from opentelemetry.metrics import Observation

        return [
            Observation(value(estimate), {**_attributes(r), "deadline.quantile": label})
            for r in self.source.rows()
            for label, estimate in r.quantiles
        ]


def _attributes(row: Row) -> dict[str, str]:
    return {"deadline.kind": row.kind, "deadline.name": row.name}


# One set of gauges per meter provider (an instrument cannot be made twice, nor dropped).
_GAUGES: weakref.WeakKeyDictionary[Any, _Gauges] = weakref.WeakKeyDictionary()
_GAUGES_LOCK = threading.Lock()


class OtelBookGauges:
    """OpenTelemetry observable gauges of what `book` learned, read when a metric reader
    collects (nothing is added to a step's path), from `meter_provider` (default: the global
    one). Attributes `deadline.kind` and `deadline.name`, as on the step spans:

    - `langgraph_deadline.learned.duration` (s), attribute `deadline.quantile` too (`"0.5"`,
      `"0.9"`, `"0.99"`): the step's learned quantiles;
    - `langgraph_deadline.learned.at_least`, attribute `deadline.quantile` too: 1 when that
      quantile lies among the cut samples (the true value is that or more), else 0;
    - `langgraph_deadline.learned.samples`: finished and cut samples, with what other workers
      shared;
    - `langgraph_deadline.learned.censored_ratio`: the share of samples cut at their budget;
    - `langgraph_deadline.learned.cap` (s, with a `rule`): the cap `rule` would give the step
      now (your `cap` while the book is cold; none when that is None).

    OpenTelemetry cannot drop an instrument: the gauges are made once per meter provider, and
    made again for the same provider, the new `OtelBookGauges` replaces what they read.

    Args:
        book: the `LatencyBook` to read.
        rule: a `learned(book, ...)` whose cap to show, or None.
        quantiles: the quantiles to show, each in (0, 1].
        meter_provider: where to make the gauges (None: the global one).

    Raises:
        TypeError: `book` is not a `LatencyBook`, `rule` not a `learned(...)`, `quantiles` not
            a list of numbers.
        ValueError: `rule` learns from another book; a quantile outside (0, 1].
        ModuleNotFoundError: `opentelemetry-api` is not installed; the message says
            `pip install 'langgraph-deadline[otel]'`.
    """

    __slots__ = ()

    def __init__(
        self,
        book: LatencyBook,
        *,
        rule: Learned | None = None,
        quantiles: Sequence[float] = QUANTILES,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        from importlib.metadata import version

        source = Source(book, rule, quantiles)
        with needs_extra("otel", "OtelBookGauges"):
            from opentelemetry import metrics

        provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
        with _GAUGES_LOCK:
            gauges = _GAUGES.get(provider)
            if gauges is not None:
                gauges.source = source
                return
            gauges = _GAUGES[provider] = _Gauges(source)
            meter = metrics.get_meter(
                "langgraph_deadline", version("langgraph-deadline"), meter_provider=provider
            )
        prefix = "langgraph_deadline.learned"
        meter.create_observable_gauge(f"{prefix}.duration", [gauges.seconds], "s", HELP["seconds"])
        meter.create_observable_gauge(
            f"{prefix}.at_least",
            [gauges.at_least],
            "",
            HELP["at_least"],
        )
        meter.create_observable_gauge(
            f"{prefix}.samples",
            [gauges.samples],
            "{sample}",
            HELP["samples"],
        )
        meter.create_observable_gauge(
            f"{prefix}.censored_ratio",
            [gauges.censored],
            "1",
            HELP["censored"],
        )
        meter.create_observable_gauge(f"{prefix}.cap", [gauges.cap], "s", HELP["cap"])

    def __repr__(self) -> str:
        return "OtelBookGauges()"
