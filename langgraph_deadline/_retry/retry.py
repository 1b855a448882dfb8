"""`retry`: bounded retries that draw from the run's one deadline, and tenacity adaptors.

Nothing refreshes the budget: a retry starts only if its backoff and the least time an attempt
needs (`min_attempt`) fit in what is left of the deadline. A server's `Retry-After` is honoured
only when it fits, never shortened. Otherwise the call ends at once with `DeadlineExceeded`,
chained from the last error, instead of sleeping into a deadline it cannot meet.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import email.utils
import functools
import inspect
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, ParamSpec, Protocol, TypeAlias, TypeVar, cast, overload

import anyio
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.errors import GraphBubbleUp

from .._core.context import current_deadline, current_scopes
from .._core.deadline import Deadline, earliest
from .._core.errors import DeadlineExceeded
from .._core.plan import Plan
from .._core.record import record_child
from .._core.records import StepKind, StepRecord, StepStatus
from .._core.tracker import RunTracker, run_from_config
from .._core.validate import check_seconds

__all__ = ["RetryOn", "retry", "stop_at_deadline", "wait_within_deadline"]

P = ParamSpec("P")
R = TypeVar("R")

RetryOn: TypeAlias = (
    type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
)
"""What `retry(on=...)` accepts: an exception type, a tuple of them, or a predicate."""

_RETRY_AFTER_STATUS: Final = frozenset({429, 503})
_KINDS: Final = ("node", "tool", "model", "http")

# Indirections so tests can drive the loop on a manual clock; never patched in production.
_sleep: Callable[[float], None] = time.sleep
_asleep: Callable[[float], Awaitable[None]] = anyio.sleep


# -- the policy -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Policy:
    accepts: Callable[[BaseException], bool]
    attempts: int
    initial: float
    multiplier: float
    max_backoff: float
    jitter: float
    min_attempt: float
    kind: StepKind
    on_attempt: Callable[[StepRecord], None] | None

    def backoff(self, failed_attempt: int) -> float:
        """Exponential backoff with additive jitter, like stamina: capped at `max_backoff`."""
        try:
            grown = self.initial * self.multiplier ** (failed_attempt - 1) if self.initial else 0.0
        except OverflowError:
            grown = math.inf
        return min(self.max_backoff, grown + random.uniform(0.0, self.jitter))


class _Call:
    """One call of a retried function: its attempts, their records, the decisions between them."""

    __slots__ = ("last", "name", "policy", "run", "sync")

    def __init__(self, policy: _Policy, name: str, *, sync: bool) -> None:
        self.policy = policy
        self.name = name
        self.sync = sync
        self.run = _current_run()
        self.last: BaseException | None = None

    def deadline(self) -> Deadline | None:
        return _deadline_for(self.run)

    def plan(self, attempt: int, d: Deadline | None) -> Plan:
        left = None if d is None else d.remaining()
        return Plan(
            name=self.name,
            kind=self.policy.kind,
            attempt=attempt,
            deadline=d,
            remaining=left,
            cap=None,
            budget=left,
            min_viable=self.policy.min_attempt,
            started=time.monotonic(),
            sync=self.sync,
        )

    def record(self, plan: Plan, status: StepStatus, source: str | None = None) -> None:
        rec = plan.record(status, cancel_source=source)
        record_child(rec, self.run)
        if self.policy.on_attempt is not None:
            self.policy.on_attempt(rec)

    def begin(self, attempt: int) -> Plan:
        """Plan an attempt; refuse it (`DeadlineExceeded`) when the deadline leaves no room."""
        d = self.deadline()
        plan = self.plan(attempt, d)
        if d is None:
            return plan
        left = d.remaining()
        if attempt == 1 and (left <= 0.0 or left < self.policy.min_attempt):
            self.record(plan, StepStatus.SKIPPED)
            need = f"min_attempt {self.policy.min_attempt:g}s" if left > 0.0 else "any time"
            raise self.exceeded(d, f"not started: {left:.3f}s left, less than {need}")
        if left <= 0.0:  # the backoff slept past a deadline it fitted in (clock overshoot)
            self.record(plan, StepStatus.SKIPPED)
            why = f"the deadline passed during the backoff before attempt {attempt}"
            raise self.exceeded(d, why) from self.last
        return plan

    def completed(self, plan: Plan) -> None:
        self.record(plan, StepStatus.COMPLETED)

    def failed(self, plan: Plan, exc: BaseException) -> float | None:
        """Record a failed attempt and decide: the seconds to sleep before the next, or None to
        re-raise `exc`. Raises `DeadlineExceeded` when the next attempt cannot fit."""
        d = plan.deadline
        expired = d is not None and d.expired
        if isinstance(exc, GraphBubbleUp):  # an interrupt on its way to LangGraph: not a failure
            return None
        if isinstance(exc, DeadlineExceeded) or (isinstance(exc, Exception) and expired):
            self.record(plan, StepStatus.TIMED_OUT, "run_deadline" if expired else None)
        elif isinstance(exc, Exception):
            self.record(plan, StepStatus.FAILED)
        elif expired:  # a cancellation (or KeyboardInterrupt...) once the deadline passed
            self.record(plan, StepStatus.TIMED_OUT, "run_deadline")
        else:
            self.record(plan, StepStatus.CANCELLED, "caller")
        if plan.attempt >= self.policy.attempts or not _retryable(exc, self.policy.accepts):
            return None
        self.last = exc
        header = _retry_after(exc)
        delay = self.policy.backoff(plan.attempt) if header is None else header
        d = self.deadline()
        if d is not None:
            left = d.remaining()
            need = delay + self.policy.min_attempt
            if not need < left:
                self.record(self.plan(plan.attempt + 1, d), StepStatus.SKIPPED)
                what = "the server's Retry-After" if header is not None else "backoff"
                extra = (
                    f" + min_attempt {self.policy.min_attempt:g}s"
                    if self.policy.min_attempt
                    else ""
                )
                raise self.exceeded(
                    d,
                    f"attempt {plan.attempt} failed ({type(exc).__name__}); attempt "
                    f"{plan.attempt + 1} not started: {what} of {delay:.3f}s{extra} does not fit "
                    f"in the {left:.3f}s left",
                ) from exc
        if header is not None and header > self.policy.max_backoff:
            return None  # the server asks for a longer pause than this policy ever takes
        return delay

    def exceeded(self, d: Deadline, why: str) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"deadline exceeded in {self.name}: {why}",
            deadline=d,
            step=self.name,
            scopes=current_scopes(),
        )


def _retryable(exc: BaseException, accepts: Callable[[BaseException], bool]) -> bool:
    """Only plain errors `on` accepts: never a deadline, a cancellation or an interrupt."""
    if not isinstance(exc, Exception) or isinstance(exc, DeadlineExceeded | GraphBubbleUp):
        return False
    return bool(accepts(exc))


def _current_run() -> RunTracker | None:
    return run_from_config(var_child_runnable_config.get())


def _deadline_for(run: RunTracker | None) -> Deadline | None:
    return earliest(current_deadline(), run.deadline if run is not None else None)


def _retry_after(exc: BaseException) -> float | None:
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
    return _parse_retry_after(value) if isinstance(value, str) else None


def _parse_retry_after(value: str) -> float | None:
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


# -- the decorator --------------------------------------------------------------------------------


@overload
def retry(
    fn: Callable[P, R],
    *,
    on: RetryOn,
    attempts: int = 3,
    initial: float = 0.1,
    multiplier: float = 2.0,
    max_backoff: float = 2.0,
    jitter: float = 0.1,
    min_attempt: float = 0.0,
    name: str | None = None,
    kind: StepKind = "tool",
    on_attempt: Callable[[StepRecord], None] | None = None,
) -> Callable[P, R]: ...


@overload
def retry(
    fn: None = None,
    *,
    on: RetryOn,
    attempts: int = 3,
    initial: float = 0.1,
    multiplier: float = 2.0,
    max_backoff: float = 2.0,
    jitter: float = 0.1,
    min_attempt: float = 0.0,
    name: str | None = None,
    kind: StepKind = "tool",
    on_attempt: Callable[[StepRecord], None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def retry(
    fn: Callable[P, R] | None = None,
    *,
    on: RetryOn,
    attempts: int = 3,
    initial: float = 0.1,
    multiplier: float = 2.0,
    max_backoff: float = 2.0,
    jitter: float = 0.1,
    min_attempt: float = 0.0,
    name: str | None = None,
    kind: StepKind = "tool",
    on_attempt: Callable[[StepRecord], None] | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Retry a sync or async callable on the errors `on` accepts, within the deadline in context.

    Up to `attempts` calls. Between two, it sleeps `min(max_backoff, initial * multiplier**(n-1)
    + uniform(0, jitter))`, or the server's `Retry-After` when the error carries a 429/503 httpx
    response (a `Retry-After` above `max_backoff` is not retried). A retry starts only if its
    sleep plus `min_attempt` fits in what is left of the deadline; otherwise the call ends at
    once with `DeadlineExceeded`. With no deadline in force these are plain bounded retries.
    `DeadlineExceeded`, cancellations and LangGraph interrupts are never retried; after the last
    attempt the last error is raised unchanged. Async sleeps are cancellable.

    Each attempt (and a retry refused for lack of time, as `skipped`) is recorded as a
    `StepRecord` of `kind`: in the run's trace inside a `with_deadlines` graph, and passed to
    `on_attempt` when given.

    Use as `@retry(on=httpx.TransportError)` or `retry(fetch, on=...)`.

    Raises:
        TypeError, ValueError: invalid options (raised when `retry` is called, not later).
        DeadlineExceeded: an attempt or its backoff does not fit in what is left; chained from
            the last error; `.step` is `name`.

    >>> @retry(on=ConnectionError, attempts=2, initial=0.0, jitter=0.0)
    ... def ping() -> str:
    ...     return "pong"
    >>> ping()
    'pong'
    """
    policy = _Policy(
        accepts=_accepts(on),
        attempts=_check_attempts(attempts),
        initial=check_seconds(initial, "initial"),
        multiplier=_check_multiplier(multiplier),
        max_backoff=check_seconds(max_backoff, "max_backoff"),
        jitter=check_seconds(jitter, "jitter"),
        min_attempt=check_seconds(min_attempt, "min_attempt"),
        kind=_check_kind(kind),
        on_attempt=_check_hook(on_attempt),
    )
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"name must be a non-empty str or None, got {name!r}")
    if fn is None:
        return lambda f: _wrap(f, policy, name)
    return _wrap(fn, policy, name)


def _wrap(fn: Callable[P, R], policy: _Policy, name: str | None) -> Callable[P, R]:
    if not callable(fn):
        raise TypeError(f"retry() needs a function to wrap, got {type(fn).__name__}: {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"retry() cannot wrap the generator function {fn.__name__}: a failure after the "
            "first item cannot be retried; retry the call that produces the items instead"
        )
    step = name or getattr(fn, "__name__", None) or type(fn).__name__

    if _is_async(fn):
        afn = cast("Callable[P, Awaitable[Any]]", fn)

        @functools.wraps(fn)
        async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            call = _Call(policy, step, sync=False)
            attempt = 1
            while True:
                plan = call.begin(attempt)
                try:
                    value = await afn(*args, **kwargs)
                except BaseException as exc:
                    delay = call.failed(plan, exc)
                    if delay is None:
                        raise
                else:
                    call.completed(plan)
                    return value
                await _asleep(delay)
                attempt += 1

        return cast("Callable[P, R]", async_wrapper)

    @functools.wraps(fn)
    def sync_wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        call = _Call(policy, step, sync=True)
        attempt = 1
        while True:
            plan = call.begin(attempt)
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:
                delay = call.failed(plan, exc)
                if delay is None:
                    raise
            else:
                call.completed(plan)
                return value
            _sleep(delay)
            attempt += 1

    return sync_wrapper


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


# -- argument checks ------------------------------------------------------------------------------


def _accepts(on: object) -> Callable[[BaseException], bool]:
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


# -- tenacity adaptors (duck-typed: tenacity is imported only to combine stops) -------------------


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
        d = _deadline_for(_current_run())
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
        d = _deadline_for(_current_run())
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
