from __future__ import annotations

import datetime as dt
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_deadline import Deadline, earliest
from langgraph_deadline.testing import ManualClock

seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
caps = st.none() | seconds


def test_after_counts_down_on_the_monotonic_clock() -> None:
    clock = ManualClock()
    d = Deadline.after(5, clock=clock)
    assert d.remaining() == 5
    clock.advance(2)
    assert d.remaining() == 3
    assert not d.expired
    clock.advance(3)
    assert d.expired
    assert d.remaining() == 0


def test_wall_clock_jumps_do_not_move_a_deadline() -> None:
    clock = ManualClock()
    d = Deadline.after(5, clock=clock)
    clock.jump_wall(-3600)
    assert d.remaining() == 5
    clock.jump_wall(7200)
    assert d.remaining() == 5


def test_at_maps_epoch_seconds_and_datetimes() -> None:
    clock = ManualClock(wall=1_800_000_000.0)
    assert Deadline.at(1_800_000_010.0, clock=clock).remaining() == 10
    when = dt.datetime.fromtimestamp(1_800_000_004.0, dt.UTC)
    d = Deadline.at(when, clock=clock)
    assert d.remaining() == pytest.approx(4)
    assert d.timestamp == pytest.approx(1_800_000_004.0)
    assert Deadline.at(1_799_999_990.0, clock=clock).expired


def test_timestamp_is_wall_clock_epoch_seconds() -> None:
    clock = ManualClock(wall=1_700_000_000.0)
    assert Deadline.after(2.5, clock=clock).timestamp == 1_700_000_002.5


def test_budget_is_min_of_cap_and_remaining_minus_reserve() -> None:
    clock = ManualClock()
    d = Deadline.after(10, clock=clock)
    assert d.budget() == 10
    assert d.budget(cap=3) == 3
    assert d.budget(cap=30, reserve=2) == 8
    assert d.budget(reserve=20) == 0


def test_earliest_wins_and_none_is_no_deadline() -> None:
    clock = ManualClock()
    a = Deadline.after(1, clock=clock)
    b = Deadline.after(2, clock=clock)
    assert a.earliest(b) is a
    assert b.earliest(a) is a
    assert a.earliest(None) is a
    assert min(a, b) is a
    assert earliest(None, b, None, a) is a
    assert earliest() is None
    assert a < b
    assert b > a
    assert a <= a
    assert a == Deadline.at(a.timestamp, clock=clock)


def test_is_immutable_and_pickles_as_its_instant() -> None:
    d = Deadline.after(60)
    with pytest.raises(AttributeError):
        d._wall = 0  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(d))
    assert back.timestamp == d.timestamp
    assert abs(back.remaining() - d.remaining()) < 0.5
    assert "Deadline(at=" in repr(d)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-math.inf, ValueError),
        ("5", TypeError),
        (None, TypeError),
        (True, TypeError),
    ],
)
def test_after_rejects_bad_seconds_naming_the_argument(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="seconds"):
        Deadline.after(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-5.0, ValueError),
        ("2026-01-01", TypeError),
        (1_800_000_000_000, ValueError),  # milliseconds passed as seconds
        (dt.datetime(2030, 1, 1), ValueError),  # naive datetime
    ],
)
def test_at_rejects_bad_timestamps_naming_the_argument(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="timestamp"):
        Deadline.at(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs", [{"cap": -1}, {"cap": math.nan}, {"reserve": -0.1}, {"reserve": "1"}]
)
def test_budget_rejects_bad_cap_and_reserve(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError), match=next(iter(kwargs))):
        Deadline.after(1).budget(**kwargs)  # type: ignore[arg-type]


@given(total=seconds, cap=caps, reserve=seconds, spent=seconds)
def test_a_budget_never_exceeds_cap_remaining_or_remaining_minus_reserve(
    total: float, cap: float | None, reserve: float, spent: float
) -> None:
    clock = ManualClock()
    d = Deadline.after(total, clock=clock)
    clock.advance(spent)
    b = d.budget(cap, reserve)
    assert 0 <= b <= d.remaining()
    assert b <= max(0.0, d.remaining() - reserve)
    if cap is not None:
        assert b <= cap


@given(outer=seconds, inner=seconds)
def test_combining_never_extends(outer: float, inner: float) -> None:
    clock = ManualClock()
    a = Deadline.after(outer, clock=clock)
    b = Deadline.after(inner, clock=clock)
    c = a.earliest(b)
    assert c <= a
    assert c <= b
    assert c.remaining() == min(a.remaining(), b.remaining())
    assert b.earliest(a) == c
    assert earliest(a, None, b) == c


@pytest.mark.parametrize("value", [10**400, 1e300, 3.2e9])
def test_after_refuses_absurdly_long_timeouts_with_a_value_error(value: float) -> None:
    # beyond a float (not an OverflowError), or beyond the 100-year maximum a thread can wait
    with pytest.raises(ValueError, match="seconds"):
        Deadline.after(value)


def test_at_refuses_a_duration_passed_as_a_timestamp_and_points_to_after() -> None:
    with pytest.raises(ValueError, match=r"after 2000-01-01.*Deadline\.after\(5\)"):
        Deadline.at(5)


@pytest.mark.parametrize(
    ("monotonic", "wall", "says"),
    [
        (math.nan, 1_800_000_000.0, "monotonic"),
        (5.0, math.nan, "wall"),
        (math.inf, math.inf, "monotonic"),
        ("5", 1_800_000_000.0, "monotonic"),
    ],
)
def test_the_constructor_refuses_readings_that_are_not_finite_numbers(
    monotonic: object, wall: object, says: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=says):
        Deadline(monotonic=monotonic, wall=wall)  # type: ignore[arg-type]


def test_the_constructor_points_to_after_and_at() -> None:
    doc = Deadline.__init__.__doc__ or ""
    assert "Deadline.after()" in doc and "Deadline.at()" in doc
    clock = ManualClock()
    d = Deadline(monotonic=clock.monotonic() + 2, wall=clock.time() + 2, clock=clock)
    assert d == Deadline.after(2, clock=clock) and d.remaining() == 2
