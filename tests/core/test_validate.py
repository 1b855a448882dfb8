"""Bad input gets a clear error when it is given, never a crash later: properties of the checks."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_deadline import Deadline, earliest
from langgraph_deadline._core.deadline import MIN_TIMESTAMP
from langgraph_deadline._core.validate import (
    MAX_SECONDS,
    check_cap,
    check_flag,
    check_seconds,
    show,
)
from langgraph_deadline.testing import ManualClock

anything = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**500)
    | st.floats()
    | st.text(max_size=5)
    | st.binary(max_size=5)
    | st.lists(st.integers(), max_size=2)
)
durations = st.floats(min_value=0, max_value=MAX_SECONDS, allow_nan=False)
short = st.floats(min_value=0, max_value=1e6, allow_nan=False)


def _number(value: object) -> float | None:
    """`value` as a float when it is a plain, finite number (the model the checks are tested
    against), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > 10**308:
        return None
    return float(value) if math.isfinite(value) else None


@given(value=anything)
def test_a_duration_is_a_float_in_range_or_a_clear_error_naming_the_argument(value: object) -> None:
    number = _number(value)
    if number is not None and 0.0 <= number <= MAX_SECONDS:
        assert check_seconds(value, "budget_s") == number
    else:
        number_type = isinstance(value, int | float) and not isinstance(value, bool)
        error = ValueError if number_type else TypeError
        with pytest.raises(error, match="budget_s"):
            check_seconds(value, "budget_s")


@pytest.mark.parametrize(
    ("value", "error", "says"),
    [
        (10**400, ValueError, "finite"),  # beyond any float: not an OverflowError
        (-(10**400), ValueError, "finite"),
        (1e300, ValueError, "100 years"),
        (MAX_SECONDS * 2, ValueError, "100 years"),
        (-0.5, ValueError, ">= 0"),
        (math.nan, ValueError, "finite"),
        (-math.inf, ValueError, "finite"),
        (True, TypeError, "bool"),
        (False, TypeError, "bool"),
        ("1", TypeError, "str"),
        (None, TypeError, "NoneType"),
    ],
)
def test_each_bad_duration_has_its_own_clear_error(
    value: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match="reserve") as info:
        check_seconds(value, "reserve")
    assert says in str(info.value)


def test_the_maximum_itself_is_allowed_and_none_means_no_cap() -> None:
    assert check_seconds(MAX_SECONDS, "cap") == MAX_SECONDS
    assert check_cap(None, "cap") is None
    with pytest.raises(ValueError, match="cap"):
        check_cap(10**400, "cap")


@given(value=anything)
def test_a_flag_is_a_bool_or_a_type_error(value: object) -> None:
    if isinstance(value, bool):
        assert check_flag(value, "strict") is value
    else:
        with pytest.raises(TypeError, match="strict"):
            check_flag(value, "strict")


@given(value=anything | st.integers(min_value=10**4400, max_value=10**4500))
def test_show_never_fails_and_stays_short(value: object) -> None:
    assert len(show(value)) <= 60


@given(value=anything)
def test_deadline_after_takes_any_valid_duration_and_refuses_the_rest(value: object) -> None:
    clock = ManualClock()
    number = _number(value)
    if number is not None and 0.0 <= number <= MAX_SECONDS:
        d = Deadline.after(value, clock=clock)  # type: ignore[arg-type]
        assert d.remaining() == pytest.approx(number)
        assert repr(d).startswith("Deadline(at=")
    else:
        with pytest.raises((TypeError, ValueError), match="seconds"):
            Deadline.after(value, clock=clock)  # type: ignore[arg-type]


@given(value=anything | st.floats(min_value=MIN_TIMESTAMP, max_value=1e10))
def test_deadline_at_takes_a_timestamp_between_2000_and_a_century_ahead(value: object) -> None:
    clock = ManualClock()
    number = _number(value)
    if number is not None and MIN_TIMESTAMP <= number <= clock.time() + MAX_SECONDS:
        assert Deadline.at(value, clock=clock).timestamp == number  # type: ignore[arg-type]
    else:
        with pytest.raises((TypeError, ValueError), match="timestamp"):
            Deadline.at(value, clock=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [0, 5, 30.0, 3600, 946_684_799])
def test_a_duration_passed_to_at_is_refused_with_a_pointer_to_after(seconds: float) -> None:
    with pytest.raises(ValueError, match=r"Deadline\.after"):
        Deadline.at(seconds)


@given(wall=st.floats(allow_nan=True, allow_infinity=True))
def test_repr_never_raises_whatever_the_instant(wall: float) -> None:
    d = Deadline._at(wall, ManualClock())
    assert repr(d).startswith("Deadline(at=")


@pytest.mark.parametrize("other", ["x", 5, 5.0, object()])
def test_combining_with_something_that_is_not_a_deadline_is_a_type_error(other: object) -> None:
    d = Deadline.after(1)
    with pytest.raises(TypeError, match=type(other).__name__):
        earliest(d, other)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=type(other).__name__):
        d.earliest(other)  # type: ignore[arg-type]


# -- the arithmetic --------------------------------------------------------------------------------


@given(a=short, b=short, c=short)
def test_earliest_is_min_order_free_and_never_later_than_any(a: float, b: float, c: float) -> None:
    clock = ManualClock()
    da, db, dc = (Deadline.after(s, clock=clock) for s in (a, b, c))
    best = earliest(da, db, dc)
    assert best is not None
    assert best == min(da, db, dc) == earliest(dc, None, db, da)
    assert best.remaining() == pytest.approx(min(a, b, c), abs=1e-9)
    assert da.earliest(db).earliest(dc) == da.earliest(db.earliest(dc)) == best


@given(total=durations, spent=durations)
def test_remaining_counts_down_to_zero_and_stays_there(total: float, spent: float) -> None:
    clock = ManualClock()
    d = Deadline.after(total, clock=clock)
    clock.advance(spent)
    assert d.remaining() == pytest.approx(max(0.0, total - spent), abs=1e-3)
    assert d.expired == (d.remaining() == 0.0)


@given(total=short, small=short, large=short, reserve=short)
def test_a_budget_grows_with_its_cap_and_shrinks_with_the_reserve(
    total: float, small: float, large: float, reserve: float
) -> None:
    small, large = sorted((small, large))
    d = Deadline.after(total, clock=ManualClock())
    assert d.budget(small, reserve) <= d.budget(large, reserve) <= d.budget(None, reserve)
    assert d.budget(large, reserve) <= d.budget(large, 0.0)


@given(a=short, b=short)
def test_a_longer_timeout_never_makes_an_earlier_deadline(a: float, b: float) -> None:
    clock = ManualClock()
    a, b = sorted((a, b))
    assert Deadline.after(a, clock=clock) <= Deadline.after(b, clock=clock)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.advance(-1), ValueError),
        (lambda c: c.advance(math.nan), ValueError),
        (lambda c: c.advance("1"), TypeError),
        (lambda c: c.jump_wall(math.inf), ValueError),
        (lambda c: ManualClock(wall=math.nan), ValueError),
        (lambda c: ManualClock(monotonic="0"), TypeError),
    ],
)
def test_the_manual_clock_refuses_times_that_would_poison_every_reading(
    call: Any, error: type[Exception]
) -> None:
    clock = ManualClock()
    with pytest.raises(error):
        call(clock)
    assert clock.monotonic() == 1_000.0  # unchanged
