"""`Policy`: the backoff it computes and the options it refuses; `on=` as a predicate."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from langgraph_deadline._retry.policy import Policy, retry_predicate
from langgraph_deadline._retry.retry import retry
from tests.retry.fakes import Flaky, Transient


def test_backoff_grows_exponentially_capped_with_bounded_jitter(sleeps: list[float]) -> None:
    flaky = Flaky()
    with pytest.raises(Transient):
        retry(
            flaky, on=Transient, attempts=5, initial=0.1, multiplier=2, max_backoff=0.3, jitter=0
        )()
    assert sleeps == pytest.approx([0.1, 0.2, 0.3, 0.3])

    sleeps.clear()
    with pytest.raises(Transient):
        retry(Flaky(), on=Transient, attempts=4, initial=0.1, max_backoff=10, jitter=0.05)()
    for got, base in zip(sleeps, [0.1, 0.2, 0.4], strict=True):
        assert base <= got <= base + 0.05


def test_huge_attempt_counts_do_not_overflow_the_backoff(sleeps: list[float]) -> None:
    with pytest.raises(Transient):
        retry(Flaky(), on=Transient, attempts=1200, initial=1.0, multiplier=10.0, max_backoff=0.5)()
    assert max(sleeps) == 0.5


@pytest.mark.parametrize(
    "on",
    [None, int, (), (ValueError, 3), "ValueError", [ValueError], 42],
)
def test_invalid_on_is_a_clear_type_error(on: Any) -> None:
    with pytest.raises(TypeError, match="on must be"):
        retry(on=on)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"attempts": 0}, ValueError, "attempts must be >= 1"),
        ({"attempts": -3}, ValueError, "attempts must be >= 1"),
        ({"attempts": 2.5}, TypeError, "attempts must be an int"),
        ({"attempts": True}, TypeError, "attempts must be an int"),
        ({"initial": -0.1}, ValueError, "initial must be >= 0"),
        ({"initial": math.nan}, ValueError, "initial must be a finite"),
        ({"max_backoff": -1}, ValueError, "max_backoff must be >= 0"),
        ({"jitter": -1}, ValueError, "jitter must be >= 0"),
        ({"min_attempt": math.inf}, ValueError, "min_attempt must be a finite"),
        ({"min_attempt": "1"}, TypeError, "min_attempt must be a number"),
        ({"multiplier": 0.5}, ValueError, "multiplier must be a finite number >= 1"),
        ({"multiplier": None}, TypeError, "multiplier must be a number"),
        ({"kind": "database"}, ValueError, "kind must be one of"),
        ({"on_attempt": 3}, TypeError, "on_attempt must be a callable"),
        ({"name": ""}, TypeError, "name must be a non-empty str"),
    ],
)
def test_bad_options_are_refused_when_retry_is_called(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        retry(on=Transient, **kwargs)
    with pytest.raises(error, match=match):
        retry(lambda: None, on=Transient, **kwargs)


def test_a_policy_is_a_frozen_value_with_its_numbers_as_floats() -> None:
    policy = Policy(accepts=retry_predicate(Transient), attempts=2, initial=1, multiplier=3)
    assert (policy.initial, policy.multiplier) == (1.0, 3.0)
    assert isinstance(policy.initial, float) and isinstance(policy.multiplier, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.attempts = 5  # type: ignore[misc]
    assert policy == Policy(accepts=policy.accepts, attempts=2, initial=1.0, multiplier=3.0)


def test_a_policy_is_checked_when_it_is_built() -> None:
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        Policy(accepts=retry_predicate(Transient), attempts=0)
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        Policy(accepts=retry_predicate(Transient), name="")


def test_backoff_without_jitter_is_exponential_and_capped() -> None:
    policy = Policy(accepts=retry_predicate(Transient), initial=0.5, max_backoff=3.0, jitter=0.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert Policy(accepts=policy.accepts, initial=0.0).backoff(5) <= 0.1  # jitter only


def test_the_predicate_accepts_a_type_a_tuple_or_a_function() -> None:
    by_type = retry_predicate(ValueError)
    by_tuple = retry_predicate((KeyError, ValueError))
    by_function = retry_predicate(lambda exc: "again" in str(exc))
    assert by_type(ValueError()) and not by_type(KeyError())
    assert by_tuple(KeyError()) and by_tuple(ValueError()) and not by_tuple(OSError())
    assert by_function(OSError("try again")) and not by_function(OSError("bad"))
