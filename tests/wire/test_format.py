"""The wire format: what a header says, what a server makes of it, what a client sends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import langgraph_deadline.asgi
import langgraph_deadline.http
from langgraph_deadline import Deadline, DeadlineExceeded, deadline_scope
from langgraph_deadline._core.headers import (
    HeaderError,
    error_body,
    grpc_seconds,
    parse_error_body,
    read,
)
from langgraph_deadline.http import WireFormat, from_headers, to_headers
from langgraph_deadline.testing import ManualClock

MAX = 30.0


def _in(clock: ManualClock, d: Deadline | None) -> float:
    """Seconds from now (on `clock`) to `d`, to the microsecond."""
    assert d is not None
    return round(d.timestamp - clock.time(), 6)


def test_http_and_asgi_modules_export_what_is_documented() -> None:
    assert set(langgraph_deadline.http.__all__) == {
        "WireFormat",
        "deadline_hooks",
        "from_headers",
        "to_headers",
    }
    assert set(langgraph_deadline.asgi.__all__) == {"DeadlineASGIMiddleware"}


# -- reading ----------------------------------------------------------------------------------


def test_relative_header_is_milliseconds_from_receipt() -> None:
    clock = ManualClock()
    d = from_headers({"X-Request-Timeout-Ms": "1500"}, clock=clock)
    assert _in(clock, d) == pytest.approx(1.5)
    assert d is not None
    assert d.remaining() == pytest.approx(1.5)


def test_header_names_are_case_insensitive() -> None:
    clock = ManualClock()
    assert _in(clock, from_headers({"x-request-timeout-ms": "250"}, clock=clock)) == 0.25
    assert _in(clock, from_headers([("X-REQUEST-TIMEOUT-MS", "250")], clock=clock)) == 0.25


def test_no_header_means_no_deadline() -> None:
    assert from_headers({"content-type": "application/json"}) is None
    assert from_headers({}) is None


def test_zero_means_no_time_left() -> None:
    d = from_headers({"X-Request-Timeout-Ms": "0"})
    assert d is not None
    assert d.expired


@pytest.mark.parametrize("ms", ["1000000000", "9" * 30])
def test_absurdly_long_timeouts_are_clamped_to_the_server_maximum(ms: str) -> None:
    clock = ManualClock()
    d = from_headers({"X-Request-Timeout-Ms": ms}, max_timeout=MAX, clock=clock)
    assert _in(clock, d) == MAX


@pytest.mark.parametrize("value", ["-5", "abc", "1.5", "+5", "", " ", "1e3", "١٢٣", "0x10"])
def test_malformed_relative_values_raise_naming_the_header(value: str) -> None:
    with pytest.raises(ValueError, match="x-request-timeout-ms"):
        from_headers({"X-Request-Timeout-Ms": value})


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("name", ["x-€", "X-Request-Timeout-M\u0161", "\u212a-id", "x-\U0001f600"])
def test_headers_that_are_not_ours_are_ignored_whatever_their_name(name: str, strict: bool) -> None:
    clock = ManualClock()
    headers = [(name, "1"), ("X-Request-Timeout-Ms", "500")]
    assert _in(clock, from_headers(headers, strict=strict, clock=clock)) == 0.5
    assert from_headers({name: "1"}, strict=strict, clock=clock) is None


@pytest.mark.parametrize("value", ["5€", "\u0665", "5\x00"])
def test_a_header_of_ours_with_characters_beyond_ascii_is_refused_naming_it(value: str) -> None:
    with pytest.raises(HeaderError, match="x-request-timeout-ms"):
        from_headers({"x-€": "1", "X-Request-Timeout-Ms": value})
    clock = ManualClock()
    headers = {"X-Request-Timeout-Ms": value, "grpc-timeout": "2S"}
    assert _in(clock, from_headers(headers, strict=False, clock=clock)) == 2.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1H", 3600.0),
        ("2M", 120.0),
        ("3S", 3.0),
        ("1500m", 1.5),
        ("250000u", 0.25),
        ("99999999n", 0.099999999),
        ("0S", 0.0),
    ],
)
def test_grpc_timeout_units(value: str, seconds: float) -> None:
    assert grpc_seconds(value) == pytest.approx(seconds)
    clock = ManualClock()
    assert _in(clock, from_headers({"grpc-timeout": value}, clock=clock)) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", ["123456789S", "9" * 30 + "S", "5x", "5", "S", "-1S", "1.5S", "5s", "", "٣S"]
)
def test_bad_grpc_timeouts_raise(value: str) -> None:
    with pytest.raises(ValueError, match="grpc-timeout"):
        from_headers({"grpc-timeout": value})


def test_the_earliest_relative_value_wins() -> None:
    clock = ManualClock()
    headers = {"X-Request-Timeout-Ms": "2000", "grpc-timeout": "500m"}
    assert _in(clock, from_headers(headers, clock=clock)) == 0.5
    assert _in(clock, from_headers({"X-Request-Timeout-Ms": "900, 700"}, clock=clock)) == 0.7
    pairs = [("X-Request-Timeout-Ms", "900"), ("X-Request-Timeout-Ms", "800")]
    assert _in(clock, from_headers(pairs, clock=clock)) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="soon"):
        from_headers({"X-Request-Timeout-Ms": "900, soon"})


def test_absolute_within_the_skew_threshold_may_only_make_it_earlier() -> None:
    clock = ManualClock()
    now_ms = int(clock.time() * 1000)
    earlier = {"X-Request-Timeout-Ms": "2000", "X-Request-Deadline": str(now_ms + 1500)}
    assert _in(clock, from_headers(earlier, clock=clock)) == pytest.approx(1.5)
    later = {"X-Request-Timeout-Ms": "2000", "X-Request-Deadline": str(now_ms + 2800)}
    assert _in(clock, from_headers(later, clock=clock)) == pytest.approx(2.0)


def test_receiver_clock_ten_minutes_ahead_still_gets_its_budget_from_the_relative_header() -> None:
    sender = ManualClock(wall=1_800_000_000.0)
    receiver = ManualClock(wall=1_800_000_000.0 + 600.0)  # ten minutes ahead
    with deadline_scope(Deadline.after(1.5, clock=sender)):
        headers = to_headers()
    got = read(headers.items(), clock=receiver, max_skew=1.0)
    assert got.skew == pytest.approx(-600.0, abs=0.01)  # the absolute one disagreed: ignored
    assert got.source == "x-request-timeout-ms"
    assert got.deadline is not None
    assert got.deadline.remaining() == pytest.approx(1.5)


def test_absolute_alone_is_taken_and_clamped() -> None:
    clock = ManualClock()
    now_ms = int(clock.time() * 1000)
    d = from_headers({"X-Request-Deadline": str(now_ms + 4000)}, clock=clock)
    assert _in(clock, d) == pytest.approx(4.0)
    far = from_headers({"X-Request-Deadline": str(now_ms + 10**9)}, max_timeout=MAX, clock=clock)
    assert _in(clock, far) == MAX
    past = from_headers({"X-Request-Deadline": str(now_ms - 5000)}, clock=clock)
    assert past is not None
    assert past.expired


@pytest.mark.parametrize("value", ["1800000000", "-1", "soon", "9" * 16, "99999999999999"])
def test_bad_absolute_values_raise(value: str) -> None:
    # seconds instead of milliseconds, negative, not a number, absurd, after year 3000
    with pytest.raises(ValueError, match="x-request-deadline"):
        from_headers({"X-Request-Deadline": value})


def test_header_names_are_configurable() -> None:
    clock = ManualClock()
    wire = WireFormat(timeout_header="X-Budget-Ms", deadline_header=None, grpc_timeout_header=None)
    assert from_headers({"X-Request-Timeout-Ms": "100"}, wire=wire) is None
    assert from_headers({"grpc-timeout": "bad"}, wire=wire) is None  # not read: not an error
    assert _in(clock, from_headers({"x-budget-ms": "100"}, wire=wire, clock=clock)) == 0.1
    with deadline_scope(Deadline.after(2.0, clock=clock)):
        assert to_headers(wire=wire) == {"X-Budget-Ms": "2000"}


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout_header": ""}, {"deadline_header": "  "}, {"timeout_header": None}],
)
def test_wire_format_rejects_empty_names(kwargs: dict[str, str | None]) -> None:
    with pytest.raises(TypeError):
        WireFormat(**kwargs)  # type: ignore[arg-type]


def test_wire_format_rejects_one_name_for_two_headers() -> None:
    with pytest.raises(ValueError, match="different"):
        WireFormat(timeout_header="X-T", deadline_header="x-t")


def test_from_headers_rejects_bad_limits() -> None:
    with pytest.raises(ValueError, match="max_timeout"):
        from_headers({}, max_timeout=-1)
    with pytest.raises(TypeError):
        from_headers({}, max_skew="1")  # type: ignore[arg-type]


# -- sending ------------------------------------------------------------------------------------


def test_to_headers_carries_what_is_left_now_rounded_down() -> None:
    clock = ManualClock(wall=1_800_000_000.0)
    d = Deadline.after(2.0, clock=clock)
    clock.advance(0.4567)
    assert to_headers(d) == {
        "X-Request-Timeout-Ms": "1543",
        "X-Request-Deadline": "1800000002000",
    }


def test_to_headers_is_empty_without_a_deadline_and_refuses_without_time() -> None:
    assert to_headers() == {}
    clock = ManualClock()
    d = Deadline.after(0.0005, clock=clock)  # under a millisecond: nothing to hand on
    with pytest.raises(DeadlineExceeded), deadline_scope(d, name="call_b"):
        to_headers()
    with pytest.raises(TypeError):
        to_headers(1.5)  # type: ignore[arg-type]


@given(st.integers(min_value=1001, max_value=10**10), st.integers(min_value=0, max_value=10**6))
def test_a_hop_never_hands_on_more_time_than_it_has(left_us: int, transit_us: int) -> None:
    eps = 1e-5  # floats of epoch seconds are ~0.2 µs apart
    transit = transit_us / 1e6
    for wire in (WireFormat(), WireFormat(deadline_header=None)):
        clock = ManualClock()
        sent = Deadline.after(left_us / 1e6, clock=clock)
        headers = to_headers(sent, wire=wire)
        clock.advance(transit)
        got = from_headers(headers, wire=wire, clock=clock)
        assert got is not None
        shift = got.timestamp - sent.timestamp
        # Milliseconds are rounded down; the relative value moves by the transit time, which
        # an agreeing absolute value (same clocks here) takes back.
        assert -0.001 - eps < shift <= transit + eps
        if wire.deadline_header is not None:
            assert shift <= eps


# -- the 504 body ---------------------------------------------------------------------------------


def test_error_body_round_trip() -> None:
    body = error_body("deadline_exceeded", "search", "search cancelled at its budget")
    fields = parse_error_body("application/json", body)
    assert fields == {
        "terminal": "deadline_exceeded",
        "step": "search",
        "detail": "search cancelled at its budget",
    }


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/html", b'{"terminal": "deadline_exceeded"}'),
        ("application/json", b"<html>gateway timeout</html>"),
        ("application/json", b'["deadline_exceeded"]'),
        ("application/json", b'{"error": "timeout"}'),
        ("application/json", b'{"terminal": "deadline_exceeded", "pad": "' + b"x" * 5000 + b'"}'),
    ],
)
def test_other_bodies_are_not_ours(content_type: str, body: bytes) -> None:
    assert parse_error_body(content_type, body) is None


def test_header_error_is_a_value_error() -> None:
    assert issubclass(HeaderError, ValueError)


@pytest.mark.parametrize("name", ["X Request", "X-Budget:", "X-Budget\r\n", "X-Bügdet", " X-T"])
def test_wire_format_rejects_names_that_are_not_http_tokens(name: str) -> None:
    with pytest.raises(ValueError, match="token"):
        WireFormat(timeout_header=name)
