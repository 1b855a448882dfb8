"""Argument checks shared by every public entry point: one wording for one mistake."""

from __future__ import annotations

import math

__all__ = ["check_cap", "check_seconds"]


def check_seconds(value: object, name: str) -> float:
    """Return `value` as a float of seconds, or raise naming `name`.

    Raises:
        TypeError: not an int or float (bool, str and None included).
        ValueError: negative, NaN or infinite.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number of seconds, got {type(value).__name__}: {value!r}"
        )
    seconds = float(value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if seconds < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return seconds


def check_cap(value: object, name: str) -> float | None:
    """Like `check_seconds`, but `None` (no cap) is allowed and kept."""
    if value is None:
        return None
    return check_seconds(value, name)
