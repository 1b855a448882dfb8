"""`retry`: bounded retries that draw from the run's one deadline.

Nothing refreshes the budget: a retry starts only if its backoff and the least time an attempt
needs (`min_attempt`) fit in what is left of the deadline. A server's `Retry-After` is honoured
only when it fits, never shortened. Otherwise the call ends at once with `DeadlineExceeded`,
chained from the last error, instead of sleeping into a deadline it cannot meet.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, Required, TypedDict, TypeVar, Unpack, cast, overload

import anyio

from .._core.records import StepKind, StepRecord
from .call import Call
from .policy import Policy, RetryOn, retry_predicate

__all__ = ["RetryOn", "retry"]

P = ParamSpec("P")
R = TypeVar("R")

# Indirections so tests can drive the loop on a manual clock; never patched in production.
_sleep: Callable[[float], None] = time.sleep
_asleep: Callable[[float], Awaitable[None]] = anyio.sleep


class _Options(TypedDict, total=False):
    """`retry`'s keyword options, for its overloads (the function itself lists them, with
    their defaults)."""

    on: Required[RetryOn]
    attempts: int
    initial: float
    multiplier: float
    max_backoff: float
    jitter: float
    min_attempt: float
    name: str | None
    kind: StepKind
    on_attempt: Callable[[StepRecord], None] | None


@overload
def retry(
    fn: Callable[P, R],
    **options: Unpack[_Options],
) -> Callable[P, R]: ...


@overload
def retry(
    fn: None = None,
    **options: Unpack[_Options],
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
    policy = Policy(
        accepts=retry_predicate(on),
        attempts=attempts,
        initial=initial,
        multiplier=multiplier,
        max_backoff=max_backoff,
        jitter=jitter,
        min_attempt=min_attempt,
        kind=kind,
        on_attempt=on_attempt,
        name=name,
    )
    if fn is None:
        return lambda f: _wrap(f, policy)
    return _wrap(fn, policy)


def _wrap(fn: Callable[P, R], policy: Policy) -> Callable[P, R]:
    if not callable(fn):
        raise TypeError(f"retry() needs a function to wrap, got {type(fn).__name__}: {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"retry() cannot wrap the generator function {fn.__name__}: a failure after the "
            "first item cannot be retried; retry the call that produces the items instead"
        )
    step = policy.name or getattr(fn, "__name__", None) or type(fn).__name__

    if _is_async(fn):
        afn = cast("Callable[P, Awaitable[Any]]", fn)

        @functools.wraps(fn)
        async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            call = Call(policy, step, sync=False)
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
        call = Call(policy, step, sync=True)
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
