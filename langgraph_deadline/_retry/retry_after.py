"""A server's `Retry-After`, read from the error that carries its 429/503 response."""

from __future__ import annotations

import datetime as _dt
import email.utils
import math
import time
from typing import Final

__all__ = ["parse_retry_after", "retry_after"]

_RETRY_AFTER_STATUS: Final = frozenset({429, 503})


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (`Retry-After`, seconds or HTTP-date) on a 429/503
    carried by the error (`httpx.HTTPStatusError` and lookalikes); None when absent or malformed.
    """
    response = getattr(exc, "response", None)
    if getattr(response, "status_code", None) not in _RETRY_AFTER_STATUS:
        return None
    headers = getattr(response, "headers", None)
    get = getattr(headers, "get", None)
    if not callable(get):
        return None
    value = get("retry-after") or get("Retry-After")
    return parse_retry_after(value) if isinstance(value, str) else None


def parse_retry_after(value: str) -> float | None:
    """A `Retry-After` header as seconds from now (>= 0); None when malformed.

    Accepts delay-seconds (`"120"`, and `"0.3"`) and an HTTP-date; a date in the past is 0.
    """
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0.0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return max(0.0, when.timestamp() - time.time())
