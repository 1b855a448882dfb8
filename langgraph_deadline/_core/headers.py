"""The deadline on the wire: header names, reading, writing, the skew check and the 504 body.

- `X-Request-Timeout-Ms`: the time left, in whole milliseconds, computed when the request is
  sent (immune to clock skew). On receipt it rules.
- `X-Request-Deadline`: the absolute deadline, in epoch milliseconds. Only used when it agrees
  with the relative header within `max_skew`; then the earlier of the two wins.
- `grpc-timeout`: understood on receipt: 1 to 8 digits and a unit (`H M S m u n`).

A value that is not what the format says is malformed: `read` leaves it out (and names it), so it
can neither extend the deadline nor void a valid one beside it. An absurdly long one is kept and
left for the receiver's maximum to clamp. `docs/howto/across-services.md` is the reference.

In the core, with no framework, because two layers use it: the ASGI middleware and the httpx
hooks (`_wire`), and a graph served by LangGraph Server, which finds the request's headers in
its config (`_graph`). One module, so that one wire format is read and written everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .deadline import SYSTEM_CLOCK, Clock, Deadline, earliest

__all__ = [
    "BODY_MAX",
    "WIRE",
    "HeaderError",
    "Received",
    "WireFormat",
    "clamp",
    "deadline_timestamp",
    "error_body",
    "grpc_seconds",
    "outgoing",
    "parse_error_body",
    "read",
    "timeout_seconds",
]

BODY_MAX: Final = 4096  # bytes: a longer body is not a deadline answer

_ABSURD_S: Final = 1e9  # what a relative value of 31 years or more is read as ('forever')
_GRPC_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_EPOCH_MS_MIN: Final = 100_000_000_000  # 1973: anything smaller is seconds, not milliseconds
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP field name (RFC 9110)
_ERRORS_KEPT: Final = 3  # malformed values named in `Received.errors`; the rest are counted


class HeaderError(ValueError):
    """A deadline header that does not follow the wire format."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WireFormat:
    """The header names the deadline travels in. `None` switches a header off.

    `timeout_header` carries the time left in milliseconds (sent and read); `deadline_header`
    the absolute deadline in epoch milliseconds (sent, and read as a cross-check);
    `grpc_timeout_header` is only read.

    Raises:
        TypeError: a name that is not a non-empty string.
        ValueError: a name that is not an HTTP token, or one name for two headers.
    """

    timeout_header: str = "X-Request-Timeout-Ms"
    deadline_header: str | None = "X-Request-Deadline"
    grpc_timeout_header: str | None = "grpc-timeout"
    _kinds: dict[bytes, str] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kinds: dict[bytes, str] = {}
        names = (
            (self.timeout_header, "timeout"),
            (self.deadline_header, "deadline"),
            (self.grpc_timeout_header, "grpc"),
        )
        for name, kind in names:
            if name is None and kind != "timeout":
                continue
            if not isinstance(name, str) or not name.strip():
                raise TypeError(f"header names must be non-empty strings, got {name!r:.60}")
            if not _TOKEN.fullmatch(name):
                raise ValueError(
                    f"{kind} header name must be an HTTP token (letters, digits, "
                    f"!#$%&'*+-.^_`|~; no spaces or colons), got {name!r:.60}"
                )
            kinds[name.lower().encode("latin-1")] = kind
        if len(kinds) != sum(n is not None for n, _ in names):
            raise ValueError("the deadline headers need three different names")
        object.__setattr__(self, "_kinds", kinds)


WIRE: Final = WireFormat()


@dataclasses.dataclass(frozen=True, slots=True)
class Received:
    """What the headers of one request said. `skew`: how far (s) an ignored absolute was off;
    `errors`: the malformed values, ignored (at most `_ERRORS_KEPT`, then how many more)."""

    deadline: Deadline | None
    source: str | None = None
    skew: float | None = None
    errors: tuple[str, ...] = ()


# -- reading ----------------------------------------------------------------------------------


def _values(raw: str) -> list[str]:
    return [v.strip() for v in raw.split(",")] if "," in raw else [raw.strip()]


def _digits(value: str, what: str, header: str) -> str:
    if not value or not value.isascii() or not value.isdigit():
        raise HeaderError(f"{header}: {what} expected, got {value[:40]!r}")
    return value


def timeout_seconds(value: str, header: str = "X-Request-Timeout-Ms") -> float:
    """Seconds from a relative value in whole milliseconds; 13+ digits read as 'forever'."""
    digits = _digits(value, "a whole number of milliseconds >= 0", header)
    return _ABSURD_S if len(digits) > 12 else int(digits) / 1000.0


def grpc_seconds(value: str, header: str = "grpc-timeout") -> float:
    """Seconds from a `grpc-timeout` value: at most 8 digits and a unit, `H M S m u n`; over
    about 31 years read as 'forever' (left for the receiver's maximum to clamp)."""
    unit = _GRPC_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not 1 <= len(digits) <= 8 or not (digits.isascii() and digits.isdigit()):
        raise HeaderError(
            f"{header}: 1 to 8 digits and a unit (H M S m u n) expected, got {value[:40]!r}"
        )
    return min(int(digits) * unit, _ABSURD_S)  # 99999999H is 11 000 years: 'forever'


def deadline_timestamp(value: str, header: str = "X-Request-Deadline") -> float:
    """Epoch seconds from an absolute deadline in epoch milliseconds."""
    digits = _digits(value, "epoch milliseconds", header)
    if len(digits) > 15 or int(digits) < _EPOCH_MS_MIN:
        raise HeaderError(f"{header}: epoch milliseconds expected, got {value[:40]!r}")
    return int(digits) / 1000.0


def read(
    headers: Iterable[tuple[bytes | str, bytes | str]],
    *,
    wire: WireFormat = WIRE,
    max_skew: float = 1.0,
    clock: Clock = SYSTEM_CLOCK,
) -> Received:
    """The deadline that `headers` ask for (name/value pairs, bytes as in ASGI or str).

    Relative values (the timeout header, `grpc-timeout`) rule, the earliest of them if several;
    the absolute header only moves the deadline earlier, and only when within `max_skew` of it;
    alone, it is taken as it is. A malformed value is left out and named in `errors`: it can
    neither extend the deadline nor cancel a valid one beside it. Headers that are not ours are
    skipped whatever they hold (a name beyond ASCII too). Never raises on header names or values.
    """
    kinds = wire._kinds
    relative: float | None = None
    rel_source: str | None = None
    absolute: Deadline | None = None
    abs_source: str | None = None
    errors: list[str] = []
    bad = 0
    for name, raw in headers:
        if isinstance(name, str):
            if not name.isascii():
                continue  # ours are HTTP tokens, ASCII: this one is someone else's
            name = name.encode("ascii")
        key = name.lower()
        kind = kinds.get(key)
        if kind is None:
            continue
        header = key.decode("ascii")  # one of our names
        text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        for value in _values(text):
            try:
                if kind == "deadline":
                    at = _at(deadline_timestamp(value, header), clock, header, value)
                    if absolute is None or at < absolute:
                        absolute, abs_source = at, header
                    continue
                secs = (
                    timeout_seconds(value, header)
                    if kind == "timeout"
                    else grpc_seconds(value, header)
                )
            except HeaderError as exc:
                bad += 1
                if len(errors) < _ERRORS_KEPT:
                    errors.append(str(exc))
                continue
            if relative is None or secs < relative:
                relative, rel_source = secs, header
    if bad > len(errors):
        errors.append(f"and {bad - len(errors)} more malformed values")
    found = tuple(errors)
    if relative is None:
        return Received(absolute, abs_source, errors=found)
    rel = Deadline._after(relative, clock)  # 0 to 1e9 s, as parsed above
    if absolute is None:
        return Received(rel, rel_source, errors=found)
    off = absolute.timestamp - rel.timestamp
    if abs(off) > max_skew:
        return Received(rel, rel_source, skew=off, errors=found)
    if absolute < rel:
        return Received(absolute, abs_source, errors=found)
    return Received(rel, rel_source, errors=found)


def _at(timestamp: float, clock: Clock, header: str, value: str) -> Deadline:
    try:
        return Deadline.at(timestamp, clock=clock)
    except ValueError:  # before 2000, or over 100 years ahead
        raise HeaderError(
            f"{header}: epoch milliseconds from 2000 to 100 years ahead expected, "
            f"got {value[:40]!r}"
        ) from None


# -- granting -------------------------------------------------------------------------------------


def clamp(
    received: Deadline | None,
    *,
    max_timeout: float | None,
    default_timeout: float | None,
    clock: Clock = SYSTEM_CLOCK,
) -> Deadline | None:
    """The deadline a server grants: the one received (or `default_timeout` from now when none),
    never later than `max_timeout` from now."""
    if received is None and default_timeout is not None:
        received = Deadline.after(default_timeout, clock=clock)
    if max_timeout is None:
        return received
    return earliest(received, Deadline.after(max_timeout, clock=clock))


# -- sending ------------------------------------------------------------------------------------


def outgoing(deadline: Deadline, wire: WireFormat = WIRE) -> tuple[float, dict[str, str]]:
    """The seconds left and the headers that carry them, computed now. Milliseconds are rounded
    down: a hop never hands on more time than it has. Zero milliseconds left is `(0.0, {})`."""
    left = deadline.remaining()
    ms = math.floor(left * 1000.0)
    if ms <= 0:
        return 0.0, {}
    headers = {wire.timeout_header: str(ms)}
    if wire.deadline_header is not None:
        headers[wire.deadline_header] = str(math.floor(deadline.timestamp * 1000.0))
    return left, headers


# -- the 504 body ---------------------------------------------------------------------------------


def error_body(terminal: str, step: str | None, detail: str) -> bytes:
    """The short JSON body of a deadline answer: `{"terminal", "step", "detail"}`."""
    return json.dumps({"terminal": terminal, "step": step, "detail": detail[:300]}).encode()


def parse_error_body(content_type: str, body: bytes) -> Mapping[str, Any] | None:
    """The fields of a body made by `error_body`, or None when the body is something else."""
    if not content_type.startswith("application/json") or len(body) > BODY_MAX:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("terminal"), str):
        return None
    return data
