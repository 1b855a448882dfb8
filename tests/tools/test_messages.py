"""What a tool that ran out says: the default text, a tool's own text, the facts attached."""

from __future__ import annotations

from langgraph_deadline import StepRecord, timeout_message
from langgraph_deadline._core.plan import Step
from langgraph_deadline._core.timeouts import tool_facts
from langgraph_deadline._graph.answers import answer, render, timeout_of
from langgraph_deadline.types import StepStatus, ToolTimeout


def _info(status: StepStatus, **changes: object) -> ToolTimeout:
    values: dict[str, object] = {
        "tool": "search",
        "status": status,
        "budget_s": 2.0,
        "elapsed_s": 2.0,
        "remaining_s": 0.25,
        "min_viable_s": 1.0,
    }
    values.update(changes)
    return ToolTimeout(**values)  # type: ignore[arg-type]


def _record(status: StepStatus) -> StepRecord:
    return StepRecord(
        name="search",
        kind="tool",
        attempt=1,
        remaining_ms=250.0,
        requested_ms=2000.0,
        allocated_ms=2000.0,
        clamped=False,
        elapsed_ms=2001.23456,
        status=status,
    )


def test_a_timeout_says_the_data_may_exist_and_not_to_call_again_the_same_way() -> None:
    text = timeout_message(_info(StepStatus.TIMED_OUT))
    assert "did not answer within 2.0 s" in text
    assert "timeout, not an empty result" in text
    assert "Do not call 'search' again with the same arguments" in text


def test_a_skipped_call_says_it_was_not_called_and_what_was_left() -> None:
    text = timeout_message(_info(StepStatus.SKIPPED))
    assert "was skipped" in text and "0.2 s left" in text and "at least 1.0 s" in text
    assert "It was not called" in text


def test_a_tool_can_give_its_own_text_as_a_format_string_or_a_function() -> None:
    info = _info(StepStatus.TIMED_OUT)
    assert render(None, info) == timeout_message(info)
    assert render("{tool} {status} after {seconds} s", info) == "search timed_out after 2.0 s"
    assert render(lambda i: f"no {i.tool}", info) == "no search"


def test_the_facts_of_a_call_are_built_from_its_record() -> None:
    record = _record(StepStatus.TIMED_OUT)
    assert tool_facts(record.status, record=record) == {
        "status": "timed_out",
        "budget_ms": 2000.0,
        "elapsed_ms": 2001.235,
        "stale": False,
        "side_effect_started": False,
    }
    stale = tool_facts(record.status, record=record, error=ConnectionError(), age_s=61.23456)
    assert stale["stale"] is True and stale["age_s"] == 61.235
    assert stale["error"] == "ConnectionError"
    assert tool_facts(StepStatus.SKIPPED) == {
        "status": "skipped",
        "stale": False,
        "side_effect_started": False,
    }
    assert tool_facts(StepStatus.TIMED_OUT, side_effect_started=True)["side_effect_started"]


def test_the_facts_of_a_planned_call_come_from_its_plan_and_record() -> None:
    plan = Step("search", "tool", 2.0, 0.5).plan()
    record = plan.record(StepStatus.ABANDONED)
    info = timeout_of("search", plan, record)
    assert (info.status, info.budget_s, info.min_viable_s) == (StepStatus.ABANDONED, 2.0, 0.5)
    assert info.remaining_s is None  # no deadline in force
    assert timeout_of("search", plan, record, status=StepStatus.TIMED_OUT).status == "timed_out"


def test_the_answer_carries_the_facts_for_the_tool_call() -> None:
    msg = answer("text", call_id="c1", tool="search", facts={"status": "timed_out"})
    assert (msg.tool_call_id, msg.name, msg.status) == ("c1", "search", "error")
    assert msg.artifact == {"langgraph_deadline": {"status": "timed_out"}}
