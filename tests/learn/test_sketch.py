"""The latency sketch: bounded relative error, exact merges, censoring that moves quantiles up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_deadline._learn.sketch import RELATIVE_ACCURACY
from langgraph_deadline.learn import LatencySketch

durations = st.lists(st.floats(min_value=1e-5, max_value=1e4), min_size=1, max_size=200)


@given(durations, st.floats(min_value=0.0, max_value=1.0))
def test_a_quantile_is_within_the_relative_accuracy_of_a_sample(xs: list[float], q: float) -> None:
    est = LatencySketch.of(finished=xs).quantile(q)
    assert est is not None and not est.at_least
    nearest = min(xs, key=lambda x: abs(x - est.seconds) / x)
    assert abs(est.seconds - nearest) <= RELATIVE_ACCURACY * nearest * 1.0001


@given(durations, durations)
def test_merge_is_exact_and_commutative(a: list[float], b: list[float]) -> None:
    left, right = LatencySketch.of(finished=a), LatencySketch.of(censored=b)
    merged = left.merge(right)
    assert merged == right.merge(left) == LatencySketch.of(finished=a, censored=b)
    assert merged.count == len(a) + len(b)
    assert merged.censored == len(b)


@given(durations, st.floats(min_value=0.5, max_value=0.99))
def test_censored_samples_never_move_a_quantile_down(xs: list[float], q: float) -> None:
    cut = max(xs)  # steps cut at the slowest finish: they took at least that long
    plain = LatencySketch.of(finished=xs).quantile(q)
    censored = LatencySketch.of(finished=xs, censored=[cut] * len(xs)).quantile(q)
    assert plain is not None and censored is not None
    assert censored.seconds >= plain.seconds


def test_a_tool_that_often_times_out_does_not_look_fast() -> None:
    sketch = LatencySketch.of(finished=[0.1] * 60, censored=[0.8] * 40)
    p50 = sketch.quantile(0.5)
    p90 = sketch.quantile(0.9)
    assert p50 is not None and p90 is not None
    assert p50.seconds == pytest.approx(0.1, rel=0.02) and not p50.at_least
    assert p90.at_least and p90.seconds == pytest.approx(0.8, rel=0.02)
    assert str(p90).startswith(">= 0.79")


def test_p_finish_within_reads_the_survival_curve() -> None:
    sketch = LatencySketch.of(finished=[0.1] * 50 + [1.0] * 50)
    assert sketch.p_finish_within(0.05) == 0.0
    assert sketch.p_finish_within(0.5) == pytest.approx(0.5)
    assert sketch.p_finish_within(2.0) == pytest.approx(1.0)
    assert LatencySketch().p_finish_within(1.0) == 0.0
    assert LatencySketch().quantile(0.5) is None


@given(durations, durations)
def test_a_sketch_survives_its_dict_form(a: list[float], b: list[float]) -> None:
    sketch = LatencySketch.of(finished=a, censored=b)
    assert LatencySketch.from_dict(sketch.to_dict()) == sketch


def test_a_sketch_of_another_layout_is_refused() -> None:
    data = LatencySketch.of(finished=[1.0]).to_dict()
    with pytest.raises(ValueError, match="bucket layout"):
        LatencySketch.from_dict({**data, "gamma": 1.05})


def test_a_quantile_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match="q must be in"):
        LatencySketch.of(finished=[1.0]).quantile(1.5)
