"""A node's step: `budgeted` gives a LangGraph node only what is left of the run's deadline;
`NodeStep` plans its budget, runs its body under it and ends it by one rule.

- The face. A node function is wrapped as a function (LangGraph keeps injecting `config`,
  `runtime`, `store`, `writer`); a Runnable node (a compiled sub-graph, `ToolNode`, a node with
  both a sync and an async body) is wrapped as a Runnable that calls its `invoke` under `invoke`
  and its `ainvoke` under `ainvoke`, so each keeps the body LangGraph would have run.
- The ending. Completed: its update (with its records, where the run's entry does not write
  them at its end); ended early by the deadline: the outcome in state, or `DeadlineExceeded`
  for state without deadline fields, and the run drains so no further node body runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
import typing
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final, TypedDict, TypeVar, Unpack, cast, overload

from langchain_core.messages import ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import merge_configs
from langgraph.errors import GraphDrained
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime

from .._core.context import current_deadline
from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.plan import Plan, Step
from .._core.records import Outcome, StepRecord, StepStatus, Terminal, ended_short
from .._core.rules import StepRule
from .._core.step import (
    StepResult,
    StepRun,
    child_records,
    cut_inside,
    refused,
    run_sync,
    settle,
    unbounded_guard,
)
from .._core.sync_http import ensure as ensure_http
from .._core.validate import (
    ceiling_of,
    check_fits,
    check_idle_cap,
    check_limit,
    check_seconds,
    check_viable,
    floor_of,
)
from .._core.workers import SyncBody
from .answers import close_pending
from .chunks import GraphRun, graph_run
from .inputs import plain_input
from .messages import ToolResults, messages_of, open_tool_calls
from .retries import policies, retries_on, would_not_fit
from .seams import (
    DRAIN_REASON,
    drain,
    node_attempt,
    runs_on_a_thread,
    state_reader,
    uncached,
)
from .settings import NodeSettings
from .state import RUN_OVER, deadline_from_state, state_fields, with_trace
from .streams import (
    PartialAnswer,
    callbacks_in_context,
    heartbeating,
    streams_let_go,
    streams_stopped,
    watching_streams,
)
from .tool_node import capped_per_call, is_tool_node

__all__ = ["NodeStep", "budgeted", "is_budgeted", "unwrapped", "wrap_node"]


def already_ended(state: Any) -> bool:
    """True when the run has its terminal already: later node bodies do not run."""
    fields = state_fields(state)
    if fields is None:
        return False
    outcome = fields.get("deadline_outcome")
    return isinstance(outcome, Outcome) and outcome.terminal is not Terminal.COMPLETED


def has_fields(state: Any) -> bool:
    """True when the state carries the deadline fields (`DeadlineState`)."""
    fields = state_fields(state)
    return fields is not None and "deadline_trace" in fields


def _traced(state: Any, run: GraphRun | None) -> bool:
    """True when a node's update carries its records: a state with the deadline fields, in a
    run whose entry does not write them all at its end (a hand-built graph)."""
    return (run is None or not run.trace_at_end) and has_fields(state)


def ended(
    state: Any,
    result: StepResult[Any],
    run: GraphRun | None,
    children: Sequence[StepRecord] = (),
    reason: str | None = None,
    finished: Mapping[str, ToolMessage] | None = None,
) -> Any:
    """End the run at this node, which ran out of time. One rule for every kind of node:

    - In a checkpointed run, the node is *not* done: it raises LangGraph's `GraphDrained`, so
      its routers do not run on output it never wrote, siblings in the same superstep finish
      and keep their results (in the checkpoint too), and a resume that grants time runs it
      again. `with_deadlines` turns the drain into the outcome it returns. Open tool calls the
      node was answering are owed an answer each (the results that finished, the model-readable
      timeout for the rest): `with_deadlines` writes them with the outcome (`graph.assemble`),
      marked so that a grant removes them before the node runs again.
    - In a run with no checkpoint (nothing to resume) the node ends its superstep with the
      outcome (and the answers to its open tool calls), so the siblings' results reach the
      returned state; the run drains, and `with_deadlines` keeps the node's routers from
      running (`routes.py`). That update is no result: it is kept out of LangGraph's node
      cache, so the same input runs the node again.
    - Outside `with_deadlines` (a hand-built graph) nothing above the node can turn a drain into
      a return value: a state with the deadline fields gets the outcome written and the run
      drains (LangGraph raises `GraphDrained` if more steps were scheduled); a state without
      them raises `DeadlineExceeded` with the outcome and the state it was given.
    """
    rec = result.record
    err = result.error
    inner = err.step if isinstance(err, DeadlineExceeded) and not result.status.cut else None
    if rec.cancel_source == "run_deadline":  # where the time ran out, if its cut came second
        last = cut_inside(children) or _node_inside(rec, run)
        if last is not None:
            inner, reason = last.name, reason or last.ran_out_reason()
    if reason is None:
        reason = rec.ran_out_reason()
    elapsed = None if run is None else round((time.monotonic() - run.started) * 1000.0, 3)
    # Where the time ran out: this node, or the step below it that said so (a downstream
    # service's step, named in its 504; a retried call; a model call).
    outcome = Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=inner or rec.name,
        reason=reason,
        elapsed_ms=elapsed,
    )
    if run is None and not has_fields(state):
        # A hand-built graph (no with_deadlines above it) with no fields to carry the outcome.
        known = err if isinstance(err, DeadlineExceeded) else None
        raise DeadlineExceeded(
            reason,
            deadline=known.deadline if known else None,
            step=outcome.step,
            outcome=outcome,
            scopes=known.scopes if known else (),
            state=state,
        ) from err
    if run is not None and run.outcome is None:
        run.outcome = outcome
    calls = open_tool_calls(state)
    if run is not None and run.resumable:
        if calls:
            run.owed = (*run.owed, *close_pending(calls, rec, finished))
        raise GraphDrained(DRAIN_REASON) from err
    drain()
    uncached()
    update: dict[str, Any] = {}
    if calls:
        update["messages"] = close_pending(calls, rec, finished)
    if has_fields(state):
        update["deadline_outcome"] = outcome
        update["deadline_trace"] = [*children, rec]
        update["deadline"] = RUN_OVER  # the next run's deadline replaces this one
    return update or None


def _node_inside(record: StepRecord, run: GraphRun | None) -> StepRecord | None:
    """A node run inside this one (a `@task` its entrypoint awaits) still in flight past its
    own deadline when this one was cut at the run's: the run ran out in it. Its cut is due a
    hand-off before this one's; on a busy loop both are due at once and this one's may be
    handled first. (What it would say of itself; it records its own end as it closes.)"""
    if run is None:
        return None
    link = record.link
    for plan in run.in_flight.values():
        ends = plan.ends
        if plan.kind == "node" and plan.parent == link and ends is not None and ends.expired:
            return plan.record(StepStatus.TIMED_OUT, cancel_source="run_deadline")
    return None


def finish(
    state: Any,
    result: StepResult[Any],
    children: list[StepRecord],
    plan: Plan,
    settings: NodeSettings,
    run: GraphRun | None,
    finished: Mapping[str, ToolMessage] | None = None,
) -> Any:
    """The node's return value: its update with its records, the early end, or its own error.

    A `DeadlineExceeded` raised inside the node (a retry or a model call refusing to start, a
    downstream service out of this run's time) ends the run like a cut: it is a deadline end.
    """
    status = result.status
    if status is StepStatus.COMPLETED:
        if children and any(not _real(r.status) for r in children):
            uncached()  # an answer made of a cut or stale step is no result to replay
        value = plain_input(result.value)  # a node may bring the deadline forward, as plain data
        return with_trace(value, [*children, result.record]) if _traced(state, run) else value
    if status.ran_out:  # cut, or refused (`skipped`)
        if settings.optional and result.record.cancel_source in ("step_cap", "kept_back"):
            return dropped(state, result.record, children, finished, run)
        return ended(state, result, run, children, finished=finished)
    err = result.error
    assert err is not None
    if isinstance(err, DeadlineExceeded):
        return ended(state, result, run, children, str(err) or None, finished)
    if (why := _retry_would_not_fit(err, plan, settings, run)) is not None:
        return ended(state, result, run, children, why, finished)
    raise err


def _on_executor() -> SyncBody:
    """The sync body of a node that LangGraph runs on its executor's thread (its httpx
    requests are then cut and closed as a worker's are: `sync_http.py`)."""
    ensure_http()
    return SyncBody()


def _real(status: StepStatus) -> bool:
    """True for a step that ran to its own end (completed, or failed by itself)."""
    return not ended_short(status)


def dropped(
    state: Any,
    record: StepRecord,
    children: Sequence[StepRecord],
    finished: Mapping[str, ToolMessage] | None,
    run: GraphRun | None = None,
) -> Any:
    """An optional node cut at its own budget: no update of its own (the open tool calls it was
    answering get their answers), its record in the trace, and the run goes on. A `@task`
    (no state) raises `DeadlineExceeded` to the code that awaits it, which decides: caught, the
    run goes on; not caught, it ends the entrypoint's run as a cut does."""
    if state is None:
        reason = record.ran_out_reason()
        outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step=record.name, reason=reason)
        raise DeadlineExceeded(reason, step=record.name, outcome=outcome)
    update: dict[str, Any] = {}
    if calls := open_tool_calls(state):
        update["messages"] = close_pending(calls, record, finished)
    if _traced(state, run):
        update["deadline_trace"] = [*children, record]
    return update or None


def finish_unbounded(
    state: Any, value: Any, children: list[StepRecord], run: GraphRun | None = None
) -> Any:
    """The update of a node that nothing bounded and that completed: the records of the steps
    inside it, and none of its own (see `NodeStep`)."""
    if children and any(not _real(r.status) for r in children):
        uncached()
    value = plain_input(value)
    return with_trace(value, children) if children and _traced(state, run) else value


def _retry_would_not_fit(
    error: BaseException, plan: Plan, settings: NodeSettings, run: GraphRun | None
) -> str | None:
    """Why LangGraph's retry of this failed attempt must not start, or None if it may (the rule
    is `retries.would_not_fit`, which the retry loop's guard applies to errors raised around
    the body)."""
    if settings.retry is None or plan.deadline is None or not isinstance(error, Exception):
        return None
    policy = next((p for p in policies(settings.retry) if retries_on(p, error)), None)
    if policy is None:
        return None
    reserve = settings.reserve if settings.reserve is not None else (run.reserve if run else 0.0)
    return would_not_fit(
        policy,
        error,
        name=plan.name,
        attempt=plan.attempt,
        deadline=plan.deadline,
        reserve=reserve,
        min_viable=plan.min_viable,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class NodeStep:
    """One budgeted node: its name and settings, and the life of each of its runs."""

    name: str
    settings: NodeSettings

    step: Step = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        limits = self.settings
        step = Step(
            self.name, "node", limits.cap, limits.min_viable, limits.reserve, limits.idle_cap
        )
        object.__setattr__(self, "step", step)

    def _bounded(self, state: Any, run: GraphRun | None) -> tuple[bool, Deadline | None]:
        """Whether anything bounds this run of the node (its cap, a deadline in state, the
        run's, one in context), and the deadline its state holds."""
        if run is not None and run.deadline is not None:
            return True, deadline_from_state(state, known=run.deadline)
        deadline = deadline_from_state(state)
        bounded = (
            self.settings.cap is not None or deadline is not None or current_deadline() is not None
        )
        return bounded, deadline

    def call(
        self,
        state: Any,
        config: RunnableConfig,
        body: Callable[[RunnableConfig], Any],
        finished: Mapping[str, ToolMessage] | None = None,
    ) -> Any:
        """Run a sync body under the node's budget (abandoned on a thread past it). The body
        gets the config to run with; its LangChain model streams stop at their first token
        past the budget, since the thread that runs them cannot be stopped."""
        if already_ended(state):
            return None
        run = graph_run(config)
        if run is not None and run.select is not None:
            run.read = state_reader(config, run.select, run.read)  # (its graph's nodes only)
        bounded, deadline = self._bounded(state, run)
        if not bounded:
            return self._call_unbounded(state, config, body, run, finished)
        plan = self.step.plan(run=run, deadline=deadline, attempt=node_attempt(config), sync=True)
        said = listening(state, run, finished)
        if said is not None:
            config = merge_configs(config, {"callbacks": [said]})

        def guarded() -> Any:  # on a worker thread, in a copy of this context
            streams_stopped()  # its model streams end at the budget: the thread runs on
            with callbacks_in_context(said), watching_streams(plan.idle is not None):
                return body(config)

        with child_records(plan.link, run) as children:
            result = run_sync(plan, guarded, run=run)
        kept(said, result, run)
        return finish(state, result, children, plan, self.settings, run, finished)

    async def acall(
        self,
        state: Any,
        config: RunnableConfig,
        body: Callable[[], Awaitable[Any]],
        finished: Mapping[str, ToolMessage] | None = None,
        *,
        on_thread: bool = False,
        said: PartialAnswer | None = None,
    ) -> Any:
        """Run an async body under the node's budget (cancelled at it); `on_thread` when the
        body only waits on a thread, which the budget cannot stop. `said` collects what the
        body's model calls stream (given when the body runs with a config of its own, which
        holds it; else one is made for model calls that read the context)."""
        if already_ended(state):
            return None
        run = graph_run(config)
        if run is not None and run.select is not None:
            run.read = state_reader(config, run.select, run.read)  # (its graph's nodes only)
        bounded, deadline = self._bounded(state, run)
        if not bounded:
            return await self._acall_unbounded(state, config, body, run, finished, on_thread)
        plan = self.step.plan(
            run=run, deadline=deadline, attempt=node_attempt(config), sync=on_thread
        )
        if plan.skip:  # (a block cannot refuse its body: the engine's refusal, here)
            return finish(state, refused(plan, run), [], plan, self.settings, run, finished)
        said = said or listening(state, run, finished)
        stopped = streams_stopped()  # its model streams end at the cut, on a thread too
        # A body on LangGraph's executor thread (a sync node under `ainvoke`): its httpx
        # requests follow the step's deadline, and are closed if the thread is left running.
        thread = _on_executor() if on_thread else None
        entered = None if thread is None else thread.entered()
        completed = False
        try:
            with (
                child_records(plan.link, run) as children,
                StepRun(plan, run) as step,
            ):
                if said is None and plan.idle is None:  # the usual node: no blocks to enter
                    step.value = await body()  # in this coroutine: one frame fewer than run_async's
                else:
                    with callbacks_in_context(said), watching_streams(plan.idle is not None):
                        step.value = await body()  # (its models' chunks are progress)
            completed = step.result.status is StepStatus.COMPLETED
        finally:
            streams_let_go(stopped)
            if thread is not None and entered is not None:
                SyncBody.left(entered)
                if not completed:
                    thread.abandon()
        kept(said, step.result, run)
        return finish(state, step.result, children, plan, self.settings, run, finished)

    # -- nothing bounds the node: it runs as it would bare ----------------------------------------
    # No budget to plan, no timer, and no record of its own when it completes (there is nothing
    # to report); the records of the steps inside it still reach the trace. It still stops when
    # the caller gives up, and a node that does not complete is recorded as any other.

    async def _acall_unbounded(
        self,
        state: Any,
        config: RunnableConfig,
        body: Callable[[], Awaitable[Any]],
        run: GraphRun | None,
        finished: Mapping[str, ToolMessage] | None,
        on_thread: bool,
    ) -> Any:
        started = time.monotonic()
        with child_records(None, run) as children:
            try:
                with unbounded_guard(self.name, run):
                    value = await body()
            except BaseException as exc:
                if (ended := self._settle_late(exc, config, run, started, on_thread)) is None:
                    raise
                return finish(state, ended[1], children, ended[0], self.settings, run, finished)
        return finish_unbounded(state, value, children, run)

    def _call_unbounded(
        self,
        state: Any,
        config: RunnableConfig,
        body: Callable[[RunnableConfig], Any],
        run: GraphRun | None,
        finished: Mapping[str, ToolMessage] | None,
    ) -> Any:
        started = time.monotonic()
        with child_records(None, run) as children:
            try:
                value = body(config)
            except BaseException as exc:
                if (ended := self._settle_late(exc, config, run, started, True)) is None:
                    raise
                return finish(state, ended[1], children, ended[0], self.settings, run, finished)
        return finish_unbounded(state, value, children, run)

    def _settle_late(
        self,
        exc: BaseException,
        config: RunnableConfig,
        run: GraphRun | None,
        started: float,
        sync: bool,
    ) -> tuple[Plan, StepResult[Any]] | None:
        """An unbounded node that did not complete: planned now, dated from `started`, and
        recorded by the one rule (`settle`). None: `exc` goes on up."""
        plan = self.step.plan(run=run, attempt=node_attempt(config), sync=sync, started=started)
        result = settle(exc, plan, run)
        return None if result is None else (plan, result)


def listening(
    state: Any, run: GraphRun | None, finished: Mapping[str, ToolMessage] | None
) -> PartialAnswer | None:
    """A collector of the text a node streams, for a node that may answer the user (a messages
    state, no tool calls to answer) in a run whose closing reply keeps a cut answer."""
    if run is None or not run.keep_partial or finished is not None:
        return None
    return PartialAnswer() if messages_of(state) is not None else None


def kept(said: PartialAnswer | None, result: StepResult[Any], run: GraphRun | None) -> None:
    """A node cut mid-answer: what it had said goes to the closing reply."""
    if said is not None and run is not None and result.status.cut and said.text:
        run.partial = said.text


F = TypeVar("F", bound=Callable[..., Any])
_INJECTABLE = ("config", "runtime", "store", "writer", "previous")
_MARK = "__langgraph_deadline__"
_GIVEN: Final = "lgd_given"  # where a Runnable wrapper keeps the node it wraps


class _Options(TypedDict, total=False):
    """`budgeted`'s keyword options, for its overloads (the function itself lists them, with
    their defaults)."""

    cap: float | StepRule | None
    min_viable: float | StepRule
    name: str | None
    reserve: float | None
    idle_cap: float | StepRule | None


@overload
def budgeted(
    node: F,
    **options: Unpack[_Options],
) -> F: ...


@overload
def budgeted(
    node: Runnable[Any, Any],
    **options: Unpack[_Options],
) -> Runnable[Any, Any]: ...


@overload
def budgeted(
    node: None = None,
    **options: Unpack[_Options],
) -> Callable[[F], F]: ...


def budgeted(
    node: Any = None,
    *,
    cap: float | StepRule | None = None,
    min_viable: float | StepRule = 0.0,
    name: str | None = None,
    reserve: float | None = None,
    idle_cap: float | StepRule | None = None,
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
    `cap` and `min_viable` may be learned: `learned(book, ...)` (docs/howto/learned-budgets.md).
    `idle_cap` (seconds, or learned) cuts the node as stalled when it shows no progress for
    that long, from its start (LangGraph's `idle_timeout`): progress is `runtime.heartbeat()`
    (where the installed LangGraph has it), a write of `runtime.stream_writer` (or an injected
    `writer`), a chunk of a model's stream or of an HTTP body read with `deadline_hooks`.

    Raises:
        TypeError, ValueError: `cap`, `min_viable` or `reserve` is not a finite number >= 0;
            `min_viable` is above `cap`; `name` is not a string; `node` is neither a function
            nor a Runnable.
        DeadlineExceeded: from the node, when the graph state has no deadline fields.
    """
    settings = NodeSettings(
        cap=check_limit(cap, "cap"),
        min_viable=check_viable(min_viable, "min_viable"),
        reserve=None if reserve is None else check_seconds(reserve, "reserve"),
        idle_cap=check_idle_cap(idle_cap, "idle_cap"),
    )
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}: {name!r}")
    check_fits(
        ceiling_of(settings.cap),
        reserve=0.0,
        needs={"min_viable": floor_of(settings.min_viable)},
        name="cap",
    )
    if node is None:
        return lambda fn: wrap_node(fn, settings, name)
    return wrap_node(node, settings, name)


def is_budgeted(node: object) -> bool:
    """True for a node this library already wrapped (it keeps its own budget)."""
    return bool(getattr(node, _MARK, False))


def unwrapped(node: Any) -> Any:
    """The node as the user gave it, when `with_deadlines` wrapped it as a Runnable (its
    `given`), else `node`."""
    return getattr(node, _GIVEN, node)


def wrap_node(node: Any, settings: NodeSettings, name: str | None) -> Any:
    """`budgeted` with checked settings (also used by `with_deadlines`)."""
    if is_budgeted(node):
        return node
    if isinstance(node, Runnable):
        return _wrap_runnable(node, settings, name)
    if not callable(node):
        raise TypeError(f"budgeted() needs a function or a Runnable, got {type(node).__name__}")
    return _wrap_function(node, settings, name)


# -- functions ------------------------------------------------------------------------------------


def _wrap_function(fn: Callable[..., Any], settings: NodeSettings, name: str | None) -> Any:
    step = NodeStep(name or getattr(fn, "__name__", None) or "node", settings)
    params = inspect.signature(fn).parameters
    wants = tuple(k for k in _INJECTABLE if k in params)

    beats = settings.idle_cap is not None

    def kwargs_for(config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        if not wants:
            return {}
        if beats:
            runtime = heartbeating(runtime)
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
            kwargs = kwargs_for(config, runtime)
            return await step.acall(state, config, lambda: fn(state, **kwargs))

        wrapper = async_wrapper
    else:

        def sync_wrapper(state: Any, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
            return step.call(state, config, lambda cfg: fn(state, **kwargs_for(cfg, runtime)))

        wrapper = sync_wrapper

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(fn, attr):
            setattr(wrapper, attr, getattr(fn, attr))
    setattr(wrapper, "__signature__", _signature(fn))  # noqa: B010 - read by inspect.signature
    setattr(wrapper, _MARK, True)
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


# -- runnables ------------------------------------------------------------------------------------


def _wrap_runnable(
    runnable: Runnable[Any, Any], settings: NodeSettings, name: str | None
) -> Runnable[Any, Any]:
    given = runnable
    if is_tool_node(runnable) and settings.cap is not None:
        # A cap on a node that answers tool calls is each call's (tool_node.py): a call that
        # reaches it answers the model, and the node itself has only the run's deadline.
        runnable = capped_per_call(cast(ToolNode, runnable), settings.cap)
        settings = dataclasses.replace(settings, cap=None)
    return _BudgetedRunnable(runnable, NodeStep(name or runnable.get_name(), settings), given)


def _collecting_tool_results(
    state: Any, config: RunnableConfig
) -> tuple[RunnableConfig, dict[str, ToolMessage] | None]:
    """A node answering open tool calls (`ToolNode`) reports each finished call to a callback,
    so that if the node is cut, the answers it already had are kept."""
    if not open_tool_calls(state):
        return config, None
    results = ToolResults()
    return merge_configs(config, {"callbacks": [results]}), results.by_call


class _BudgetedRunnable(RunnableLambda[Any, Any]):
    """A budgeted Runnable node. A `RunnableLambda`, so that LangGraph still finds a sub-graph
    inside it (`get_subgraphs`, `get_state(subgraphs=True)` look through a lambda's closure);
    calls go straight to the budgeted body: the wrapped node traces itself, as it would bare."""

    __langgraph_deadline__ = True

    def __init__(
        self, runnable: Runnable[Any, Any], step: NodeStep, given: Runnable[Any, Any]
    ) -> None:
        on_thread = runs_on_a_thread(runnable)

        def invoke(state: Any, config: RunnableConfig) -> Any:
            config, results = _collecting_tool_results(state, config)
            return step.call(state, config, lambda cfg: runnable.invoke(state, cfg), results)

        async def ainvoke(state: Any, config: RunnableConfig) -> Any:
            return await self.ainvoke(state, config)

        super().__init__(invoke, afunc=ainvoke, name=step.name)
        self._body = invoke
        self._runnable = runnable
        self.lgd_given = given
        self._step = step
        self._on_thread = on_thread

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self._body(input, config or {})

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        # As a Runnable streams by default, with no run of its own (LangGraph streams a node's
        # first step): the wrapped node traces itself, as it would bare.
        yield self._body(input, config or {})

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        yield await self.ainvoke(input, config)

    def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        # The body's coroutine itself, not one more awaiting it: every node call goes through.
        cfg, results = _collecting_tool_results(input, config or {})
        said = listening(input, graph_run(cfg), results)
        if said is not None:  # the body runs with this config, not the one in context
            cfg = merge_configs(cfg, {"callbacks": [said]})
        body = functools.partial(self._runnable.ainvoke, input, cfg)
        return self._step.acall(input, cfg, body, results, on_thread=self._on_thread, said=said)
