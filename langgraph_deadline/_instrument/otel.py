"""Step records as OpenTelemetry spans with `deadline.*` attributes (the `otel` extra)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._core.extras import needs_extra
from .._core.observe import Field, RunEvent, StepEvent, TokensEvent, run_fields, step_fields
from .._core.records import StepStatus, Terminal

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["TOKENS_EVENT", "OtelObserver"]

TOKENS_EVENT = "langgraph_deadline.tokens_after_deadline"

_STEP_ERRORS = frozenset(
    {StepStatus.TIMED_OUT, StepStatus.ABANDONED, StepStatus.SKIPPED, StepStatus.FAILED}
)
_RUN_ERRORS = frozenset({Terminal.DEADLINE_EXCEEDED, Terminal.FAILED, Terminal.STEP_LIMIT})


class OtelObserver:
    """One span per step, named `"<kind> <name>"` (`"node search"`), and one per run
    (`"langgraph_deadline.run"`), each with `deadline.*` attributes.

    A step is reported when it ends, so its span is written after the fact with its real start
    and end times: trace viewers draw the budget's waterfall. Spans (rather than events on the
    current span) because a step has a duration, and because events need a recording span to
    attach to, which a graph run without other instrumentation does not have. The spans are
    children of the span current where the step ended (the caller's request span, usually),
    and share `deadline.run_id`. Timed-out, abandoned, skipped and failed steps, and runs that
    did not complete, get an error status. The run's outcome is also added as an event to the
    current span when it is recording.

    Tokens a model streamed after its deadline are an event named `TOKENS_EVENT`
    (`deadline.step`, `deadline.tokens`, `deadline.run_id`) on the current span when it is
    recording, else a zero-length span of that name, so they are never dropped.

    Raises:
        ModuleNotFoundError: `opentelemetry-api` is not installed; the message says
            `pip install 'langgraph-deadline[otel]'`.
    """

    __slots__ = ("_current_span", "_status", "_tracer")

    def __init__(self, *, tracer_provider: TracerProvider | None = None) -> None:
        from importlib.metadata import version

        with needs_extra("otel", "OtelObserver"):
            from opentelemetry import trace

        self._tracer = trace.get_tracer(
            "langgraph_deadline", version("langgraph-deadline"), tracer_provider=tracer_provider
        )
        self._status = (trace.Status, trace.StatusCode)
        self._current_span = trace.get_current_span

    def on_step(self, event: StepEvent) -> None:
        rec = event.record
        end = time.time_ns()
        duration = int(rec.elapsed_ms * 1e6)
        start = int(rec.started_at * 1e9) if rec.started_at else end - duration
        span = self._tracer.start_span(
            f"{rec.kind} {rec.name}",
            start_time=start,
            attributes=_attributes(step_fields(event)),
        )
        if rec.status in _STEP_ERRORS:
            status, code = self._status
            span.set_status(status(code.ERROR, rec.status.value))
        span.end(end_time=start + duration)

    def on_run(self, event: RunEvent) -> None:
        attributes = _attributes(run_fields(event))
        end = time.time_ns()
        start = int(event.started_at * 1e9)
        if event.outcome.elapsed_ms is not None:
            end = start + int(event.outcome.elapsed_ms * 1e6)
        span = self._tracer.start_span(
            "langgraph_deadline.run", start_time=start, attributes=attributes
        )
        if event.outcome.terminal in _RUN_ERRORS:
            status, code = self._status
            span.set_status(status(code.ERROR, event.outcome.terminal.value))
        span.end(end_time=end)
        current = self._current_span()
        if current.is_recording():
            current.add_event("langgraph_deadline.run", attributes=attributes)

    def on_tokens_after_deadline(self, event: TokensEvent) -> None:
        fields: dict[str, Field] = {
            "run_id": event.run_id,
            "step": event.step,
            "tokens": event.tokens,
        }
        attributes = _attributes(fields)
        current = self._current_span()
        if current.is_recording():
            current.add_event(TOKENS_EVENT, attributes=attributes)
        else:
            self._tracer.start_span(TOKENS_EVENT, attributes=attributes).end()

    def __repr__(self) -> str:
        return "OtelObserver()"


def _attributes(fields: Mapping[str, Field]) -> dict[str, Any]:
    """`deadline.`-prefixed attributes; None values are left out (OpenTelemetry has no null)."""
    return {f"deadline.{key}": value for key, value in fields.items() if value is not None}
