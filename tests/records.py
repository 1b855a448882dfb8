"""Step records the tests build by hand."""

from __future__ import annotations

from langgraph_deadline import StepRecord
from langgraph_deadline.types import StepStatus


def model_record(
    status: StepStatus = StepStatus.SKIPPED, remaining_ms: float | None = 300.0
) -> StepRecord:
    """The record of a model call that never got a budget (skipped, or cut at once)."""
    return StepRecord(
        name="model",
        kind="model",
        attempt=1,
        remaining_ms=remaining_ms,
        requested_ms=None,
        allocated_ms=0.0,
        clamped=True,
        elapsed_ms=0.0,
        status=status,
    )
