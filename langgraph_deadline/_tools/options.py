"""`ToolOptions`: what `deadline_tool` was told about one tool, checked once, kept as one value;
`Retries`, the group of it a user sets together (what to retry, how often, and the key that makes
a retry of a world-changing call safe)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .._core.rules import StepRule
from .._core.validate import (
    ceiling_of,
    check_flag,
    check_idle_cap,
    check_limit,
    check_viable,
    floor_of,
    show,
)
from .._graph.answers import Message
from .._retry.policy import RetryOn, retry_predicate
from .cache import StaleCache
from .hedge import Hedge
from .stale import Namespace

__all__ = ["Retries", "ToolOptions", "check_cache", "check_hedge", "check_namespace"]


@dataclasses.dataclass(frozen=True, slots=True)
class Retries:
    """How a tool retries its failed attempts, inside the same budget: on the errors `on`
    accepts (an exception type, a tuple of them, or a predicate, as in `retry(on=...)`), up to
    `attempts` calls, with no attempt or backoff started that cannot fit. A `side_effect=True`
    tool is not retried once its request may have left unless it has an `idempotency_key`: a
    function of its arguments, called once at the call's first attempt, whose key reaches the
    tool as `config["metadata"]["idempotency_key"]` on every attempt.

    `deadline_tool(fetch, cap=5.0, retries=Retries(httpx.TransportError, attempts=3))`

    Raises:
        TypeError, ValueError: `on` is not an exception type, a tuple of them or a predicate;
            `attempts` is not an int >= 1; `idempotency_key` is not callable.
    """

    on: RetryOn
    attempts: int = 3
    idempotency_key: Callable[[Mapping[str, Any]], str] | None = None

    def __post_init__(self) -> None:
        retry_predicate(self.on)  # a clear error now, not at the first failure
        attempts = self.attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {show(attempts)}")
        if self.idempotency_key is not None and not callable(self.idempotency_key):
            raise TypeError(
                "idempotency_key must be a function of the tool's arguments, got "
                f"{type(self.idempotency_key).__name__}: {show(self.idempotency_key)}"
            )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ToolOptions:
    """A tool's budget (`cap`, `min_viable`, `idle_cap`), what it does to the world
    (`read_only`, `side_effect`), its stale cache, its timeout text, its `Retries` and its
    hedging. See `deadline_tool`."""

    cap: float | StepRule | None = None
    min_viable: float | StepRule = 0.0
    read_only: bool = False
    side_effect: bool = False
    cache: StaleCache | None = None
    cache_namespace: Namespace = None
    message: Message = None
    retries: Retries | None = None
    hedge: Hedge | None = None
    idle_cap: float | StepRule | None = None

    def checked(self, tool: str) -> ToolOptions:
        """These options with times as floats, or an error naming `tool` and what is wrong.

        Raises:
            ValueError, TypeError: bad numbers, a cache on a tool that is not read-only, etc.
        """
        cap = check_limit(self.cap, "cap")
        idle_cap = check_idle_cap(self.idle_cap, "idle_cap")
        min_viable = check_viable(self.min_viable, "min_viable")
        check_flag(self.read_only, "read_only")
        check_flag(self.side_effect, "side_effect")
        most, least = ceiling_of(cap), floor_of(min_viable)
        if most is not None and least > most:
            raise ValueError(
                f"tool {tool!r}: min_viable ({least} s) is more than cap ({most} s): "
                "the tool could never run"
            )
        check_namespace(self.cache_namespace)
        if self.cache is not None and not self.read_only:
            raise ValueError(
                f"tool {tool!r}: a stale cache needs read_only=True (never serve a cached "
                "answer for a tool that changes the world)"
            )
        if self.read_only and self.side_effect:
            raise ValueError(f"tool {tool!r}: read_only and side_effect exclude each other")
        check_cache(self.cache)
        check_hedge(self.hedge, tool, read_only=self.read_only)
        message = self.message
        if message is not None and not (isinstance(message, str) or callable(message)):
            raise TypeError("message must be a format string or a function of ToolTimeout")
        if isinstance(message, str):
            _check_format(message)
        if self.retries is not None and not isinstance(self.retries, Retries):
            raise TypeError(
                f"retries must be a Retries, got {type(self.retries).__name__}: "
                f"{show(self.retries)}"
            )
        return dataclasses.replace(self, cap=cap, min_viable=min_viable, idle_cap=idle_cap)


def check_namespace(namespace: object) -> None:
    """Refuse a `cache_namespace` that is neither a string, a function of the config nor None.

    Raises:
        TypeError: naming `cache_namespace` and what it got.
    """
    if namespace is not None and not (isinstance(namespace, str) or callable(namespace)):
        raise TypeError(
            "cache_namespace must be a string, a function of the config, or None, got "
            f"{type(namespace).__name__}: {show(namespace)}"
        )


def check_cache(cache: object) -> None:
    """Refuse a `cache` that is not a `StaleCache` (None is no cache).

    Raises:
        TypeError: naming `cache` and what it got.
    """
    if cache is not None and not isinstance(cache, StaleCache):
        raise TypeError(f"cache must be a StaleCache, got {type(cache).__name__}: {show(cache)}")


def check_hedge(hedge: object, tool: str, *, read_only: bool) -> None:
    """Refuse a `hedge` that is not a `Hedge`, or one on a tool that may change the world
    (a second copy of a write is a second write).

    Raises:
        TypeError: `hedge` is not a `Hedge` (None is no hedging).
        ValueError: naming the tool, when it is not `read_only`.
    """
    if hedge is None:
        return
    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a Hedge, got {type(hedge).__name__}: {show(hedge)}")
    if not read_only:
        raise ValueError(
            f"tool {tool!r}: hedge needs read_only=True (a second copy of a call that changes "
            "the world is a second change)"
        )


def _check_format(message: str) -> None:
    """A timeout text with a placeholder it cannot fill fails now, not when a timeout fires."""
    try:
        message.format(tool="t", seconds=1.0, status="timed_out", remaining=1.0)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ValueError(
            f"message {message!r} cannot be filled: use only {{tool}}, {{seconds}}, {{status}} "
            f"and {{remaining}} ({type(exc).__name__}: {exc})"
        ) from None
