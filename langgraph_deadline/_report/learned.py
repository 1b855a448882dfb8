"""The report's latency-book table: what `learned(book, ...)` would learn from a trace.

Every step record of the trace goes into a `LatencyBook` (finished steps as samples, steps cut
at their budget, or with a step inside them cut, as censored ones), and each step gets its
learned p50/p90/p99 (">=" when the quantile lies in the censored tail), its censored share,
and the cap `learned` would choose.
"""

from __future__ import annotations

from typing import Final

from .._learn.book import LatencyBook
from .._learn.policy import learned
from .._learn.sketch import Estimate
from .trace import Trace

__all__ = ["HEADROOM", "MIN_SAMPLES", "QUANTILE", "book_of", "format_learned"]

QUANTILE: Final = 0.99
HEADROOM: Final = 1.5
MIN_SAMPLES: Final = 50
"""The `learned()` settings the report shows: its defaults."""


def book_of(trace: Trace) -> LatencyBook:
    """A latency book fed every step record of `trace` (and hearing nothing else)."""
    book = LatencyBook(listen=False)
    for steps in (*(run.steps for run in trace.runs), trace.loose):
        for record in steps:
            book.add(record)  # a step a step cut short ran inside is censored there
    return book


def format_learned(
    trace: Trace,
    *,
    quantile: float = QUANTILE,
    headroom: float = HEADROOM,
    min_samples: int = MIN_SAMPLES,
) -> str:
    """The latency-book table of `trace`, as plain text."""
    book = book_of(trace)
    rule = learned(book, quantile=quantile, headroom=headroom, min_samples=min_samples)
    headers = ("step", "kind", "samples", "cut", "p50 ms", "p90 ms", "p99 ms", "learned cap ms")
    rows = []
    for kind, name in book.names():
        sketch = book.sketch(name, kind)
        cap = rule.cap(kind, name)
        rows.append(
            (
                name,
                kind,
                str(sketch.count),
                f"{sketch.censored_share * 100:.0f}%",
                *(_ms(sketch.quantile(q)) for q in (0.5, 0.9, 0.99)),
                "-" if cap is None else f"{cap * 1000:.0f}",
            )
        )
    if not rows:
        return "latency book: no finished or cut steps"
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def fmt(cells: tuple[str, ...]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in pairs).rstrip()

    return "\n".join(
        [
            "latency book (what learned() would use):",
            fmt(headers),
            *(fmt(r) for r in rows),
            f"cut: share of samples cut at their budget (censored: >= marks a quantile among "
            f"them). learned cap: p{quantile * 100:g} x {headroom:g}, "
            f"from {min_samples} samples ('-' below that: your cap stands).",
        ]
    )


def _ms(estimate: Estimate | None) -> str:
    if estimate is None:
        return "-"
    value = estimate.seconds * 1000
    text = f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    return (">=" + text) if estimate.at_least else text
