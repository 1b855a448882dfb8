"""Whatever a client puts in the deadline headers, the server grants the earliest valid value,
never more than its maximum, and never fails: properties, against a model of the format."""

from __future__ import annotations

import logging
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_deadline._core.headers import read
from langgraph_deadline.http import from_headers
from langgraph_deadline.testing import ManualClock

MAX = 30.0
UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
TIMEOUT = "X-Request-Timeout-Ms"
GRPC = "grpc-timeout"
DEADLINE = "X-Request-Deadline"


def model(header: str, value: str) -> float | None:
    """Seconds a value asks for, by the format's own definition; None when it is malformed."""
    if header == TIMEOUT and re.fullmatch(r"[0-9]+", value):
        return 1e9 if len(value) > 12 else int(value) / 1000
    if header == GRPC and re.fullmatch(r"[0-9]{1,8}[HMSmun]", value):
        return min(int(value[:-1]) * UNITS[value[-1]], 1e9)  # 31 years and up: 'forever'
    return None


noise = st.text(alphabet=string.ascii_letters + string.digits + "-+.:;_/٣ ", max_size=12)
timeouts = st.integers(0, 10**12).map(str) | st.integers(10**12, 10**40).map(str)  # absurd
grpcs = st.builds(lambda n, u: f"{n}{u}", st.integers(0, 10**8 - 1), st.sampled_from("HMSmun"))
odd = st.sampled_from(["-5", "1.5", "", "1e3", "0x10", "9" * 30 + "S", "5s", "S", "١٢٣", "+5"])
values = {TIMEOUT: timeouts | noise | odd, GRPC: grpcs | noise | odd}


@st.composite
def header_lists(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Up to 6 headers, each with 1 to 3 comma-separated values, valid or not, in any case."""
    headers = []
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from([TIMEOUT, GRPC]))
        parts = draw(st.lists(values[name], min_size=1, max_size=3))
        headers.append((draw(st.sampled_from([name, name.lower(), name.upper()])), parts))
    return [(name, ", ".join(parts)) for name, parts in headers]


def asked(headers: list[tuple[str, str]]) -> list[float]:
    canonical = {TIMEOUT.lower(): TIMEOUT, GRPC: GRPC}
    found = []
    for name, text in headers:
        for value in text.split(","):
            secs = model(canonical[name.lower()], value.strip())
            if secs is not None:
                found.append(secs)
    return found


quiet = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@quiet
@given(headers=header_lists())
def test_the_earliest_valid_value_wins_clamped_and_nothing_raises(
    headers: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    valid = asked(headers)
    with caplog.at_level(logging.CRITICAL, logger="langgraph_deadline.http"):
        d = from_headers(headers, max_timeout=MAX, strict=False, clock=clock)
    assert d is not None
    assert d.remaining() <= MAX
    assert d.remaining() == pytest.approx(min([*valid, MAX]), abs=1e-6)
    got = read(headers, clock=clock)
    bad = sum(len(text.split(",")) for _, text in headers) - len(valid)
    assert bool(got.errors) == (bad > 0)
    assert len(got.errors) <= 4


@quiet
@given(headers=header_lists(), offset_ms=st.integers(-(10**7), 10**12) | st.just(None))
def test_an_absolute_deadline_never_makes_it_later_than_the_relative_one_or_the_maximum(
    headers: list[tuple[str, str]], offset_ms: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    absolute = "soon" if offset_ms is None else str(int(clock.time() * 1000) + offset_ms)
    with caplog.at_level(logging.CRITICAL, logger="langgraph_deadline.http"):
        d = from_headers(
            [*headers, (DEADLINE, absolute)], max_timeout=MAX, strict=False, clock=clock
        )
    assert d is not None
    assert d.remaining() <= min([*asked(headers), MAX]) + 1e-6


@quiet
@given(headers=header_lists())
def test_in_strict_mode_a_malformed_value_is_a_value_error_naming_its_header(
    headers: list[tuple[str, str]],
) -> None:
    bad = sum(len(text.split(",")) for _, text in headers) > len(asked(headers))
    if not bad:
        from_headers(headers, max_timeout=MAX)
        return
    with pytest.raises(ValueError, match=f"(?i)({TIMEOUT}|{GRPC})"):
        from_headers(headers, max_timeout=MAX)


def test_a_valid_short_timeout_survives_a_malformed_sibling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    headers = {TIMEOUT: "1500", GRPC: "soon"}
    with caplog.at_level(logging.WARNING, logger="langgraph_deadline.http"):
        d = from_headers(headers, max_timeout=MAX, strict=False, clock=clock)
    assert d is not None
    assert d.remaining() == 1.5
    assert "grpc-timeout" in caplog.text


def test_a_flood_of_malformed_values_is_summed_up_not_listed() -> None:
    got = read([(TIMEOUT, ", ".join(["x"] * 1000) + ", 250")], clock=ManualClock())
    assert got.deadline is not None
    assert got.deadline.remaining() == 0.25
    assert got.errors[-1] == "and 997 more malformed values"
    assert len(got.errors) == 4


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        (None, TypeError),
        ("X-Request-Timeout-Ms: 5", TypeError),
        (b"x", TypeError),
        (5, TypeError),
        ([("X-Request-Timeout-Ms",)], TypeError),
        ([("X-Request-Timeout-Ms", 5)], TypeError),
        ({"X-Request-Timeout-Ms": 5}, TypeError),
    ],
)
def test_from_headers_refuses_what_is_not_headers(headers: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="header"):
        from_headers(headers)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"strict": "no"}, {"wire": "X-Budget-Ms"}, {"clock": 5}, {"max_timeout": 10**400}],
)
def test_from_headers_refuses_bad_options(kwargs: dict[str, object]) -> None:
    with pytest.raises((TypeError, ValueError), match=next(iter(kwargs))):
        from_headers({}, **kwargs)  # type: ignore[arg-type]
