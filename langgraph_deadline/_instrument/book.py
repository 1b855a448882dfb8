"""What a latency book learned, read for the gauges of `prometheus_book.py` and `otel_book.py`:
each step's learned quantiles, whether each is a lower bound, its samples, its censored share
and the cap a `learned(...)` rule would choose.

Nothing runs on a step's path: the book is read when the metrics are collected (a Prometheus
scrape, an OpenTelemetry metric reader's collection). A read is kept until the book's sample
counts change, so an idle book costs a scrape nearly nothing and the five OpenTelemetry gauges
of one collection share one read.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Final

from .._core.validate import check_number, show
from .._learn.book import KINDS, LatencyBook
from .._learn.policy import Learned
from .._learn.sketch import Estimate

__all__ = ["HELP", "QUANTILES", "Row", "Source"]

QUANTILES: Final = (0.5, 0.9, 0.99)
"""The quantiles shown unless told otherwise: p50, p90, p99."""

HELP: Final = {
    "seconds": "Each step's learned latency quantiles.",
    "at_least": (
        "1 when the learned quantile lies among cut samples: the true value is that or more."
    ),
    "samples": "Samples in the latency book, finished and cut.",
    "censored": "Share of the samples cut at their budget (censored).",
    "cap": "The cap learned() would choose now.",
}
"""Each gauge's description, the same in Prometheus and OpenTelemetry."""


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One (kind, name) key of the book, read at collection time."""

    kind: str
    name: str
    samples: int
    censored_ratio: float
    quantiles: tuple[tuple[str, Estimate], ...]  # ("0.5", estimate), ...
    cap: float | None  # what the rule would choose (None: no rule, or no cap)


class Source:
    """A book, a rule and the quantiles to show; read into rows, kept until the counts move."""

    __slots__ = ("_lock", "_rows", "_seen", "book", "labels", "quantiles", "rule")

    def __init__(self, book: object, rule: object, quantiles: Sequence[float]) -> None:
        if not isinstance(book, LatencyBook):
            raise TypeError(f"book must be a LatencyBook, got {type(book).__name__}: {show(book)}")
        if rule is not None and not isinstance(rule, Learned):
            raise TypeError(
                f"rule must be learned(book, ...) or None, got {type(rule).__name__}: {show(rule)}"
            )
        if rule is not None and rule.book is not book:
            raise ValueError("rule learns from another book: its caps would not match the book")
        if isinstance(quantiles, str) or not isinstance(quantiles, Sequence) or not quantiles:
            raise TypeError(f"quantiles must be a list of numbers in (0, 1], got {show(quantiles)}")
        qs = tuple(dict.fromkeys(check_number(q, "quantile", "a number") for q in quantiles))
        bad = [q for q in qs if not 0.0 < q <= 1.0]
        if bad:
            raise ValueError(f"quantiles must be in (0, 1], got {show(bad[0])}")
        self.book = book
        self.rule = rule
        self.quantiles = qs
        self.labels = tuple(f"{q:g}" for q in qs)
        self._lock = threading.Lock()
        self._seen: tuple[tuple[str, str, int], ...] | None = None
        self._rows: list[Row] = []

    def rows(self) -> list[Row]:
        """Every key's numbers, read again only when a key's sample count changed."""
        book = self.book
        seen = tuple((kind, name, book.count(name, kind)) for kind, name in book.names())
        with self._lock:
            if seen != self._seen:
                self._rows = [self._row(kind, name) for kind, name, _ in seen]
                self._seen = seen
            return self._rows

    def _row(self, kind: str, name: str) -> Row:
        sketch = self.book.sketch(name, kind)
        estimates = []
        for label, q in zip(self.labels, self.quantiles, strict=True):
            estimate = sketch.quantile(q)
            if estimate is not None:
                estimates.append((label, estimate))
        # a model's stream timings (first_token, per_token) are not steps: no cap
        cap = None if self.rule is None or kind not in KINDS else self.rule.cap(kind, name)
        return Row(kind, name, sketch.count, sketch.censored_share, tuple(estimates), cap)
