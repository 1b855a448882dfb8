"""`with_deadlines`: put one deadline on every run of an existing graph, and say how it ended."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from typing import Any, cast

import anyio
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained, GraphRecursionError, NodeTimeoutError
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Overwrite

from .._core.context import current_deadline
from .._core.deadline import Deadline, earliest
from .._core.errors import DeadlineExceeded
from .._core.observe import RunEvent, emit_run
from .._core.records import Outcome, StepRecord, Terminal
from .._core.tracker import RUN_KEY, RunTracker
from .._core.validate import check_cap, check_seconds
from .node import DRAIN_REASON, wrap_node
from .state import deadline_from_state, fresh_run_update

__all__ = ["DeadlineGraph", "terminal_of", "with_deadlines"]

log = logging.getLogger("langgraph_deadline")


@dataclasses.dataclass(frozen=True, slots=True)
class _Settings:
    timeout: float | None
    reserve: float
    has_fields: bool


def with_deadlines(
    graph: StateGraph[Any, Any, Any, Any] | CompiledStateGraph[Any, Any, Any, Any],
    *,
    timeout: float | None = None,
    caps: Mapping[str, float | None] | None = None,
    min_viable: Mapping[str, float] | None = None,
    reserve: float = 0.0,
    default_cap: float | None = None,
    checkpointer: Any = None,
    store: Any = None,
) -> DeadlineGraph:
    """Compile `graph` (a `StateGraph` builder or a compiled graph, left untouched) with every
    node budgeted and one deadline per run.

    Each run's deadline is the earliest of: the input's `deadline`, the deadline in context
    (`deadline_scope` around the call) and `timeout` seconds from the call. Resuming a run
    (`None` or a `Command` as input) keeps the checkpointed deadline; a `Command(update=
    deadline_input(s))` grants a new one. `ainvoke` also cancels the whole run at the deadline.

    How the caller learns the terminal:
    - state with `DeadlineState` fields: the returned state's `deadline_outcome`
      (`COMPLETED` when the run finished; when it ended early, the checkpoint has it too);
    - state without them: `DeadlineExceeded` is raised, with `.outcome` and the partial `.state`.
    Recursion limits, failures and cancellation raise as LangGraph raises them (`terminal_of`).

    Raises:
        ValueError: a name in `caps` or `min_viable` is not a node; a bad number.
        TypeError: `graph` is not a `StateGraph` or a compiled one.
    """
    timeout_s = check_cap(timeout, "timeout")
    reserve_s = check_seconds(reserve, "reserve")
    default_cap_s = check_cap(default_cap, "default_cap")
    caps = dict(caps or {})
    mins = dict(min_viable or {})

    compile_kwargs: dict[str, Any] = {}
    if isinstance(graph, CompiledStateGraph):
        builder = graph.builder
        compile_kwargs = {
            "checkpointer": graph.checkpointer,
            "store": graph.store,
            "cache": graph.cache,
            "interrupt_before": graph.interrupt_before_nodes or None,
            "interrupt_after": graph.interrupt_after_nodes or None,
            "debug": graph.debug,
            "name": graph.name,
        }
    elif isinstance(graph, StateGraph):
        builder = graph
    else:
        raise TypeError(
            f"with_deadlines() needs a StateGraph or a compiled graph, got {type(graph).__name__}"
        )
    if checkpointer is not None:
        compile_kwargs["checkpointer"] = checkpointer
    if store is not None:
        compile_kwargs["store"] = store

    for table, label in ((caps, "caps"), (mins, "min_viable")):
        unknown = sorted(set(table) - set(builder.nodes))
        if unknown:
            raise ValueError(
                f"{label} names unknown nodes {unknown}; nodes are {sorted(builder.nodes)}"
            )
    for node, value in caps.items():
        caps[node] = check_cap(value, f"caps[{node!r}]")
    for node, value in mins.items():
        mins[node] = check_seconds(value, f"min_viable[{node!r}]")

    wrapped = copy.copy(builder)
    wrapped.nodes = {
        name: spec
        if spec.is_error_handler
        else dataclasses.replace(
            spec,
            runnable=_budget_node(
                spec.runnable,
                name,
                caps.get(name, default_cap_s),
                mins.get(name, 0.0),
                explicit=name in caps or name in mins,
                retry_policy=spec.retry_policy,
            ),
        )
        for name, spec in builder.nodes.items()
    }
    compiled = wrapped.compile(**compile_kwargs)
    has_fields = {"deadline", "deadline_outcome", "deadline_trace"} <= set(wrapped.channels)
    compiled.__class__ = DeadlineGraph
    compiled.__dict__["_lgd_settings"] = _Settings(timeout_s, reserve_s, has_fields)
    return compiled  # type: ignore[return-value]


def _budget_node(
    runnable: Any,
    name: str,
    cap: float | None,
    min_viable: float,
    *,
    explicit: bool,
    retry_policy: Any,
) -> Any:
    """Budget one node. A plain function node (LangGraph's `RunnableCallable`) is unwrapped and
    wrapped again by LangGraph's own coercion, so the node costs no extra Runnable layer; a node
    the user already `budgeted` keeps its own budget."""
    fn = getattr(runnable, "func", None) or getattr(runnable, "afunc", None)
    if type(runnable).__name__ != "RunnableCallable" or not callable(fn):
        return _budget_runnable(runnable, cap, min_viable, name, retry_policy, explicit)
    if getattr(fn, "__langgraph_deadline__", False):
        if explicit:
            raise _already_budgeted(name)
        return runnable
    try:
        from langgraph._internal._runnable import coerce_to_runnable
    except ImportError:  # a LangGraph without it: one more Runnable layer, same behaviour
        return _budget_runnable(runnable, cap, min_viable, name, retry_policy, explicit)
    wrapped = wrap_node(fn, cap, min_viable, name, None, retry_policy)
    return coerce_to_runnable(wrapped, name=name, trace=runnable.trace)


def _already_budgeted(name: str) -> ValueError:
    return ValueError(
        f"node {name!r} is already wrapped with budgeted(): give its cap and min_viable "
        "there, not in with_deadlines(caps=..., min_viable=...)"
    )


def _budget_runnable(
    runnable: Any,
    cap: float | None,
    min_viable: float,
    name: str,
    retry_policy: Any,
    explicit: bool,
) -> Any:
    if getattr(runnable, "__langgraph_deadline__", False):
        if explicit:
            raise _already_budgeted(name)
        return runnable
    return wrap_node(runnable, cap, min_viable, name, None, retry_policy)


class DeadlineGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph whose runs each carry one deadline. Made by `with_deadlines`."""

    _lgd_settings: _Settings

    def __init__(self, *args: Any, _lgd_settings: _Settings | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if _lgd_settings is not None:
            self._lgd_settings = _lgd_settings

    # -- entry --------------------------------------------------------------------------------

    def _start(
        self, input: Any, config: RunnableConfig | None
    ) -> tuple[RunTracker, Any, RunnableConfig]:
        cfg: RunnableConfig = dict(config or {})  # type: ignore[assignment]
        existing = cfg.get("configurable", {}).get(RUN_KEY)
        if isinstance(existing, RunTracker) and existing.entry is self:
            existing.entry = None  # ainvoke prepared this run; astream goes on with it
            return existing, input, cfg
        settings = self._lgd_settings
        given = _deadline_given(input)
        if input is None or isinstance(input, Command):
            d = earliest(given, current_deadline())
        else:
            timeout = None if settings.timeout is None else Deadline.after(settings.timeout)
            d = earliest(given, current_deadline(), timeout)
            if settings.has_fields and isinstance(input, Mapping):
                input = {**input, **fresh_run_update(None if d is None else d.timestamp)}
        run = RunTracker(deadline=d, reserve=settings.reserve)
        cfg["configurable"] = {**cfg.get("configurable", {}), RUN_KEY: run}
        return run, input, cfg

    # -- streaming ----------------------------------------------------------------------------

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        prepared = _prepared(self, config)
        run, input, cfg = self._start(input, config)
        if not prepared and self._resuming(input):
            snapshot = self.get_state(cfg) if self._has_thread(cfg) else None
            if self._late(snapshot, run) is not None:
                return
        mode = kwargs.get("stream_mode", self.stream_mode)
        try:
            for chunk in super().stream(input, cfg, **kwargs):
                _note(run, chunk, mode)
                yield chunk
        except GraphDrained as exc:
            if exc.reason != DRAIN_REASON:
                _emit_run(run, _raised(exc))
                raise
            self._drained(run)
        except DeadlineExceeded as exc:
            if exc.state is None:
                exc.state = run.latest
            _emit_run(run, exc.outcome)
            raise
        except BaseException as exc:
            _emit_run(run, _raised(exc))
            raise
        if not prepared:
            _emit_run(run, _final_outcome(run, run.latest))

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        prepared = _prepared(self, config)
        run, input, cfg = self._start(input, config)
        if not prepared and self._resuming(input):
            snapshot = await self.aget_state(cfg) if self._has_thread(cfg) else None
            if self._late(snapshot, run) is not None:
                return
        mode = kwargs.get("stream_mode", self.stream_mode)
        try:
            stream = cast(AsyncGenerator[Any, None], super().astream(input, cfg, **kwargs))
            async with contextlib.aclosing(stream) as inner:
                async for chunk in inner:
                    _note(run, chunk, mode)
                    yield chunk
        except GraphDrained as exc:
            if exc.reason != DRAIN_REASON:
                _emit_run(run, _raised(exc))
                raise
            self._drained(run)
        except DeadlineExceeded as exc:
            if exc.state is None:
                exc.state = run.latest
            _emit_run(run, exc.outcome)
            raise
        except (GeneratorExit, anyio.get_cancelled_exc_class()) as exc:
            # The consumer gave up (closed the stream, or was cancelled): stop the run's steps,
            # wherever LangGraph runs them, instead of letting them go on to their deadline.
            run.signal.cancel("run_deadline" if run.backstop_fired else "caller")
            if not run.backstop_fired:  # the backstop reports the run itself
                _emit_run(run, _raised(exc))
            raise
        except BaseException as exc:
            _emit_run(run, _raised(exc))
            raise
        if not prepared:
            _emit_run(run, _final_outcome(run, run.latest))

    def _drained(self, run: RunTracker) -> None:
        """The run drained after a step ran out of budget. Graphs without deadline fields raise."""
        outcome = _outcome_from(run, None)
        if self._lgd_settings.has_fields:
            state = run.latest if isinstance(run.latest, Mapping) else {}
            written = state.get("deadline_outcome")
            _emit_run(run, written if isinstance(written, Outcome) else outcome)
            return
        _emit_run(run, outcome)
        raise _exceeded(outcome, run.deadline, run.latest)

    # -- invoke -------------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        run, input, cfg = self._start(input, config)
        if self._resuming(input) and self._has_thread(cfg):
            late = self._late(self.get_state(cfg), run)
            if late is not None:
                return late
        run.entry = self
        return self._completed(super().invoke(input, cfg, **kwargs), run)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Like `CompiledStateGraph.ainvoke`; also cancels the whole run at its deadline."""
        run, input, cfg = self._start(input, config)
        if self._resuming(input) and self._has_thread(cfg):
            snapshot = await self.aget_state(cfg)
            late = self._late(snapshot, run)
            if late is not None:
                return late
            run.deadline = earliest(run.deadline, deadline_from_state(snapshot.values))
        run.entry = self
        if run.deadline is None:
            return self._completed(await super().ainvoke(input, cfg, **kwargs), run)
        scope = anyio.CancelScope()

        def fire() -> None:
            run.fire_backstop()
            scope.cancel()

        handle = asyncio.get_running_loop().call_later(run.deadline.remaining(), fire)
        try:
            with scope:
                result = await super().ainvoke(input, cfg, **kwargs)
        finally:
            handle.cancel()
        if scope.cancelled_caught:
            return await self._backstop(run, cfg)
        return self._completed(result, run)

    def _resuming(self, input: Any) -> bool:
        """A resume (None or a Command) that does not grant a new deadline."""
        return (input is None or isinstance(input, Command)) and _deadline_given(input) is None

    def _has_thread(self, cfg: RunnableConfig) -> bool:
        return self.checkpointer is not None and bool(cfg.get("configurable", {}).get("thread_id"))

    def _late(self, snapshot: Any, run: RunTracker) -> Any:
        """A resume after the checkpointed deadline passed does not start: no node body runs,
        and the checkpoint stays as it was, so a resume that grants a new deadline
        (`Command(resume=..., update=deadline_input(s))`) continues where the run paused.
        Returns what the caller gets (graphs without deadline fields raise), or None to go on."""
        values = getattr(snapshot, "values", None)
        d = deadline_from_state(values)
        if d is None or not d.expired:
            return None
        pending = ", ".join(getattr(snapshot, "next", ()) or ()) or None
        outcome = Outcome(
            terminal=Terminal.DEADLINE_EXCEEDED,
            step=pending,
            reason="resumed after the run's deadline had passed: nothing was run",
            elapsed_ms=0.0,
        )
        _emit_run(run, outcome)
        if not self._lgd_settings.has_fields:
            raise _exceeded(outcome, d, values)
        return {**(values or {}), "deadline_outcome": outcome}

    async def _backstop(self, run: RunTracker, cfg: RunnableConfig) -> Any:
        """The run's deadline passed with work in flight: it was cancelled as a whole.

        The writes of the superstep in flight are lost (a `reserve` lets nodes finish first);
        the step records are not: every record of this run reaches the returned trace.
        """
        outcome = _outcome_from(run, "the run's deadline passed with steps in flight")
        _emit_run(run, outcome)
        if not self._lgd_settings.has_fields:
            raise _exceeded(outcome, run.deadline, run.latest)
        latest = run.latest if isinstance(run.latest, Mapping) else {}
        saved = self.checkpointer is not None and cfg.get("configurable", {}).get("thread_id")
        clean: RunnableConfig = {
            **cfg,
            "configurable": {k: v for k, v in cfg["configurable"].items() if k != RUN_KEY},
        }
        if saved:
            # The checkpoint may be ahead of the last streamed values (a superstep committed
            # just before the cancel): compare with it, so no record is written twice.
            with contextlib.suppress(Exception):
                latest = (await self.aget_state(clean)).values
        known = list(latest.get("deadline_trace") or [])
        missing = [r for r in run.records if r not in known]
        if saved:
            update = {"deadline_outcome": outcome, "deadline_trace": missing}
            try:
                await self.aupdate_state(clean, update, as_node=_last_node(missing, self))
            except Exception:  # the caller still gets the outcome
                log.warning("could not write the deadline outcome to the checkpoint", exc_info=True)
        return {**latest, "deadline_outcome": outcome, "deadline_trace": [*known, *missing]}

    def _completed(self, result: Any, run: RunTracker) -> Any:
        if isinstance(result, dict) and "__interrupt__" in result:
            run.interrupted = True
        outcome = _final_outcome(run, result)
        _emit_run(run, outcome)
        if (
            outcome is not None
            and self._lgd_settings.has_fields
            and isinstance(result, dict)
            and result.get("deadline_outcome") is None
        ):
            result = {**result, "deadline_outcome": outcome}
        return result


def _prepared(graph: DeadlineGraph, config: RunnableConfig | None) -> bool:
    run = (config or {}).get("configurable", {}).get(RUN_KEY)
    return isinstance(run, RunTracker) and run.entry is graph


def _raised(exc: BaseException) -> Outcome:
    """The outcome of a run that ended by raising (or whose consumer gave up)."""
    terminal = Terminal.CANCELLED if isinstance(exc, GeneratorExit) else terminal_of(exc)
    return Outcome(terminal=terminal or Terminal.FAILED, reason=type(exc).__name__)


def _exceeded(outcome: Outcome, deadline: Deadline | None, state: Any) -> DeadlineExceeded:
    """What a graph without deadline fields raises: the outcome, and the partial state."""
    return DeadlineExceeded(
        outcome.reason, deadline=deadline, step=outcome.step, outcome=outcome, state=state
    )


def _final_outcome(run: RunTracker, state: Any) -> Outcome | None:
    """The outcome of a run that returned normally: the one in its state, else completed
    (None while it is paused on an interrupt)."""
    if isinstance(state, Mapping) and isinstance(state.get("deadline_outcome"), Outcome):
        found: Outcome = state["deadline_outcome"]
        return found
    if run.outcome is not None:
        return run.outcome
    if run.interrupted:
        return None
    elapsed = round((run.clock_now() - run.started) * 1000.0, 3)
    return Outcome(terminal=Terminal.COMPLETED, elapsed_ms=elapsed)


def _emit_run(run: RunTracker, outcome: Outcome | None) -> None:
    """Tell the observers how the run ended, once."""
    if outcome is None or run.emitted:
        return
    run.emitted = True
    emit_run(
        RunEvent(
            outcome=outcome,
            run_id=run.run_id,
            started_at=run.started_at,
            deadline_at=run.deadline.timestamp if run.deadline else None,
            reserve_s=run.reserve,
        )
    )


def _deadline_given(input: Any) -> Deadline | None:
    update = input.update if isinstance(input, Command) else input
    if not isinstance(update, Mapping):
        return None
    value = update.get("deadline")
    if isinstance(value, Overwrite):
        value = value.value
    return deadline_from_state({"deadline": value})


def _note(run: RunTracker, chunk: Any, mode: Any) -> None:
    """Keep the latest full state seen in the stream, for a run that must end early."""
    last = chunk[-1] if isinstance(chunk, tuple) and chunk else chunk
    if isinstance(last, dict) and "__interrupt__" in last:
        run.interrupted = True
    if mode == "values":
        if isinstance(chunk, dict) and chunk.get("type") == "values" and "data" in chunk:
            if not chunk.get("ns"):
                run.latest = chunk["data"]
        else:
            run.latest = chunk
    elif isinstance(chunk, tuple):
        if len(chunk) == 2 and chunk[0] == "values":
            run.latest = chunk[1]
        elif len(chunk) == 3 and chunk[1] == "values" and not chunk[0]:
            run.latest = chunk[2]
    elif isinstance(chunk, dict) and chunk.get("type") == "values" and not chunk.get("ns"):
        run.latest = chunk.get("data")


def _outcome_from(run: RunTracker, default_reason: str | None) -> Outcome:
    ended = [r for r in run.records if r.status.ran_out]
    steps = sorted({r.name for r in ended})
    step = ", ".join(steps) if steps else None
    if default_reason is None:
        default_reason = f"{step} ran out of budget" if step else "the deadline passed"
    elapsed = (run.clock_now() - run.started) * 1000.0
    return Outcome(
        terminal=Terminal.DEADLINE_EXCEEDED,
        step=step,
        reason=default_reason,
        elapsed_ms=round(elapsed, 3),
    )


def _last_node(
    records: list[StepRecord], graph: CompiledStateGraph[Any, Any, Any, Any]
) -> str | None:
    for rec in reversed(records):
        if rec.name in graph.builder.nodes:
            return rec.name
    return None


def terminal_of(result: BaseException | Mapping[str, Any] | None) -> Terminal | None:
    """The `Terminal` of a run, from what `invoke` returned or the exception it raised.

    `DeadlineExceeded`, any other `TimeoutError` (LangGraph's `step_timeout`) and LangGraph's
    `NodeTimeoutError` → `DEADLINE_EXCEEDED`; a cancellation → `CANCELLED`; LangGraph's
    recursion limit → `STEP_LIMIT`; any other exception → `FAILED`; a returned state → its
    `deadline_outcome`, or `COMPLETED`. A state paused on an interrupt has not ended: `None`.
    """
    if result is None:
        return Terminal.COMPLETED
    if isinstance(result, DeadlineExceeded):
        return result.outcome.terminal
    if isinstance(result, NodeTimeoutError | TimeoutError):
        return Terminal.DEADLINE_EXCEEDED
    if isinstance(result, asyncio.CancelledError) or type(result).__name__ == "Cancelled":
        return Terminal.CANCELLED
    if isinstance(result, GraphRecursionError):
        return Terminal.STEP_LIMIT
    if isinstance(result, BaseException):
        return Terminal.FAILED
    outcome = result.get("deadline_outcome")
    if isinstance(outcome, Outcome):
        return outcome.terminal
    return None if "__interrupt__" in result else Terminal.COMPLETED
