"""`Policy`: the settings of one `retry(...)`, checked once when built; `on=` as a predicate.

Every option is checked here, so `retry` refuses a bad one when it is called, not at the first
failure, and the loop that uses a `Policy` never meets a bad value.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from typing import Final, TypeAlias, cast

from .._core.records import StepKind, StepRecord
from .._core.validate import check_seconds

__all__ = ["Policy", "RetryOn", "retry_predicate"]

RetryOn: TypeAlias = (
    type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
)
"""What `retry(on=...)` accepts: an exception type, a tuple of them, or a predicate."""

_KINDS: Final = ("node", "tool", "model", "http")


def retry_predicate(on: object) -> Callable[[BaseException], bool]:
    """`on=` (an exception type, a tuple of them, or a predicate) as one predicate.

    Raises:
        TypeError: `on` is none of those.
    """
    if isinstance(on, type):
        if not issubclass(on, BaseException):
            raise TypeError(f"on must be an exception type, got the class {on.__name__}")
        exc_type = on
        return lambda exc: isinstance(exc, exc_type)
    if isinstance(on, tuple):
        if not on or not all(isinstance(t, type) and issubclass(t, BaseException) for t in on):
            raise TypeError(f"on must be a non-empty tuple of exception types, got {on!r}")
        types = on
        return lambda exc: isinstance(exc, types)
    if callable(on):
        return cast("Callable[[BaseException], bool]", on)
    raise TypeError(
        "on must be an exception type, a tuple of them, or a predicate "
        f"(BaseException) -> bool; got {type(on).__name__}: {on!r}"
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How one retried function retries: what is retryable, how often, how long it backs off.

    Numbers are normalised to floats so the backoff arithmetic never meets a huge int.

    Raises:
        TypeError, ValueError: an invalid option (see `retry`).
    """

    accepts: Callable[[BaseException], bool]
    attempts: int = 3
    initial: float = 0.1
    multiplier: float = 2.0
    max_backoff: float = 2.0
    jitter: float = 0.1
    min_attempt: float = 0.0
    kind: StepKind = "tool"
    on_attempt: Callable[[StepRecord], None] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        checked = {
            "attempts": _check_attempts(self.attempts),
            "initial": check_seconds(self.initial, "initial"),
            "multiplier": _check_multiplier(self.multiplier),
            "max_backoff": check_seconds(self.max_backoff, "max_backoff"),
            "jitter": check_seconds(self.jitter, "jitter"),
            "min_attempt": check_seconds(self.min_attempt, "min_attempt"),
            "kind": _check_kind(self.kind),
            "on_attempt": _check_hook(self.on_attempt),
            "name": _check_name(self.name),
        }
        for field, value in checked.items():  # a frozen value: set once, here, before any use
            object.__setattr__(self, field, value)

    def backoff(self, failed_attempt: int) -> float:
        """Exponential backoff with additive jitter, like stamina: capped at `max_backoff`."""
        try:
            grown = self.initial * self.multiplier ** (failed_attempt - 1) if self.initial else 0.0
        except OverflowError:
            grown = math.inf
        return min(self.max_backoff, grown + random.uniform(0.0, self.jitter))


def _check_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"attempts must be an int >= 1, got {type(value).__name__}: {value!r}")
    if value < 1:
        raise ValueError(f"attempts must be >= 1 (1 means no retry), got {value!r}")
    return value


def _check_multiplier(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"multiplier must be a number >= 1, got {type(value).__name__}: {value!r}")
    if not math.isfinite(value) or value < 1.0:
        raise ValueError(f"multiplier must be a finite number >= 1, got {value!r}")
    return float(value)


def _check_kind(value: object) -> StepKind:
    if value not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(_KINDS)}; got {value!r}")
    return value


def _check_hook(value: object) -> Callable[[StepRecord], None] | None:
    if value is not None and not callable(value):
        raise TypeError(f"on_attempt must be a callable or None, got {type(value).__name__}")
    return cast("Callable[[StepRecord], None] | None", value)


def _check_name(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise TypeError(f"name must be a non-empty str or None, got {value!r}")
    return value
