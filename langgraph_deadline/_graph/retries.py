"""A LangGraph retry that cannot fit in what is left of the run is not waited for.

LangGraph's `RetryPolicy` sleeps a backoff and tries again without looking at the clock. A
node's own errors reach its wrapper (`ending.finish`), which ends the run at once when the
retry cannot fit. Errors raised around the body reach only LangGraph's retry loop: the
`NodeTimeoutError` of a `TimeoutPolicy` (raised by LangGraph's watchdog, outside the node),
an update the graph refuses. So `with_deadlines` gives every retry policy of the graph it
compiled a `retry_on` that asks the same question first (`RetryGuard`), whatever the error,
and drains the run when the answer is no. The guard finds the run in context: each entry point
runs LangGraph's loop with it set (`running`, `InRun`), and LangGraph starts its tasks in
copies of that context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any, Final, Generic, TypeVar

from langgraph.errors import GraphDrained
from langgraph.types import RetryPolicy

from .._core.deadline import Deadline
from .chunks import GraphRun
from .seams import DRAIN_REASON

__all__ = [
    "AsyncInRun",
    "InRun",
    "RetryGuard",
    "ain_run",
    "enter_run",
    "guard_retries",
    "in_run",
    "leave_run",
    "policies",
    "retries_on",
    "would_not_fit",
]

T = TypeVar("T")

_RUN: Final[ContextVar[GraphRun | None]] = ContextVar("langgraph_deadline.run", default=None)


def would_not_fit(
    policy: Any,
    error: BaseException,
    *,
    name: str,
    attempt: int,
    deadline: Deadline,
    reserve: float,
    min_viable: float,
) -> str | None:
    """Why LangGraph's retry of attempt `attempt` of `name`, which failed with `error` under
    `policy`, must not start; None if it may (or if LangGraph would not retry it anyway).

    The backoff is computed as LangGraph does, with its jitter at the worst case (+1 s)."""
    if attempt >= policy.max_attempts:
        return None
    backoff = min(
        policy.max_interval, policy.initial_interval * policy.backoff_factor ** (attempt - 1)
    ) + (1.0 if policy.jitter else 0.0)
    left = deadline._budget(None, reserve)
    if backoff + min_viable < left:
        return None
    return (
        f"{name} failed ({type(error).__name__}) and its retry would not fit: "
        f"{backoff:.2f} s of backoff plus {min_viable:.2f} s of work, {left:.2f} s left"
    )


def policies(retry: Any) -> tuple[Any, ...]:
    """A node's retry policies: one, a sequence of them, or none. (A `RetryPolicy` is a
    NamedTuple, a sequence itself: tell one policy from a list of them.)"""
    if retry is None:
        return ()
    return (retry,) if isinstance(retry, RetryPolicy) else tuple(retry)


def retries_on(policy: Any, error: Exception) -> bool:
    """LangGraph's own test: does `policy` retry `error`?"""
    retry_on = policy.retry_on
    if isinstance(retry_on, RetryGuard):
        return retry_on.retries(error)
    if isinstance(retry_on, type):
        return isinstance(error, retry_on)
    if isinstance(retry_on, Sequence):
        return isinstance(error, tuple(retry_on))
    return bool(retry_on(error))


# -- the guard LangGraph's retry loop asks -----------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RetryGuard:
    """The `retry_on` of a node's retry policy under `with_deadlines`: the user's answer, and
    if that is yes, whether the retry still fits in what is left of the run. A retry that does
    not fit ends the run at once (`deadline_exceeded`): LangGraph is drained, not left to sleep
    its backoff. Outside a run of ours it answers as the policy would."""

    policy: Any
    name: str
    min_viable: float = 0.0

    def retries(self, error: Exception) -> bool:
        return retries_on(self.policy, error)

    def __call__(self, error: Exception) -> bool:
        if not self.retries(error):
            return False
        run = _RUN.get()
        if run is None or run.deadline is None:
            return True
        why = would_not_fit(
            self.policy,
            error,
            name=self.name,
            attempt=run.failed_attempt(error, self.name),
            deadline=run.deadline,
            reserve=run.reserve,
            min_viable=self.min_viable,
        )
        if why is None:
            return True
        if run.outcome is None:
            run.outcome = run.ran_out(why, self.name)
        raise GraphDrained(DRAIN_REASON) from error


def guard_retries(compiled: Any, min_viable: Mapping[str, float]) -> bool:
    """Give every retry policy of the graph `with_deadlines` just compiled (the nodes' own and
    the builder's defaults, which LangGraph applies when compiling) a `RetryGuard`. True when
    the graph has one: only then do its runs put themselves in context for the guards."""
    guarded = False
    for name, node in compiled.nodes.items():
        found = policies(getattr(node, "retry_policy", None))
        if found and not any(isinstance(p.retry_on, RetryGuard) for p in found):
            need = min_viable.get(name, 0.0)
            node.retry_policy = tuple(p._replace(retry_on=RetryGuard(p, name, need)) for p in found)
        guarded = guarded or bool(found)
    return guarded


# -- the run, in the context LangGraph starts its tasks from -----------------------------------


def enter_run(run: GraphRun) -> Token[GraphRun | None]:
    """`run` is the run LangGraph's loop runs from here (`ainvoke`, `invoke`): a token to leave
    it with (`leave_run`). Not a context manager: it is one object less alive per run."""
    return _RUN.set(run)


def leave_run(token: Token[GraphRun | None] | None) -> None:
    """Leave the run `enter_run` entered (None: none was)."""
    if token is not None:
        _RUN.reset(token)


def in_run(run: GraphRun, stream: Iterator[T], *, guarded: bool) -> Iterator[T]:
    """`stream`, each of its steps run with `run` in context when the graph has retry guards
    (`guarded`); else `stream` itself (no object more per run)."""
    return InRun(run, stream) if guarded else stream


def ain_run(run: GraphRun, stream: Any, *, guarded: bool) -> Any:
    """`in_run` for an async stream (closed as it is: `aclose`)."""
    return AsyncInRun(run, stream) if guarded else stream


class InRun(Generic[T]):
    """A sync stream of `run` whose every step runs with the run in context (set for the
    step only: a stream is read in its consumer's context)."""

    __slots__ = ("_inner", "_run")

    def __init__(self, run: GraphRun, inner: Iterator[T]) -> None:
        self._run = run
        self._inner = inner

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        token = _RUN.set(self._run)
        try:
            return next(self._inner)
        finally:
            _RUN.reset(token)


class AsyncInRun(Generic[T]):
    """`InRun` for an async stream (closed as it is: `aclose`)."""

    __slots__ = ("_inner", "_run")

    def __init__(self, run: GraphRun, inner: AsyncIterator[T]) -> None:
        self._run = run
        self._inner = inner

    def __aiter__(self) -> AsyncInRun[T]:
        return self

    async def __anext__(self) -> T:
        token = _RUN.set(self._run)
        try:
            return await anext(self._inner)
        finally:
            _RUN.reset(token)

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()
