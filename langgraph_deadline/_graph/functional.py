"""The Functional API under one deadline: an `@entrypoint` whose every run carries one deadline,
the entrypoint itself and each `@task` call a budgeted step.

An entrypoint is a one-node `Pregel`. `DeadlineEntrypoint` runs it as `DeadlineGraph` runs a
state graph (the same entry, resume and ending, `DeadlineRuns`), with what differs for a run that
returns a value rather than a state: the deadline is never read from the input (the entrypoint's
argument is the user's), and a run that ends early always raises `DeadlineExceeded`.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command

from .._core.rules import StepRule, Timings
from .._core.validate import check_caps_fit, check_fits, check_limit, check_viable, floor_of
from .chunks import graph_run
from .following import PastFollowers, past_followers
from .graph import DeadlineRuns
from .inputs import without_fields
from .node import NodeStep
from .run import Run
from .seams import PREVIOUS, runs_on_a_thread, scheduling_with
from .settings import GraphSettings, NodeSettings
from .tasks import TaskBudgets, akept, kept

__all__ = ["DeadlineEntrypoint", "is_entrypoint", "wrap_entrypoint"]


def is_entrypoint(graph: object) -> bool:
    """True for what `@entrypoint` makes: a one-node `Pregel` that keeps a `previous` value."""
    return (
        isinstance(graph, Pregel)
        and len(graph.nodes) == 1
        and PREVIOUS in graph.channels
        and not hasattr(graph, "builder")
    )


class _EntrypointPregel(Pregel[Any, Any, Any, Any]):
    """LangGraph's own runs of an entrypoint, given a grant (`Command(update=deadline_input(s))`)
    without its deadline keys: an entrypoint has no state field to write them to."""

    def stream(self, input: Any, config: RunnableConfig | None = None, **kw: Any) -> Iterator[Any]:
        return super().stream(_without_grant(input), config, **kw)

    def astream(
        self, input: Any, config: RunnableConfig | None = None, **kw: Any
    ) -> AsyncIterator[Any]:
        return super().astream(_without_grant(input), config, **kw)


class DeadlineEntrypoint(DeadlineRuns, _EntrypointPregel):
    """An `@entrypoint` whose runs each carry one deadline. Made by `with_deadlines`."""

    def _start(self, input: Any, config: RunnableConfig | None) -> tuple[Run, Any]:
        # The entrypoint's argument is the user's: only a grant (a Command) may bring a deadline.
        stand_in: Any = input if input is None or isinstance(input, Command) else {}
        life, plain = super()._start(stand_in, config)
        # No state carries the outcome: a step that runs out always ends the run by LangGraph's
        # drain, which the entry turns into `DeadlineExceeded` (checkpointed or not).
        life.tracker.resumable = True
        return life, plain if stand_in is input else input

    def _sent(self, input: Any) -> Any:
        return _without_grant(input)


def _without_grant(input: Any) -> Any:
    """A grant (a `Command`) without its deadline keys; any other input is the user's value."""
    return without_fields(input, ()) if isinstance(input, Command) else input


class _EntryStep(Runnable[Any, Any]):
    """The entrypoint's body as a budgeted step, its task calls budgeted (`TaskBudgets`)."""

    def __init__(self, bound: Runnable[Any, Any], step: NodeStep, tasks: TaskBudgets) -> None:
        self.name = bound.get_name()
        self._bound = bound
        self.lgd_given = bound  # what get_graph() draws
        self._step = step
        self._tasks = tasks
        self._on_thread = runs_on_a_thread(bound)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        bound = self._bound
        with scheduling_with(config or {}, self._tasks.scheduler) as cfg:
            try:
                value = self._step.call(None, cfg, lambda c: kept(bound.invoke, (input, c), {}))
            finally:
                self._learn(cfg)
        if isinstance(value, tuple):  # the body returned: every task it meant to call was called
            self._tasks.check_names(self._step.name)
        return value[0]

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        with scheduling_with(config or {}, self._tasks.scheduler) as cfg:
            body = functools.partial(akept, self._bound.ainvoke, (input, cfg), {})
            try:
                value = await self._step.acall(None, cfg, body, on_thread=self._on_thread)
            finally:
                self._learn(cfg)
        if isinstance(value, tuple):  # the body returned: every task it meant to call was called
            self._tasks.check_names(self._step.name)
        return value[0]

    def _learn(self, config: RunnableConfig) -> None:
        """What followed each task in this run (its records so far), for the next runs."""
        run = graph_run(config)
        if run is not None:
            self._tasks.learn(run.records)


def wrap_entrypoint(
    graph: Pregel[Any, Any, Any, Any],
    *,
    timeout: float | None,
    caps: Mapping[str, float | StepRule | None],
    min_viable: Mapping[str, float | StepRule],
    reserve: float,
    default_cap: float | None,
    checkpointer: Any,
    store: Any,
    queue_time: float | None = None,
    book: Timings | None = None,
) -> DeadlineEntrypoint:
    """`with_deadlines` for an entrypoint (checked options): its node budgeted as the entrypoint
    step (cap and `min_viable` under its own name; `default_cap` is the tasks'), its tasks by
    name; with a latency `book` (None: the keep-back is off), each task keeps back the time of
    what followed it in past runs, and the runs carry the book (a model's learned rate)."""
    for table in (caps, min_viable):  # task names: LangGraph knows them only once called
        for key in table:
            if not isinstance(key, str):
                raise TypeError(f"caps and min_viable are keyed by task name, got {key!r}")
    caps = {k: check_limit(v, f"caps[{k!r}]") for k, v in caps.items()}
    min_viable = {k: check_viable(v, f"min_viable[{k!r}]") for k, v in min_viable.items()}
    needs = {f"min_viable[{k!r}]": floor_of(v) for k, v in min_viable.items()}
    check_fits(timeout, reserve=reserve, needs=needs)
    [(name, node)] = graph.nodes.items()
    check_caps_fit(caps, min_viable, default_cap=default_cap, own_cap=name)
    retry = graph.retry_policy or None  # the entrypoint's, and its tasks' without their own
    tasks = TaskBudgets(
        caps=caps,
        min_viable=min_viable,
        default_cap=default_cap,
        retry=retry,
        book=book,
        floors={k: floor_of(v) for k, v in min_viable.items()},
        past=PastFollowers() if book is None else past_followers(book, name),
    )
    mine = NodeSettings(cap=caps.get(name), min_viable=min_viable.get(name, 0.0), retry=retry)
    step = NodeStep(name, mine)
    bound = node.bound._bound if isinstance(node.bound, _EntryStep) else node.bound  # rewrapped
    update: dict[str, Any] = {"nodes": {name: node.copy({"bound": _EntryStep(bound, step, tasks)})}}
    if checkpointer is not None:
        update["checkpointer"] = checkpointer
    if store is not None:
        update["store"] = store
    settings = GraphSettings(
        timeout=timeout,
        reserve=reserve,
        has_fields=False,
        closing_message=False,
        has_state=False,
        queue_time=queue_time,
        book=book,
    )
    return DeadlineEntrypoint.of(graph.copy(update), settings)
