"""Argument checks shared by every public entry point: one wording for one mistake.

A duration is a finite int or float of seconds, at least 0 and at most `MAX_SECONDS` (100
years): longer is a unit mistake (milliseconds for seconds) or a way of saying "no limit",
which is spelled `None` where a limit is optional. The maximum also keeps every duration
within what `threading` and `asyncio` accept as a timeout (about 9.2e9 s), so a value that
passes here never fails later, when a step runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from .rules import StepRule

__all__ = [
    "check_fits",
    "check_mapping",
    "MAX_EPOCH",
    "MAX_SECONDS",
    "MIN_EPOCH",
    "check_cap",
    "check_caps_fit",
    "check_limit",
    "check_step_cap",
    "check_viable",
    "ceiling_of",
    "floor_of",
    "check_flag",
    "check_number",
    "check_seconds",
    "check_timestamp",
    "show",
    "too_early",
]

MAX_SECONDS: Final = 3_155_760_000.0  # 100 years of 365.25 days
MAX_EPOCH: Final = 32_503_680_000.0
"""Year 3000 in epoch seconds: a later instant is a unit mistake (milliseconds for seconds)."""
MIN_EPOCH: Final = 946_684_800.0
"""2000-01-01 UTC in epoch seconds: an earlier instant is a duration passed as a timestamp
(`{"deadline": 5}`, `Deadline.at(5)`), not a moment anyone means."""


def show(value: object) -> str:
    """`repr(value)`, short, and never failing (a 5000-digit int cannot be printed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an int of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def check_number(value: object, name: str, what: str = "a number of seconds") -> float:
    """`value` as a finite float, or raise naming `name`: a bool, a NaN, an infinity, or an int
    too large for a float is refused.

    Raises:
        TypeError: not an int or float (bool, str and None included).
        ValueError: NaN, infinite, or beyond any float.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}: {show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got {show(value)}") from None
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"{name} must be a finite number, got {show(value)}")
    return number


def check_seconds(value: object, name: str) -> float:
    """Return `value` as a float of seconds, or raise naming `name`.

    Raises:
        TypeError: not an int or float (bool, str and None included).
        ValueError: negative, NaN, infinite, or over `MAX_SECONDS` (100 years).
    """
    seconds = check_number(value, name)
    if seconds < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {show(value)}")
    if seconds > MAX_SECONDS:
        raise ValueError(
            f"{name} must be at most {MAX_SECONDS:.0f} seconds (100 years), got {show(value)}"
            " (milliseconds passed as seconds? for no limit, pass None where it is allowed)"
        )
    return seconds


def too_early(value: object, name: str) -> ValueError:
    """The error for an instant before 2000 (`MIN_EPOCH`): a duration passed as a timestamp."""
    return ValueError(
        f"{name} must be epoch seconds after 2000-01-01, got {show(value)}: a duration? for a "
        f"deadline that many seconds from now, use Deadline.after({show(value)})"
    )


def check_timestamp(value: object, name: str) -> float:
    """`value` as epoch seconds: a finite number between 2000-01-01 and year 3000 (an instant
    is not a duration: no 100-year maximum from now; `Deadline.at` refuses the ones no one
    means).

    Raises:
        TypeError: not an int or float (bool, str and None included).
        ValueError: NaN, infinite, before 2000 (a duration passed by mistake: the message
            points to `Deadline.after`), or after year 3000 (milliseconds passed as seconds).
    """
    seconds = check_number(value, name, "epoch seconds")
    if seconds < MIN_EPOCH:
        raise too_early(value, name)
    if seconds > MAX_EPOCH:
        raise ValueError(
            f"{name} must be epoch seconds before year 3000, got {show(value)} "
            "(milliseconds passed as seconds?)"
        )
    return seconds


def check_cap(value: object, name: str) -> float | None:
    """Like `check_seconds`, but `None` (no cap) is allowed and kept."""
    if value is None:
        return None
    return check_seconds(value, name)


def check_step_cap(value: object, name: str) -> float | None:
    """A step's cap: like `check_cap`, but 0 is refused: a step capped at 0 s never starts, and
    every call of it would be skipped for want of a budget no run ever had.

    Raises:
        TypeError, ValueError: as `check_seconds`; or 0.
    """
    cap = check_cap(value, name)
    if cap == 0.0:
        raise ValueError(
            f"{name} must be more than 0 seconds, got {show(value)}: a step capped at 0 s "
            "never starts (for no cap, pass None)"
        )
    return cap


def check_limit(value: object, name: str) -> float | StepRule | None:
    """A cap that may be learned: a `StepRule` (`learned(book, ...)`) is kept, anything else is
    `check_step_cap`ped."""
    if isinstance(value, StepRule):
        return value
    return check_step_cap(value, name)


def check_idle_cap(value: object, name: str) -> float | StepRule | None:
    """An idle cap (the longest gap with no progress), that may be learned: a `StepRule` is
    kept, None is none, anything else a number of seconds > 0.

    Raises:
        TypeError, ValueError: as `check_seconds` (negative, NaN, infinite); or 0, naming `name`.
    """
    if value is None or isinstance(value, StepRule):
        return value
    seconds = check_seconds(value, name)
    if seconds == 0.0:
        raise ValueError(
            f"{name} must be more than 0 seconds, got {show(value)}: every step would stall at "
            "once (for no idle cap, pass None)"
        )
    return seconds


def check_viable(value: object, name: str) -> float | StepRule:
    """A min_viable that may be learned: a `StepRule` is kept, anything else `check_seconds`."""
    if isinstance(value, StepRule):
        return value
    return check_seconds(value, name)


def ceiling_of(value: float | StepRule | None) -> float | None:
    """The cap a setting stands for before anything is learned (a rule's is the user's)."""
    return value.ceiling if isinstance(value, StepRule) else value


def floor_of(value: float | StepRule) -> float:
    """The min_viable a setting stands for before anything is learned (the user's)."""
    return value.floor if isinstance(value, StepRule) else value


def check_flag(value: object, name: str) -> bool:
    """`value` if it is a bool, else raise: a string such as "no" must not read as true.

    Raises:
        TypeError: not a bool.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}: {show(value)}")
    return value


def check_mapping(value: object, name: str) -> Mapping[Any, Any]:
    """`value` if it is a mapping (`None` is an empty one), else raise naming `name`.

    Raises:
        TypeError: not a mapping.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a mapping of names to seconds, got {type(value).__name__}: "
            f"{show(value)}"
        )
    return value


def check_fits(
    timeout: float | None,
    *,
    reserve: float,
    needs: Mapping[str, float],
    name: str = "timeout",
    reserve_name: str = "reserve",
) -> None:
    """Refuse settings under which every run would fail at once: a `reserve` that takes the
    whole `timeout`, or a step whose need (as the user wrote it) and the `reserve` kept after it
    are more than the `timeout`. `name` and `reserve_name` are the arguments as the user wrote
    them (`max_timeout`, `cap`), and so are the keys of `needs`.

    Raises:
        ValueError: naming each setting involved, with the value the user gave it.
    """
    if timeout is None:
        return
    if reserve >= timeout > 0:
        raise ValueError(
            f"{reserve_name} ({reserve:g} s) must be less than {name} ({timeout:g} s): "
            "no step could run"
        )
    for need_name, need in needs.items():
        if need + reserve > timeout:
            both = f" plus {reserve_name} ({reserve:g} s)" if reserve else ""
            raise ValueError(
                f"{need_name} ({need:g} s){both} is more than {name} ({timeout:g} s): "
                "it could never start"
            )


def check_caps_fit(
    caps: Mapping[str, float | StepRule | None],
    min_viable: Mapping[str, float | StepRule],
    *,
    default_cap: float | None,
    own_cap: str | None = None,
) -> None:
    """Refuse a step whose `min_viable` is above its cap (its own in `caps`, else `default_cap`,
    which does not apply to `own_cap`, a step with no default): it could never start.

    Raises:
        ValueError: naming both settings, as the user wrote them.
    """
    for step, need in min_viable.items():
        if step in caps:
            cap, label = caps[step], f"caps[{step!r}]"
        elif step != own_cap:
            cap, label = default_cap, "default_cap"
        else:
            continue
        check_fits(
            ceiling_of(cap),
            reserve=0.0,
            needs={f"min_viable[{step!r}]": floor_of(need)},
            name=label,
        )
