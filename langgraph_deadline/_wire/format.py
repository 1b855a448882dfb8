"""The deadline on the wire: header names, parsing, formatting and the skew check.

- `X-Request-Timeout-Ms`: the time left, in whole milliseconds, computed when the request is
  sent (immune to clock skew). On receipt it rules.
- `X-Request-Deadline`: the absolute deadline, in epoch milliseconds. Only used when it agrees
  with the relative header within `max_skew`; then the earlier of the two wins.
- `grpc-timeout`: understood on receipt: 1 to 8 digits and a unit (`H M S m u n`).

A value that is not what the format says is malformed: `read` leaves it out (and names it), so it
can neither extend the deadline nor void a valid one beside it. An absurdly long one is kept and
left for the receiver's maximum to clamp. `docs/howto/across-services.md` is the reference.

Reading lives in the core (`_core/headers.py`, re-exported here): a served graph reads the same
headers from its config.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

from .._core.clock import SYSTEM_CLOCK, Clock
from .._core.deadline import Deadline, earliest
from .._core.headers import (
    WIRE,
    HeaderError,
    Received,
    WireFormat,
    deadline_timestamp,
    grpc_seconds,
    read,
    timeout_seconds,
)

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
