"""Step records and outcomes: plain data both ways, and the words for a step that ran out."""

from __future__ import annotations

import pytest

from langgraph_deadline import Outcome, StepRecord, Terminal
from langgraph_deadline.types import StepStatus


def _record(status: StepStatus, allocated_ms: float | None = 500.0) -> StepRecord:
    return StepRecord(
        name="search",
        kind="tool",
        attempt=1,
        remaining_ms=900.0,
        requested_ms=2000.0,
        allocated_ms=allocated_ms,
        clamped=True,
        elapsed_ms=501.2,
        status=status,
    )


@pytest.mark.parametrize("status", list(StepStatus))
def test_a_record_round_trips_through_plain_data(status: StepStatus) -> None:
    record = _record(status)
    assert StepRecord.from_dict({**record.to_dict(), "unknown": 1}) == record


def test_a_records_parent_link_is_plain_text_and_old_records_still_load() -> None:
    node = _record(StepStatus.COMPLETED)
    assert node.link is None  # no start time: nothing can name it
    started = StepRecord.from_dict({**node.to_dict(), "started_at": 1_767_225_600.25})
    assert started.link == "search@1767225600.25"
    child = StepRecord.from_dict({**node.to_dict(), "parent": started.link})
    assert child.to_dict()["parent"] == "search@1767225600.25"
    assert StepRecord.from_dict(child.to_dict()) == child
    old = {k: v for k, v in node.to_dict().items() if k != "parent"}  # written before the field
    assert StepRecord.from_dict(old).parent is None


def test_an_outcome_round_trips_through_plain_data() -> None:
    outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step="search", reason="r", elapsed_ms=1)
    assert Outcome.from_dict(outcome.to_dict()) == outcome
    assert not outcome.ok and Outcome(terminal=Terminal.COMPLETED).ok


def test_the_statuses_that_mean_ran_out() -> None:
    assert {s for s in StepStatus if s.cut} == {StepStatus.TIMED_OUT, StepStatus.ABANDONED}
    assert {s for s in StepStatus if s.ran_out} == {
        StepStatus.TIMED_OUT,
        StepStatus.ABANDONED,
        StepStatus.SKIPPED,
    }


@pytest.mark.parametrize(
    ("status", "allocated", "says"),
    [
        (StepStatus.SKIPPED, 500.0, "search not started: budget 500.0 ms below min_viable"),
        (StepStatus.SKIPPED, 0.0, "search not started: no time left"),
        (StepStatus.ABANDONED, 500.0, "overran its budget of 500.0 ms (sync work abandoned)"),
        (StepStatus.TIMED_OUT, 500.0, "search cancelled at its budget of 500.0 ms"),
    ],
)
def test_the_reason_a_step_ran_out_is_said_in_one_way(
    status: StepStatus, allocated: float, says: str
) -> None:
    assert says in _record(status, allocated).ran_out_reason()


def test_a_planned_steps_record_is_the_one_its_fields_would_make() -> None:
    """`Plan.record` builds its record from the fields' values in order, off the keyword path:
    each value must land in its own field, in the attributes and in the plain data alike."""
    import dataclasses

    from langgraph_deadline._core.plan import Plan

    plan = Plan(
        name="fetch",
        kind="tool",
        attempt=2,
        deadline=None,
        remaining=1.5,
        cap=0.75,
        budget=0.5,
        min_viable=0.0,
        started=0.0,
        started_at=1_700_000_000.0,
        note="from the plan",
        held=0.25,
        parent="agent@1",
    )
    record = plan.record(
        StepStatus.TIMED_OUT, side_effect_started=True, cancel_source="step_cap", gap=0.125
    )
    made = StepRecord(**{f.name: getattr(record, f.name) for f in dataclasses.fields(record)})
    assert dict(record) == dict(made) and record == made
    assert (record.name, record.kind, record.attempt) == ("fetch", "tool", 2)
    assert (record.remaining_ms, record.requested_ms, record.allocated_ms) == (1500, 750, 500)
    assert record.clamped is False and record.status is StepStatus.TIMED_OUT  # held: not clamped
    assert record.side_effect_started and record.cancel_source == "step_cap"
    assert (record.started_at, record.note, record.parent) == (1.7e9, "from the plan", "agent@1")
    assert (record.hedges, record.winner, record.hedge_held) == (0, None, None)
    assert (record.held_ms, record.gap_ms) == (250, 125)
    assert record["status"] == "timed_out" and record["gap_ms"] == 125
    assert dataclasses.replace(record, note=None).note is None
