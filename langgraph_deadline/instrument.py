"""Where step records and run outcomes go besides graph state: observers and their backends.

An observer is any object with `on_step(StepEvent)` and `on_run(RunEvent)`. The defaults are
chosen by `LANGGRAPH_DEADLINE_INSTRUMENT` (see the observability how-to); `set_observers([...])`
replaces them and `set_observers([])` switches instrumentation off. The OpenTelemetry,
Prometheus and plotting libraries are imported only when their observer is created.
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
from ._instrument.prometheus import PrometheusObserver, count_tokens_after_deadline

__all__ = [
    "CallbacksObserver",
    "JsonlTraceWriter",
    "Observer",
    "OtelObserver",
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
