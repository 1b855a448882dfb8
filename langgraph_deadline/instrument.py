"""Where step records and run outcomes go besides graph state: observers and their backends.

An observer is any object with `on_step(StepEvent)` and `on_run(RunEvent)`. The defaults are
chosen by `LANGGRAPH_DEADLINE_INSTRUMENT` (see the observability how-to); `set_observers([...])`
replaces them and `set_observers([])` switches instrumentation off. `PrometheusBookCollector` and
`OtelBookGauges` show what a `LatencyBook` learned, read when the metrics are collected. The
OpenTelemetry, Prometheus and plotting libraries are imported only when their observer (or
collector, or gauges) is created.
"""

from ._core.observe import (
    Observer,
    RunEvent,
    StepEvent,
    TokensEvent,
    get_observers,
    run_fields,
    set_observers,
    step_fields,
)
from ._instrument.callbacks import CallbacksObserver
from ._instrument.jsonl import JsonlTraceWriter
from ._instrument.otel import OtelObserver
from ._instrument.otel_book import OtelBookGauges
from ._instrument.prometheus import PrometheusObserver, count_tokens_after_deadline
from ._instrument.prometheus_book import PrometheusBookCollector

__all__ = [
    "CallbacksObserver",
    "JsonlTraceWriter",
    "Observer",
    "OtelBookGauges",
    "OtelObserver",
    "PrometheusBookCollector",
    "PrometheusObserver",
    "RunEvent",
    "StepEvent",
    "TokensEvent",
    "count_tokens_after_deadline",
    "get_observers",
    "run_fields",
    "set_observers",
    "step_fields",
]
