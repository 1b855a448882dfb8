"""Step records as Prometheus metrics (the `prometheus` extra)."""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from .._core.extras import needs_extra
from .._core.observe import RunEvent, StepEvent, TokensEvent, emit_tokens
from .._core.records import StepStatus

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["DEFAULT_BUCKETS", "PrometheusObserver", "count_tokens_after_deadline"]

DEFAULT_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
"""Seconds: from a cache hit to a long model call."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Metrics:
    duration: Histogram
    exceeded: Counter
    abandoned: Counter
    hedges: Counter
    hedge_wins: Counter
    hedges_held: Counter
    tokens: Counter
    runs: Counter


# One set of metrics per (registry, namespace): a second observer on the same registry reuses
# them instead of failing with "Duplicated timeseries".
_MADE: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Metrics]] = (
    weakref.WeakKeyDictionary()
)
_MADE_LOCK = threading.Lock()


class PrometheusObserver:
    """Prometheus metrics for every step and run, in `registry` (default: the global one).

    - `<ns>_step_duration_seconds` histogram, labels `step`, `kind`, `status`;
    - `<ns>_step_deadline_exceeded_total`, labels `step`, `kind`: steps skipped for lack of
      budget, cut at it, or abandoned past it;
    - `<ns>_step_abandoned_total`, labels `step`, `kind`: sync work left running past its budget;
    - `<ns>_step_hedges_total`, labels `step`, `kind`: extra copies hedged calls started;
    - `<ns>_step_hedge_wins_total`, labels `step`, `kind`: hedged calls a later copy answered;
    - `<ns>_step_hedges_held_total`, labels `step`, `kind`, `reason`: hedged calls whose next
      copy was not started (`budget`, `outage`: hedging backed off, `time`);
    - `<ns>_tokens_after_deadline_total`, label `step`: see `count_tokens_after_deadline`;
    - `<ns>_runs_total`, label `terminal`.

    `<ns>` is `namespace` (default `langgraph_deadline`). Creating the observer again for the
    same registry and namespace reuses the metrics (the first one's `buckets` stay).

    Raises:
        ModuleNotFoundError: `prometheus-client` is not installed; the message says
            `pip install 'langgraph-deadline[prometheus]'`.
    """

    __slots__ = ("_metrics",)

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "langgraph_deadline",
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        with needs_extra("prometheus", "PrometheusObserver"):
            import prometheus_client

        reg = prometheus_client.REGISTRY if registry is None else registry
        with _MADE_LOCK:
            per_namespace = _MADE.setdefault(reg, {})
            metrics = per_namespace.get(namespace)
            if metrics is None:
                metrics = _make(reg, namespace, buckets)
                per_namespace[namespace] = metrics
        self._metrics = metrics

    def on_step(self, event: StepEvent) -> None:
        rec = event.record
        m = self._metrics
        m.duration.labels(rec.name, rec.kind, rec.status.value).observe(rec.elapsed_ms / 1000.0)
        if rec.status.ran_out:
            m.exceeded.labels(rec.name, rec.kind).inc()
        if rec.status is StepStatus.ABANDONED:
            m.abandoned.labels(rec.name, rec.kind).inc()
        if rec.hedges:
            m.hedges.labels(rec.name, rec.kind).inc(rec.hedges)
            if rec.winner:
                m.hedge_wins.labels(rec.name, rec.kind).inc()
        if rec.hedge_held is not None:
            m.hedges_held.labels(rec.name, rec.kind, rec.hedge_held).inc()

    def on_run(self, event: RunEvent) -> None:
        self._metrics.runs.labels(event.outcome.terminal.value).inc()

    def on_tokens_after_deadline(self, event: TokensEvent) -> None:
        """Add the tokens a model step generated after its deadline had passed."""
        self._metrics.tokens.labels(event.step).inc(event.tokens)

    def __repr__(self) -> str:
        return "PrometheusObserver()"


def count_tokens_after_deadline(tokens: int, *, step: str) -> None:
    """Report `tokens` that model step `step` streamed after its deadline had passed, to every
    observer with an `on_tokens_after_deadline` hook (Prometheus counts them).

    Raises:
        TypeError: `tokens` is not an int.
        ValueError: `tokens` is negative.
    """
    count = _check_tokens(tokens)
    if count == 0:
        return
    emit_tokens(TokensEvent(step=step, tokens=count))


def _check_tokens(tokens: object) -> int:
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise TypeError(f"tokens must be an int, got {type(tokens).__name__}: {tokens!r}")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens!r}")
    return tokens


def _make(registry: CollectorRegistry, ns: str, buckets: Sequence[float]) -> _Metrics:
    from prometheus_client import Counter, Histogram

    step_labels = ("step", "kind")
    return _Metrics(
        duration=Histogram(
            f"{ns}_step_duration_seconds",
            "Wall time of each step (node, tool, model or HTTP call), by how it ended.",
            (*step_labels, "status"),
            registry=registry,
            buckets=tuple(buckets),
        ),
        exceeded=Counter(
            f"{ns}_step_deadline_exceeded",
            "Steps that ran out of budget: skipped, cut at it, or abandoned past it.",
            step_labels,
            registry=registry,
        ),
        abandoned=Counter(
            f"{ns}_step_abandoned",
            "Sync steps left running past their budget (their work may still be going on).",
            step_labels,
            registry=registry,
        ),
        hedges=Counter(
            f"{ns}_step_hedges",
            "Extra identical copies started by hedged calls (read-only tools).",
            step_labels,
            registry=registry,
        ),
        hedge_wins=Counter(
            f"{ns}_step_hedge_wins",
            "Hedged calls answered by a copy other than the first.",
            step_labels,
            registry=registry,
        ),
        hedges_held=Counter(
            f"{ns}_step_hedges_held",
            "Hedged calls whose next copy was not started, by reason (budget, outage, time).",
            (*step_labels, "reason"),
            registry=registry,
        ),
        tokens=Counter(
            f"{ns}_tokens_after_deadline",
            "Tokens a model step generated after its deadline had passed.",
            ("step",),
            registry=registry,
        ),
        runs=Counter(
            f"{ns}_runs",
            "Runs of graphs with deadlines, by terminal.",
            ("terminal",),
            registry=registry,
        ),
    )
