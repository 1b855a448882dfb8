"""When a tool call is retried, and what its record says about side effects: a write is not
retried once its request may have left, unless repeating it is safe (an idempotency key)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import httpx
from langchain_core.runnables import RunnableConfig

from .._core.errors import DeadlineExceeded
from .._core.records import StepStatus
from .._core.step import StepResult
from .._retry.policy import RetryOn, retry_predicate
from .._retry.retry import retry
from .hedge import Copies

__all__ = [
    "Tries",
    "account",
    "call_config",
    "hedged",
    "is_timeout",
    "is_transport",
    "retrying",
]

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.TransportError, ConnectionError)
_NOT_SENT: tuple[type[BaseException], ...] = (httpx.ConnectError, httpx.ConnectTimeout)
"""Errors that prove the request never left: repeating it cannot repeat a side effect."""


@dataclasses.dataclass(slots=True)
class Tries:
    """How many attempts of one call started (counted by the attempts themselves)."""

    started: int = 0


def call_config(cfg: RunnableConfig, key: str | None) -> RunnableConfig:
    """The config the tool runs with: its idempotency `key` in `metadata`, when it has one."""
    if key is None:
        return cfg
    return {**cfg, "metadata": {**(cfg.get("metadata") or {}), "idempotency_key": key}}


def retrying(
    once: Callable[[], Any],
    *,
    on: RetryOn,
    attempts: int,
    side_effect: bool,
    idempotent: bool,
    name: str,
) -> Callable[[], Any]:
    """`once` retried within the tool's budget. A tool with side effects is retried only when
    repeating it is safe: it is `idempotent` (has a key), or the request never left (a connect
    error)."""
    accepts = retry_predicate(on)

    def retryable(exc: BaseException) -> bool:
        if not accepts(exc):
            return False
        if side_effect and not idempotent:
            return isinstance(exc, _NOT_SENT)
        return True

    return retry(once, on=retryable, attempts=attempts, name=name)


def account(result: StepResult[Any], tries: Tries, *, side_effect: bool) -> StepResult[Any]:
    """The call's record says how many attempts ran and whether a side effect may have started
    (conservatively: a write tool's body ran, and did not fail before sending)."""
    started = side_effect and tries.started > 0 and not isinstance(result.error, _NOT_SENT)
    if tries.started <= 1 and not started:
        return result
    rec = dataclasses.replace(
        result.record, attempt=max(1, tries.started), side_effect_started=started
    )
    return StepResult(rec, result.value, result.error)


def hedged(result: StepResult[Any], tries: Tries, copies: Copies) -> StepResult[Any]:
    """The call's record says how many extra copies its attempts started and, when one
    answered, which (0: the first copy of its attempt); and why a copy it wanted was not
    started (`hedge_held`: the first reason; its `note` counts each)."""
    extra = max(0, copies.started - tries.started)
    if extra == 0 and copies.held is None:
        return result
    winner = copies.winner if result.status is StepStatus.COMPLETED and extra else None
    rec = result.record
    note = rec.note
    if copies.times_held:
        held = ", ".join(f"{why} {n}" for why, n in copies.times_held.items())
        note = (
            f"{note}; hedge copies not started: {held}"
            if note
            else f"hedge copies not started: {held}"
        )
    rec = dataclasses.replace(rec, hedges=extra, winner=winner, hedge_held=copies.held, note=note)
    return StepResult(rec, result.value, result.error)


def is_timeout(result: StepResult[Any]) -> bool:
    """The call ran out of time: cut at its budget, not started for lack of it, or stopped by a
    `DeadlineExceeded`."""
    return result.status.ran_out or isinstance(result.error, DeadlineExceeded)


def is_transport(result: StepResult[Any]) -> bool:
    """The call failed on the way to its server (a stale answer may stand in for it)."""
    return isinstance(result.error, _TRANSPORT_ERRORS)
