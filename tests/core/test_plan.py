"""A step's budget, decided once when it starts (`Step.plan`), on a manual clock."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_deadline import Deadline, deadline_scope
from langgraph_deadline._core.plan import HANDOFF, RunTracker, Step, step_budget
from langgraph_deadline.testing import ManualClock
from langgraph_deadline.types import StepStatus


def test_no_deadline_and_no_cap_means_no_budget() -> None:
    plan = Step("s", "node").plan()
    assert plan.budget is None and not plan.skip and not plan.clamped
    assert plan.step_deadline() is None


def test_a_cap_alone_is_the_budget_and_is_not_shortened() -> None:
    plan = Step("s", "tool", 2.0, 0.5).plan()
    assert plan.budget == 2.0 and not plan.clamped and not plan.skip


def test_the_deadline_clamps_the_cap_and_hands_over_early() -> None:
    clock = ManualClock()
    d = Deadline.after(1.0, clock=clock)
    plan = Step("s", "node", 5.0).plan(deadline=d)
    assert plan.clamped
    assert plan.budget == pytest.approx(1.0 - HANDOFF)
    clock.advance(0.5)
    assert plan.remaining == pytest.approx(1.0)  # read when the step started, not now


def test_the_runs_reserve_is_held_back_once() -> None:
    clock = ManualClock()
    run = RunTracker(deadline=Deadline.after(2.0, clock=clock), reserve=0.5)
    plan = Step("s", "node").plan(run=run)
    assert plan.budget == pytest.approx(1.5 - HANDOFF)
    with deadline_scope(plan.step_deadline()):  # a step inside it: no second reserve
        inner = Step("t", "tool").plan(run=run)
    assert inner.budget == pytest.approx(plan.budget - HANDOFF, abs=1e-3)


def test_below_min_viable_the_step_is_skipped_and_recorded_so() -> None:
    d = Deadline.after(0.2, clock=ManualClock())
    plan = Step("s", "model", None, 1.0).plan(deadline=d)
    assert plan.skip
    record = plan.record(StepStatus.SKIPPED)
    assert record.status is StepStatus.SKIPPED and record.kind == "model"
    assert record.allocated_ms == pytest.approx((0.2 - HANDOFF) * 1000.0)


@given(
    left=st.floats(min_value=0.0, max_value=1e6),
    cap=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e6)),
    reserve=st.floats(min_value=0.0, max_value=1e6),
)
def test_the_budget_never_exceeds_the_cap_or_what_is_left_less_the_reserve(
    left: float, cap: float | None, reserve: float
) -> None:
    d = Deadline.after(left, clock=ManualClock())
    plan = Step("s", "node", cap, reserve=reserve).plan(deadline=d)
    assert plan.budget is not None and plan.budget >= 0.0
    assert plan.budget <= max(0.0, left - reserve) + 1e-9
    if cap is not None:
        assert plan.budget <= cap


_SECONDS = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@given(cap=st.one_of(st.none(), _SECONDS), left=st.one_of(st.none(), st.floats(-1e6, 1e6)))
def test_the_budget_rule_is_min_of_cap_and_left_and_never_negative(
    cap: float | None, left: float | None
) -> None:
    budget = step_budget(cap, left)
    if left is None:
        assert budget == cap
        return
    assert budget is not None and budget >= 0.0
    assert budget <= max(0.0, left)
    if cap is not None:
        assert budget <= cap
        if cap <= left:
            assert budget == cap  # its own cap: not shortened


@given(
    total=st.floats(min_value=0.0, max_value=100.0),
    reserve=st.floats(min_value=0.0, max_value=10.0),
    caps=st.lists(st.one_of(st.none(), st.floats(min_value=0.0, max_value=100.0)), max_size=6),
    kinds=st.sampled_from(["node", "tool", "model", "http"]),
)
def test_a_deadline_only_ever_gets_earlier_as_steps_nest(
    total: float, reserve: float, caps: list[float | None], kinds: str
) -> None:
    # A run's steps nested as a graph nests them (a node, a tool inside it, its HTTP request):
    # each planned inside the one before, no step's deadline is later than its enclosing one's.
    clock = ManualClock()
    run = RunTracker(deadline=Deadline.after(total, clock=clock), reserve=reserve)
    assert run.deadline is not None
    enclosing = run.deadline
    with contextlib.ExitStack() as nested:
        for depth, cap in enumerate(caps):
            plan = Step(f"s{depth}", kinds, cap).plan(run=run)  # type: ignore[arg-type]
            ends = plan.step_deadline()
            assert ends is not None and plan.budget is not None
            assert ends.remaining() <= enclosing.remaining() + 1e-9
            assert plan.budget <= max(0.0, enclosing.remaining()) + 1e-9
            if plan.skip:
                break
            nested.enter_context(deadline_scope(ends))
            enclosing = ends
