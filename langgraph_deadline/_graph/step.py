"""One budgeted node's run: plan its budget, run its body under it, end it by the one rule."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs

from .._core.context import current_deadline
from .._core.deadline import Deadline
from .._core.plan import Plan, RunTracker, plan_step, run_from_config
from .._core.record import child_records
from .._core.run import StepResult, StepRun, run_sync, settle, unbounded_guard
from .ending import already_ended, finish, finish_unbounded, skipped
from .messages import messages_of
from .seams import PASSTHROUGH, node_attempt
from .settings import NodeSettings
from .state import deadline_from_state
from .streams import (
    PartialAnswer,
    callbacks_in_context,
    streams_let_go,
    streams_stopped,
    watching_streams,
)

__all__ = ["NodeStep"]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeStep:
    """One budgeted node: its name and settings, and the life of each of its runs."""

    name: str
    settings: NodeSettings

    def _plan(
        self,
        config: RunnableConfig,
        run: RunTracker | None,
        deadline: Deadline | None,
        *,
        sync: bool,
        started: float | None = None,
    ) -> Plan:
        return plan_step(
            self.name,
            "node",
            cap=self.settings.cap,
            min_viable=self.settings.min_viable,
            reserve=self.settings.reserve,
            deadline=deadline,
            attempt=node_attempt(config),
            run=run,
            sync=sync,
            started=started,
            idle_cap=self.settings.idle_cap,
        )

    def _bounded(self, state: Any, run: RunTracker | None) -> tuple[bool, Deadline | None]:
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
        run = run_from_config(config)
        bounded, deadline = self._bounded(state, run)
        if not bounded:
            return self._call_unbounded(state, config, body, run, finished)
        plan = self._plan(config, run, deadline, sync=True)
        if plan.skip:
            return skipped(plan, state, run)
        said = listening(state, run, finished)
        if said is not None:
            config = merge_configs(config, {"callbacks": [said]})

        def guarded() -> Any:  # on a worker thread, in a copy of this context
            streams_stopped()  # its model streams end at the budget: the thread runs on
            with callbacks_in_context(said), watching_streams(plan.idle is not None):
                return body(config)

        with child_records(plan.link) as children:
            result = run_sync(plan, guarded, run=run, passthrough=PASSTHROUGH)
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
        run = run_from_config(config)
        bounded, deadline = self._bounded(state, run)
        if not bounded:
            return await self._acall_unbounded(state, config, body, run, finished, on_thread)
        plan = self._plan(config, run, deadline, sync=on_thread)
        if plan.skip:
            return skipped(plan, state, run)
        said = said or listening(state, run, finished)
        stopped = streams_stopped()  # its model streams end at the cut, on a thread too
        try:
            with (
                child_records(plan.link) as children,
                StepRun(plan, run, passthrough=PASSTHROUGH) as step,
                callbacks_in_context(said),
                watching_streams(plan.idle is not None),  # its models' chunks are progress
            ):
                step.value = await body()  # in this coroutine: one frame fewer than run_async's
        finally:
            streams_let_go(stopped)
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
        run: RunTracker | None,
        finished: Mapping[str, ToolMessage] | None,
        on_thread: bool,
    ) -> Any:
        started = time.monotonic()
        with child_records() as children:
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
        run: RunTracker | None,
        finished: Mapping[str, ToolMessage] | None,
    ) -> Any:
        started = time.monotonic()
        with child_records() as children:
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
        run: RunTracker | None,
        started: float,
        sync: bool,
    ) -> tuple[Plan, StepResult[Any]] | None:
        """An unbounded node that did not complete: planned now, dated from `started`, and
        recorded by the one rule (`settle`). None: `exc` goes on up."""
        plan = self._plan(config, run, None, sync=sync, started=started)
        result = settle(exc, plan, run, passthrough=PASSTHROUGH)
        return None if result is None else (plan, result)


def listening(
    state: Any, run: RunTracker | None, finished: Mapping[str, ToolMessage] | None
) -> PartialAnswer | None:
    """A collector of the text a node streams, for a node that may answer the user (a messages
    state, no tool calls to answer) in a run whose closing reply keeps a cut answer."""
    if run is None or not run.keep_partial or finished is not None:
        return None
    return PartialAnswer() if messages_of(state) is not None else None


def kept(said: PartialAnswer | None, result: StepResult[Any], run: RunTracker | None) -> None:
    """A node cut mid-answer: what it had said goes to the closing reply."""
    if said is not None and run is not None and result.status.cut and said.text:
        run.partial = said.text
