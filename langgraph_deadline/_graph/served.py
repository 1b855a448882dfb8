"""What LangGraph Server tells a run about the request behind it, in the run's config.

- **The deadline headers.** With `"http": {"configurable_headers": {"includes": ["x-request-*"]}}`
  in `langgraph.json`, the server puts the request's headers, lower-cased and as strings, in
  `config["configurable"]`. A run honours the deadline they carry (the wire format's parser,
  `_core/headers.py`): never later than its own `timeout`; a malformed value is ignored, logged.
- **When the request arrived.** The server records it (`__request_start_time_ms__`, epoch ms, a
  key clients cannot set) and runs the request when a worker picks it up, up to seconds later.
  With `queue_time` set, the run's `timeout` and a relative header count from the arrival: the
  time the run waited is taken from its budget, up to `queue_time` seconds (what a wrong clock
  can cost at worst). A delay the caller asked for (`after_seconds`) is not queue time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Final

from .._core.deadline import Deadline, earliest
from .._core.headers import WIRE, read
from .inputs import ceiling

__all__ = ["ARRIVAL_KEY", "DELAY_KEY", "queued_for", "request_limit"]

log = logging.getLogger("langgraph_deadline")

ARRIVAL_KEY: Final = "__request_start_time_ms__"
DELAY_KEY: Final = "__after_seconds__"
"""LangGraph Server's keys in a run's `configurable`: when the request arrived (epoch ms), and
the delay the caller asked for before the run starts (s)."""

_NAMES: Final = tuple(
    n.lower() for n in (WIRE.timeout_header, WIRE.deadline_header, WIRE.grpc_timeout_header) if n
)
_ABSOLUTE: Final = (WIRE.deadline_header or "").lower()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def queued_for(configurable: Mapping[str, Any], queue_time: float | None) -> float:
    """Seconds the run waited between the request's arrival and now (the caller's own delay
    left out), at most `queue_time`; 0 when `queue_time` is None or the server said nothing."""
    if queue_time is None:
        return 0.0
    arrived = _number(configurable.get(ARRIVAL_KEY))
    if arrived is None:
        return 0.0
    delay = _number(configurable.get(DELAY_KEY)) or 0.0
    waited = time.time() - arrived / 1000.0 - max(delay, 0.0)
    if waited > queue_time:
        log.warning(
            "the run waited %.3f s since its request arrived, more than queue_time=%s: "
            "%s s of it counted (a clock off, or a long queue)",
            waited,
            queue_time,
            queue_time,
        )
    return min(max(waited, 0.0), queue_time)


def _header_deadline(configurable: Mapping[str, Any], queued: float) -> Deadline | None:
    pairs = [(n, configurable[n]) for n in _NAMES if n in configurable]
    if not pairs:
        return None
    headers = [(n, v) for n, v in pairs if isinstance(v, str)]
    received = read(headers)
    errors = [*received.errors, *(f"{n}: not a string" for n, v in pairs if not isinstance(v, str))]
    if errors:
        log.warning("malformed deadline headers in the run's config ignored: %s", "; ".join(errors))
    d = received.deadline
    if d is None or not queued or received.source == _ABSOLUTE:
        return d
    return d._moved(-queued)  # a relative value counts from the request's arrival


def request_limit(
    configurable: Mapping[str, Any], timeout: float | None, queue_time: float | None
) -> Deadline | None:
    """The latest deadline a run started now may have: `timeout` (from the request's arrival,
    with `queue_time`), the deadline in context, and the deadline headers in `configurable`."""
    queued = queued_for(configurable, queue_time)
    return earliest(ceiling(timeout, queued=queued), _header_deadline(configurable, queued))
