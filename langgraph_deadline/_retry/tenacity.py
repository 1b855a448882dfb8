"""Tenacity adaptors: `stop_at_deadline` and `wait_within_deadline` bring the deadline in context
to a tenacity loop. Duck-typed: tenacity is imported only to combine stops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from .._core.context import current_scopes
from .._core.errors import DeadlineExceeded
from .._core.validate import check_seconds
from .call import current_run, deadline_for

__all__ = ["stop_at_deadline", "wait_within_deadline"]


class _RetryState(Protocol):
    """What the adaptors read of tenacity's `RetryCallState`."""

    @property
    def upcoming_sleep(self) -> float: ...

    @property
    def outcome(self) -> Any: ...


def _failure(retry_state: _RetryState) -> BaseException | None:
    outcome = retry_state.outcome
    if outcome is None or not outcome.failed:
        return None
    exc = outcome.exception()
    return exc if isinstance(exc, BaseException) else None


class stop_at_deadline:
    """A tenacity `stop`: stop when the next sleep plus `min_attempt` does not fit in what is
    left of the deadline in context, when the deadline has passed, or when the last attempt
    raised `DeadlineExceeded`. No deadline in force: never stops (combine it with another stop).

    Tenacity computes the wait before it asks the stop, so the sleep it reads is the real one.
    Tenacity then ends as it always does: `RetryError`, or the last error with `reraise=True`.

    ```python
    tenacity.Retrying(stop=stop_at_deadline() | tenacity.stop_after_attempt(5), reraise=True)
    ```
    """

    __slots__ = ("min_attempt",)

    def __init__(self, *, min_attempt: float = 0.0) -> None:
        self.min_attempt = check_seconds(min_attempt, "min_attempt")

    def __call__(self, retry_state: _RetryState) -> bool:
        if isinstance(_failure(retry_state), DeadlineExceeded):
            return True
        d = deadline_for(current_run())
        if d is None:
            return False
        return not float(retry_state.upcoming_sleep) + self.min_attempt < d.remaining()

    def __or__(self, other: Any) -> Any:
        from tenacity.stop import stop_any

        return stop_any(cast(Any, self), other)

    def __ror__(self, other: Any) -> Any:
        from tenacity.stop import stop_any

        return stop_any(other, cast(Any, self))

    def __and__(self, other: Any) -> Any:
        from tenacity.stop import stop_all

        return stop_all(cast(Any, self), other)

    def __rand__(self, other: Any) -> Any:
        from tenacity.stop import stop_all

        return stop_all(other, cast(Any, self))

    def __repr__(self) -> str:
        return f"stop_at_deadline(min_attempt={self.min_attempt!r})"


class wait_within_deadline:
    """Wrap a tenacity `wait` so it never sleeps past the deadline in context.

    Returns the wrapped wait unchanged when it plus `min_attempt` fits in what is left; never
    shortens it (a shortened pause would hammer a server that asked for room). When it does not
    fit, raises `DeadlineExceeded` (chained from the last error), which ends the tenacity call:
    the same end as `retry`. Use `stop_at_deadline` instead to keep tenacity's own ending.

    Raises:
        DeadlineExceeded: the next sleep and attempt do not fit.
    """

    __slots__ = ("min_attempt", "name", "wait")

    def __init__(
        self,
        wait: Callable[[Any], float],
        *,
        min_attempt: float = 0.0,
        name: str | None = None,
    ) -> None:
        if not callable(wait):
            raise TypeError(f"wait must be a tenacity wait (a callable), got {wait!r}")
        self.wait = wait
        self.min_attempt = check_seconds(min_attempt, "min_attempt")
        self.name = name

    def __call__(self, retry_state: _RetryState) -> float:
        seconds = float(self.wait(retry_state))
        d = deadline_for(current_run())
        if d is None:
            return seconds
        left = d.remaining()
        if seconds + self.min_attempt < left:
            return seconds
        step = self.name or _fn_name(retry_state)
        extra = f" + min_attempt {self.min_attempt:g}s" if self.min_attempt else ""
        where = f" in {step}" if step else ""
        raise DeadlineExceeded(
            f"deadline exceeded{where}: next attempt not started: wait of {seconds:.3f}s{extra} "
            f"does not fit in the {left:.3f}s left",
            deadline=d,
            step=step,
            scopes=current_scopes(),
        ) from _failure(retry_state)

    def __repr__(self) -> str:
        return f"wait_within_deadline({self.wait!r}, min_attempt={self.min_attempt!r})"


def _fn_name(retry_state: object) -> str | None:
    fn = getattr(retry_state, "fn", None)  # None in tenacity's `for attempt in ...` form
    if fn is None:
        return None
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__
