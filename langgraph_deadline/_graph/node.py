"""`budgeted`: give a LangGraph node only what is left of the run's deadline."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command

from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, plan_step
from .._core.record import child_records, commit_record
from .._core.records import Outcome, StepRecord, StepStatus, Terminal
from .._core.run import StepResult, run_async, run_sync
from .._core.tracker import RunTracker, run_from_config
from .._core.validate import check_cap, check_seconds
from .seams import PASSTHROUGH
from .state import deadline_from_state

__all__ = ["budgeted"]

F = TypeVar("F", bound=Callable[..., Any])
_INJECTABLE = ("config", "runtime", "store", "writer", "previous")
DRAIN_REASON = "deadline_exceeded"


@overload
def budgeted(
    node: F,
    cap: float | None = None,
    min_viable: float = 0.0,
    name: str | None = None,
    *,
    reserve: float | None = None,
) -> F: ...


@overload
def budgeted(
    node: Runnable[Any, Any],
    cap: float | None = None,
    min_viable: float = 0.0,
    name: str | None = None,
    *,
    reserve: float | None = None,
) -> Runnable[Any, Any]: ...


@overload
def budgeted(
    node: None = None,
    cap: float | None = None,
    min_viable: float = 0.0,
    name: str | None = None,
    *,
    reserve: float | None = None,
) -> Callable[[F], F]: ...


def budgeted(
    node: Any = None,
    cap: float | None = None,
    min_viable: float = 0.0,
    name: str | None = None,
    *,
    reserve: float | None = None,
) -> Any:
    """Run a node with budget `min(cap, remaining - reserve)` of the run's deadline.

    Below `min_viable` the node body never runs: the run ends with `deadline_exceeded` (no I/O).
    Otherwise the body runs inside a cancel scope of its budget with the deadline in context, so
    httpx calls, model clients, tools and sub-graphs below it see the step's budget. When the
    budget runs out the body is cancelled (async) or abandoned (sync: a thread cannot be killed),
    the outcome and the step record are written to state (for `DeadlineState` graphs) and the run
    drains: no further node body runs. Works for sync and async functions (keeping LangGraph's
    injection of `config`, `runtime`, `store`, `writer`) and for runnables (`ToolNode`, sub-graphs).

    Use as `budgeted(node, cap=2.0)` or as `@budgeted(cap=2.0)`. `reserve` defaults to the run's.

    Raises:
        TypeError, ValueError: `cap`, `min_viable` or `reserve` is not a finite number >= 0.
        DeadlineExceeded: from the node, when the graph state has no deadline fields.
    """
    cap_s = check_cap(cap, "cap")
    min_s = check_seconds(min_viable, "min_viable")
    res_s = None if reserve is None else check_seconds(reserve, "reserve")
    if node is None:
        return lambda fn: wrap_node(fn, cap_s, min_s, name, res_s)
    return wrap_node(node, cap_s, min_s, name, res_s)


def wrap_node(
    node: Any,
    cap: float | None,
    min_viable: float,
    name: str | None,
    reserve: float | None,
    retry_policy: Any = None,
) -> Any:
    """`budgeted` without argument checks; `retry_policy` is the node's LangGraph RetryPolicy
    (given by `with_deadlines`), so that a retry whose backoff cannot fit is not waited for."""
    if getattr(node, "__langgraph_deadline__", False):
        return node
    budget = _Budget(cap, min_viable, reserve, retry_policy)
    if isinstance(node, Runnable):
        return _wrap_runnable(node, budget, name)
    if not callable(node):
        raise TypeError(f"budgeted() needs a function or a Runnable, got {type(node).__name__}")
    return _wrap_function(node, budget, name)


@dataclasses.dataclass(frozen=True, slots=True)
class _Budget:
    cap: float | None
    min_viable: float
    reserve: float | None
    retry: Any  # RetryPolicy | Sequence[RetryPolicy] | None


# -- the shared policy ----------------------------------------------------------------------------


def _plan(name: str, state: Any, budget: _Budget, run: RunTracker | None, *, sync: bool) -> Plan:
    try:
        info = get_runtime().execution_info
    except Exception:  # outside a graph run (a direct call in a test)
        info = None
    attempt = info.node_attempt if info is not None else 1
    return plan_step(
        name,
        "node",
        cap=budget.cap,
        min_viable=budget.min_viable,
        reserve=budget.reserve,
        deadline=deadline_from_state(state),
        attempt=attempt,
        run=run,
        sync=sync,
    )


def _already_ended(state: Any) -> bool:
    if not isinstance(state, Mapping):
        return False
    outcome = state.get("deadline_outcome")
    return isinstance(outcome, Outcome) and outcome.terminal is not Terminal.COMPLETED


def _has_fields(state: Any) -> bool:
    return isinstance(state, Mapping) and "deadline_trace" in state


def _drain() -> None:
    try:
        control = get_runtime().control
    except Exception:
        return
    if control is not None:
        control.request_drain(DRAIN_REASON)


def _ended(
    state: Any,
    result: StepResult[Any],
    run: RunTracker | None,
    children: Sequence[StepRecord] = (),
    reason: str | None = None,
) -> Any:
    """The node's answer when its budget ran out: the outcome in state, or the error."""
    rec = result.record
    _drain()
    if reason is not None:
        pass
    elif rec.status is StepStatus.SKIPPED:
        reason = (
            f"{rec.name} not started: budget {rec.allocated_ms} ms below min_viable"
            if rec.allocated_ms
            else f"{rec.name} not started: no time left"
        )
    elif rec.status is StepStatus.ABANDONED:
        reason = f"{rec.name} overran its budget of {rec.allocated_ms} ms (sync work abandoned)"
    else:
        reason = f"{rec.name} cancelled at its budget of {rec.allocated_ms} ms"
    elapsed = None if run is None else round((time.monotonic() - run.started) * 1000.0, 3)
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED, step=rec.name, reason=reason, elapsed_ms=elapsed
    )
    if run is not None and run.outcome is None:
        run.outcome = outcome
    if _has_fields(state):
        return {"deadline_outcome": outcome, "deadline_trace": [*children, rec]}
    err = result.error
    if isinstance(err, DeadlineExceeded):
        err.outcome = outcome
        raise err
    raise DeadlineExceeded(reason, step=rec.name, outcome=outcome) from err


def _skipped(plan: Plan, state: Any, run: RunTracker | None) -> Any:
    record = plan.record(StepStatus.SKIPPED)
    commit_record(record, run)
    return _ended(state, StepResult(record), run)


def _finish(
    state: Any,
    result: StepResult[Any],
    children: list[StepRecord],
    plan: Plan,
    budget: _Budget,
    run: RunTracker | None,
) -> Any:
    status = result.status
    if status is StepStatus.COMPLETED:
        return _with_records(_no_later_deadline(result.value), [*children, result.record], state)
    if status in (StepStatus.TIMED_OUT, StepStatus.ABANDONED):
        return _ended(state, result, run, children)
    assert result.error is not None
    if (why := _retry_would_not_fit(result.error, plan, budget, run)) is not None:
        return _ended(state, result, run, children, why)
    raise result.error


def _retry_would_not_fit(
    error: BaseException, plan: Plan, budget: _Budget, run: RunTracker | None
) -> str | None:
    """Why LangGraph's retry of this failed attempt must not start, or None if it may.

    The backoff is computed as LangGraph does, with its jitter at the worst case (+1 s).
    """
    if budget.retry is None or plan.deadline is None or not isinstance(error, Exception):
        return None
    # A RetryPolicy is a NamedTuple (a Sequence itself): tell one policy from a list of them.
    policies = (budget.retry,) if hasattr(budget.retry, "max_attempts") else tuple(budget.retry)
    policy = next((p for p in policies if _retries_on(p, error)), None)
    if policy is None or plan.attempt >= policy.max_attempts:
        return None
    backoff = min(
        policy.max_interval, policy.initial_interval * policy.backoff_factor ** (plan.attempt - 1)
    ) + (1.0 if policy.jitter else 0.0)
    reserve = budget.reserve if budget.reserve is not None else (run.reserve if run else 0.0)
    left = plan.deadline._budget(None, reserve)
    if backoff + budget.min_viable < left:
        return None
    return (
        f"{plan.name} failed ({type(error).__name__}) and its retry would not fit: "
        f"{backoff:.2f} s of backoff plus {budget.min_viable:.2f} s of work, {left:.2f} s left"
    )


def _retries_on(policy: Any, error: Exception) -> bool:
    retry_on = policy.retry_on
    if isinstance(retry_on, type):
        return isinstance(error, retry_on)
    if isinstance(retry_on, Sequence):
        return isinstance(error, tuple(retry_on))
    return bool(retry_on(error))


def _no_later_deadline(value: Any) -> Any:
    """A node may bring the deadline forward, never push it back: keep its update plain data."""
    if isinstance(value, dict) and isinstance(value.get("deadline"), Deadline):
        return {**value, "deadline": value["deadline"].timestamp}
    return value


def _with_records(value: Any, recs: list[StepRecord], state: Any) -> Any:
    """Append the step records to the node's own update, when the state has a trace field."""
    if not _has_fields(state):
        return value
    if value is None:
        return {"deadline_trace": recs}
    if isinstance(value, dict):
        return {**value, "deadline_trace": [*(value.get("deadline_trace") or ()), *recs]}
    if isinstance(value, Command) and isinstance(value.update, dict | None):
        update = dict(value.update or {})
        update.setdefault("deadline_trace", recs)
        return Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)
    return value


# -- functions ------------------------------------------------------------------------------------


def _wrap_function(fn: Callable[..., Any], budget: _Budget, name: str | None) -> Any:
    step: str = name or getattr(fn, "__name__", None) or "node"
    params = inspect.signature(fn).parameters
    wants = tuple(k for k in _INJECTABLE if k in params)

    def kwargs_for(config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        if not wants:
            return {}
        found = {
            "config": config,
            "runtime": runtime,
            "store": getattr(runtime, "store", None),
            "writer": getattr(runtime, "stream_writer", None),
            "previous": getattr(runtime, "previous", None),
        }
        return {k: found[k] for k in wants}

    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(fn):

        async def async_wrapper(state: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
            if _already_ended(state):
                return None
            run = run_from_config(config)
            plan = _plan(step, state, budget, run, sync=False)
            if plan.skip:
                return _skipped(plan, state, run)
            kwargs = kwargs_for(config, runtime)
            with child_records() as children:
                result = await run_async(
                    plan, lambda: fn(state, **kwargs), run=run, passthrough=PASSTHROUGH
                )
            return _finish(state, result, children, plan, budget, run)

        wrapper = async_wrapper
    else:

        def sync_wrapper(state: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
            if _already_ended(state):
                return None
            run = run_from_config(config)
            plan = _plan(step, state, budget, run, sync=True)
            if plan.skip:
                return _skipped(plan, state, run)
            kwargs = kwargs_for(config, runtime)
            with child_records() as children:
                result = run_sync(
                    plan, lambda: fn(state, **kwargs), run=run, passthrough=PASSTHROUGH
                )
            return _finish(state, result, children, plan, budget, run)

        wrapper = sync_wrapper

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        with _suppress():
            setattr(wrapper, attr, getattr(fn, attr))
    setattr(wrapper, "__signature__", _signature(fn))  # noqa: B010 - read by inspect.signature
    setattr(wrapper, "__langgraph_deadline__", True)  # noqa: B010
    return wrapper


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """`(state, config, runtime)`, keeping the node's own state annotation (its input schema)."""
    first = next(iter(inspect.signature(fn).parameters.values()), None)
    annotation: Any = inspect.Parameter.empty
    if first is not None:
        try:
            annotation = typing.get_type_hints(fn).get(first.name, inspect.Parameter.empty)
        except Exception:
            annotation = first.annotation
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [
            inspect.Parameter("state", kind, annotation=annotation),
            inspect.Parameter("config", kind, annotation=RunnableConfig),
            inspect.Parameter("runtime", kind, annotation=Runtime),
        ]
    )


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


# -- runnables ------------------------------------------------------------------------------------


def _wrap_runnable(
    runnable: Runnable[Any, Any], budget: _Budget, name: str | None
) -> Runnable[Any, Any]:
    step = name or runnable.get_name()
    sync_only = (
        getattr(runnable, "afunc", True) is None and getattr(runnable, "func", None) is not None
    )

    def invoke(state: Any, config: RunnableConfig) -> Any:
        if _already_ended(state):
            return None
        run = run_from_config(config)
        plan = _plan(step, state, budget, run, sync=True)
        if plan.skip:
            return _skipped(plan, state, run)
        body = functools.partial(runnable.invoke, state, config)
        with child_records() as children:
            result = run_sync(plan, body, run=run, passthrough=PASSTHROUGH)
        return _finish(state, result, children, plan, budget, run)

    async def ainvoke(state: Any, config: RunnableConfig) -> Any:
        if _already_ended(state):
            return None
        run = run_from_config(config)
        plan = _plan(step, state, budget, run, sync=sync_only)
        if plan.skip:
            return _skipped(plan, state, run)
        body: Callable[[], Awaitable[Any]] = functools.partial(runnable.ainvoke, state, config)
        with child_records() as children:
            result = await run_async(plan, body, run=run, passthrough=PASSTHROUGH)
        return _finish(state, result, children, plan, budget, run)

    wrapped = RunnableLambda(invoke, afunc=ainvoke, name=step)
    object.__setattr__(wrapped, "__langgraph_deadline__", True)
    return wrapped
