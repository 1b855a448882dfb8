"""`DeadlineGraph`: a compiled graph whose every run carries one deadline, and says how it ended.

The graph keeps LangGraph's four faces (`invoke`, `ainvoke`, `stream`, `astream`) and their
shared entry (`_start`), which makes each call's `Run` (`run.py`): the run as an object, home to
how a resume finds its deadline, how a run that starts after its deadline ends, and how a run
ends that LangGraph did not finish, with one way of reading and writing its thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Self, cast

import anyio
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.runnables.graph import Graph
from langgraph.errors import GraphDrained
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, Overwrite, StateUpdate

from .._core.cut import Cut
from .._core.errors import DeadlineExceeded
from .._core.plan import RUN_KEY, RunAlarm
from .._core.records import Outcome
from .._core.sync_http import ensure as ensure_http
from .chunks import (
    GraphRun,
    NotedStream,
    deadline_given,
)
from .inputs import (
    a_result,
    ceiling,
    entry_input,
    plain_steps,
    request_limit,
    sets_deadline,
    without_fields,
)
from .node import unwrapped
from .node_cache import deadline_cache
from .retries import ain_run, enter_run, in_run, leave_run
from .run import (
    CANCEL_WRITE_S,
    Run,
    adrive,
    drive,
    origin_of,
    raised,
    saved,
    thread_deadline,
)
from .seams import DRAIN_REASON, check_thread, own_control
from .settings import GraphSettings
from .state import (
    fresh_run_input,
    traced,
)

__all__ = ["DeadlineGraph", "DeadlineRuns"]


_IN_FLIGHT = "the run's deadline passed with steps in flight"
_KEPT = ("_output_mapper", "_state_mapper", "_serde_allowlist")
"""What `StateGraph.compile` sets on a compiled graph after making it: `version="v2"` outputs'
pydantic or dataclass type, and the strict-msgpack allowlist of the state's types."""


class DeadlineRuns(Pregel[Any, Any, Any, Any]):
    """What every `with_deadlines` graph's runs share: one deadline each, and how they end."""

    _lgd_settings: GraphSettings

    def __init__(
        self, *args: Any, _lgd_settings: GraphSettings | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._lgd_settings = GraphSettings() if _lgd_settings is None else _lgd_settings

    @classmethod
    def of(cls, compiled: Pregel[Any, Any, Any, Any], settings: GraphSettings) -> Self:
        """`compiled`, as this class, with `settings`: built from its attributes as LangGraph's
        own `Pregel.copy` (and so `with_config`) does, since LangGraph 1.2 has no seam for the
        class `StateGraph.compile` builds. `tests/graph/test_seams.py` fails if that changes."""
        attrs = {k: v for k, v in vars(compiled).items() if k != "__orig_class__"}
        attrs["_lgd_settings"] = settings
        attrs["cache"] = deadline_cache(compiled.cache)  # our fields stay out of it
        return cls(**attrs)._keep(compiled)

    def copy(self, update: dict[str, Any] | None = None) -> Self:
        """Like `Pregel.copy` (so `with_config`), keeping what `compile` set after the graph
        was made (`_KEPT`), which LangGraph's own copy leaves behind."""
        return super().copy(update)._keep(self)

    def _keep(self, source: Pregel[Any, Any, Any, Any]) -> Self:
        for key in _KEPT:
            if key in vars(source):
                setattr(self, key, vars(source)[key])
        return self

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Graph:
        """LangGraph's drawing of the graph, with each node as the user gave it (not our
        budgeted wrapper around it)."""
        return super(DeadlineRuns, self._as_given()).get_graph(config, xray=xray)

    async def aget_graph(
        self, config: RunnableConfig | None = None, *, xray: int | bool = False
    ) -> Graph:
        return await super(DeadlineRuns, self._as_given()).aget_graph(config, xray=xray)

    def _as_given(self) -> Self:
        drawn = copy.copy(self)
        drawn.nodes = {
            name: node.copy({"bound": unwrapped(node.bound)}) for name, node in self.nodes.items()
        }
        return drawn

    @property
    def deadline_settings(self) -> GraphSettings:
        """The options `with_deadlines` was given (timeout, reserve), and whether the state has
        the deadline fields."""
        return self._lgd_settings

    # -- entry --------------------------------------------------------------------------------

    def _start(self, input: Any, config: RunnableConfig | None) -> tuple[Run, Any]:
        """The run a call starts (or the one our `ainvoke` prepared for its stream), and its
        input as LangGraph gets it."""
        cfg: RunnableConfig = dict(config or {})  # type: ignore[assignment]
        existing = cfg.get("configurable", {}).get(RUN_KEY)
        if isinstance(existing, GraphRun) and existing.entry is self:
            existing.entry = None  # ainvoke prepared this run; astream goes on with it
            return Run(self, self._lgd_settings, existing, cfg), input
        check_thread(self.checkpointer, cfg)
        settings = self._lgd_settings
        # Nothing the caller sends is later than this (a served run's headers included).
        limit = request_limit(cfg.get("configurable", {}), settings.timeout, settings.queue_time)
        input = entry_input(input, limit, fields=settings.has_fields)
        given = None if a_result(input) else deadline_given(input)
        # (a resume's joins the thread's: see `resume`)
        d = limit if given is None else given.earliest(limit)
        if settings.has_fields and isinstance(input, Mapping):  # a new run's input
            empty = (  # no thread, and not run inside another graph (whose thread it would use)
                self.checkpointer is None
                and not cfg.get("configurable", {}).get("checkpoint_ns")
                and var_child_runnable_config.get() is None
            )
            input = fresh_run_input(input, None if d is None else d.timestamp, empty=empty)
        ensure_http()  # (a model call its library runs on a thread: `sync_http.py`)
        run = GraphRun(
            deadline=d, reserve=settings.reserve, resumable=saved(self, cfg), origin=origin_of(cfg)
        )
        run.book = settings.book
        run.trace_at_end = settings.has_fields
        run.keep_partial = (
            settings.partial_answer and settings.closing_message and settings.reserve > 0
        )
        cfg["configurable"] = {**cfg.get("configurable", {}), RUN_KEY: run}
        return Run(self, settings, run, cfg), input

    def _prepared(self, config: RunnableConfig | None) -> GraphRun | None:
        """The run our own `invoke`/`ainvoke` prepared for the stream it reads through
        LangGraph's (None: a caller's stream)."""
        run = (config or {}).get("configurable", {}).get(RUN_KEY)
        return run if isinstance(run, GraphRun) and run.entry is self else None

    def _sent(self, input: Any) -> Any:
        """`input` as LangGraph gets it: without the deadline fields a state lacks (the run
        has read its deadline from them; LangGraph would warn of writes to unknown channels)."""
        return input if self._lgd_settings.has_fields else without_fields(input, self.channels)

    def _resuming(self, input: Any) -> bool:
        """A resume (None or a Command) that does not grant a new deadline (`deadline_input`)."""
        if input is None:
            return True
        if not isinstance(input, Command):
            return False
        update = input.update if isinstance(input.update, Mapping) else {}
        return not isinstance(update.get("deadline"), Overwrite)

    # -- state updates: a `Deadline` in them is stored as plain epoch seconds ------------------

    def bulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        """Like LangGraph's; a deadline in the updates can only bring the thread's forward
        (`deadline_input` grants a new one explicitly), and none is later than `timeout` from
        now (or the deadline in context)."""
        steps = list(supersteps)
        now = thread_deadline(self.get_state(config)) if sets_deadline(steps) else None
        limit = ceiling(self._lgd_settings.timeout)
        return super().bulk_update_state(config, plain_steps(steps, not_after=now, limit=limit))

    async def abulk_update_state(
        self, config: RunnableConfig, supersteps: Sequence[Sequence[StateUpdate]]
    ) -> RunnableConfig:
        steps = list(supersteps)
        now = thread_deadline(await self.aget_state(config)) if sets_deadline(steps) else None
        limit = ceiling(self._lgd_settings.timeout)
        plain = plain_steps(steps, not_after=now, limit=limit)
        return await super().abulk_update_state(config, plain)

    # -- streaming ----------------------------------------------------------------------------

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        prepared = self._prepared(config) is not None
        life, input = self._start(input, config)
        run, cfg = life.tracker, life.cfg
        mode = kwargs.get("stream_mode", self.stream_mode)
        if not prepared and self._resuming(input):
            if (ended := drive(life.resumed())) is not None:
                yield from run.closing(ended, mode, kwargs, news=True)
                return
        elif not prepared and (refused := life.too_late(input)) is not None:
            yield from life.late_chunks(refused, input, **kwargs)
            return
        input = input if prepared else self._sent(drive(life.granted(input)))
        try:
            guarded = self._lgd_settings.guarded_retries
            options = kwargs if prepared else _run_options(kwargs)
            # (LangGraph's stream in no local: closed with ours, it must end, and write its
            # checkpoint, before ours writes the outcome there)
            for chunk in in_run(run, super().stream(input, cfg, **options), guarded=guarded):
                run.note(chunk, mode)
                yield chunk
        except GraphDrained as exc:
            if exc.reason != DRAIN_REASON:
                life.tell(raised(exc))
                raise
            yield from run.closing(drive(life.final_state(None)), mode, kwargs)
            return
        except DeadlineExceeded as exc:
            life.tell(exc.outcome)
            drive(life.keep_deadline())
            run.reraise_with_state(exc)
        except Exception as exc:
            life.tell(raised(exc))
            drive(life.keep_records())
            raise
        except GeneratorExit as exc:  # the caller closed the stream before its end
            left = [raised(exc)]
            if not prepared:
                drive(life.keep_left(left))
            life.tell(left[0])
            raise
        except BaseException as exc:
            life.tell(raised(exc))
            raise
        if run.ran_out_at_the_end():
            yield from run.closing(drive(life.final_state(None)), mode, kwargs)
            return
        drive(life.keep_deadline())
        if not prepared:
            life.tell(done := run.final_outcome(run.latest))
            drive(life.keep_end(done, run.latest))
            yield from run.completed_chunks(self._lgd_settings.has_fields, done, mode, kwargs)

    def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        if (run := self._prepared(config)) is not None:
            # The stream under our `ainvoke` (through LangGraph's), which ends the run itself:
            # only the chunks are noted, by an object rather than one more generator frame.
            run.entry = None  # (its config is the one `ainvoke` made: it goes on as it is)
            mode = kwargs.get("stream_mode", self.stream_mode)
            if mode == ["updates", "values"] and not kwargs.get("subgraphs"):
                # LangGraph's `ainvoke` keeps the last values: the run's nodes give it a reader
                # of the same state, which it reads only when it must end early
                run.select = kwargs.get("output_keys") or self.output_channels
            stream = cast(AsyncGenerator[Any, None], super().astream(input, config, **kwargs))
            return NotedStream(stream, run, mode)
        return self._astream(input, config, **kwargs)

    async def _astream(
        self, input: Any, config: RunnableConfig | None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        life, input = self._start(input, config)
        run, cfg = life.tracker, life.cfg
        mode = kwargs.get("stream_mode", self.stream_mode)
        if self._resuming(input):
            if (ended := await adrive(life.resumed())) is not None:
                for chunk in run.closing(ended, mode, kwargs, news=True):
                    yield chunk
                return
        elif (refused := life.too_late(input)) is not None:
            async for chunk in life.alate_chunks(refused, input, **kwargs):
                yield chunk
            return
        input = self._sent(await adrive(life.granted(input)))
        try:
            guarded = self._lgd_settings.guarded_retries
            options = _run_options(kwargs)
            stream = ain_run(run, super().astream(input, cfg, **options), guarded=guarded)
            async with contextlib.aclosing(stream) as inner:
                async for chunk in inner:
                    run.note(chunk, mode)
                    yield chunk
        except BaseException as exc:
            if (state := await self._aended(life, exc)) is None:
                raise
            for chunk in run.closing(state, mode, kwargs):
                yield chunk
        else:
            if run.ran_out_at_the_end():
                state = await adrive(life.final_state(None))
                for chunk in run.closing(state, mode, kwargs):
                    yield chunk
            else:
                await adrive(life.keep_deadline())
                life.tell(done := run.final_outcome(run.latest))
                await adrive(life.keep_end(done, run.latest))
                has_fields = self._lgd_settings.has_fields
                for chunk in run.completed_chunks(has_fields, done, mode, kwargs):
                    yield chunk
        finally:
            run.close_alarm()

    async def _aended(self, life: Run, exc: BaseException) -> Any:
        """How a run whose LangGraph stream raised `exc` ends: the state it returns, when a step
        that ran out drained it; None when `exc` goes on up, told to the observers (a failed
        run's records kept in its checkpoint). A `DeadlineExceeded` is raised again complete,
        with the run's latest state."""
        run = life.tracker
        if isinstance(exc, GraphDrained):
            if exc.reason == DRAIN_REASON:
                return await adrive(life.final_state(None))
            life.tell(raised(exc))
            return None
        if isinstance(exc, DeadlineExceeded):
            life.tell(exc.outcome)
            await adrive(life.keep_deadline())
            run.reraise_with_state(exc)
        if isinstance(exc, GeneratorExit | anyio.get_cancelled_exc_class()):
            # The consumer gave up (closed the stream, or was cancelled): stop the run's steps,
            # wherever LangGraph runs them, instead of letting them go on to their deadline.
            run.signal.cancel("run_deadline" if run.backstop_fired else "caller")
            if not run.backstop_fired:  # the backstop reports the run itself
                left = [raised(exc)]
                with anyio.move_on_after(CANCEL_WRITE_S, shield=True):
                    await adrive(life.keep_left(left))
                life.tell(left[0])
            return None
        life.tell(raised(exc))
        if isinstance(exc, Exception):
            await adrive(life.keep_records())
        return None

    # -- invoke -------------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        life, input = self._start(input, config)
        run, cfg = life.tracker, life.cfg
        if self._resuming(input):
            ended = drive(life.resumed())
            if ended is not None:
                return ended
        elif (refused := life.too_late(input)) is not None:
            return life.late_result(refused, input)
        input = self._sent(drive(life.granted(input)))
        run.entry = self
        values = super().invoke(input, cfg, **_run_options(kwargs))
        result, done = self._completed(values, life)
        drive(life.keep_end(done, values))
        return result

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Like `CompiledStateGraph.ainvoke`; also cancels the whole run at its deadline."""
        life, input = self._start(input, config)
        run, cfg = life.tracker, life.cfg
        if self._resuming(input):
            ended = await adrive(life.resumed())
            if ended is not None:
                return ended
        elif (refused := life.too_late(input)) is not None:
            return await life.alate_result(refused, input)
        input = self._sent(await adrive(life.granted(input)))
        run.entry = self
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None  # LangGraph runs on asyncio
        backstop = Cut(loop, task)
        if run.deadline is not None:  # one timer: the nodes' end, then the backstop
            then = (run.deadline, GraphRun.backstop, run, backstop)
            run.alarm = RunAlarm(loop, run.steps_end(), run.signal, then)
        token = enter_run(run) if self._lgd_settings.guarded_retries else None
        try:  # the run's end is written outside the backstop: it must not cut that
            try:
                with backstop:
                    result = await super().ainvoke(input, cfg, **_run_options(kwargs))
            finally:
                if token is not None:  # (a graph without retry guards never entered one)
                    leave_run(token)
                run.close_alarm()
        except BaseException as exc:
            if (state := await self._aended(life, exc)) is None:
                raise
            return state
        if backstop.caught:
            run.signal.cancel("run_deadline")  # its steps, wherever LangGraph runs them
            return await adrive(life.final_state(_IN_FLIGHT))
        if run.ran_out_at_the_end(result if run.select is not None else None):
            return await adrive(life.final_state(None))
        returned, done = self._completed(result, life)  # (it notes an interrupt in `result`)
        if run.resumable:  # a thread to keep its deadline (when paused) and its end in
            await adrive(life.keep_deadline())
            await adrive(life.keep_end(done, result))
        return returned

    def _completed(self, result: Any, life: Run) -> tuple[Any, Outcome | None]:
        """What `invoke` returns for a run LangGraph finished, and its outcome when the run
        completed (None when it ended early or is paused: nothing more to write)."""
        run = life.tracker
        if run.final is not None:  # ended early: the state its stream ended with
            return run.final, None
        if isinstance(result, dict) and "__interrupt__" in result:
            run.interrupted = True
        outcome = run.final_outcome(result)
        life.tell(outcome)
        if self._lgd_settings.has_fields and isinstance(result, dict):
            result = {**result, "deadline_trace": traced(result, run.records)}
            if outcome is not None and _completed_or_none(result.get("deadline_outcome")):
                result["deadline_outcome"] = outcome
        return result, outcome


class DeadlineGraph(DeadlineRuns, CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph whose runs each carry one deadline. Made by `with_deadlines`."""


def _completed_or_none(outcome: Any) -> bool:
    """True for no outcome, or a `completed` one (a subgraph's, a remote graph's): the run's
    own `completed` replaces it."""
    return outcome is None or (isinstance(outcome, Outcome) and outcome.ok)


def _run_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's options for a run, with a drain control of the run's own when it runs inside
    another run (`seams.own_control`): its deadline's drain must not stop its caller's run."""
    given = kwargs.get("control")
    control = own_control(given)
    return kwargs if control is given else {**kwargs, "control": control}
