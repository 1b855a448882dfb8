"""The Functional API's tasks as budgeted steps: each `@task` call an entrypoint (or a task) makes
runs its body under `min(the task's cap, what is left - reserve)`, by the node step's rule.

LangGraph schedules a task call through the scheduler in the caller's config (`seams.py`); the
entrypoint's step hands its body a scheduler that wraps the task's body first, keeping the
task's name and identifier, so that task ids, a resume's saved results and caches are LangGraph's
own. A task cut at its own cap raises `DeadlineExceeded` to the code that awaits it, which
decides: caught, the run goes on; not caught, it ends the run. A task that runs out of the run's
time ends the run as a node that runs out does: it is recorded, it is not saved as finished (a
resume that grants time runs it again), and the run drains.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from langgraph.config import get_config

from .._core.records import StepRecord, StepStatus
from .._core.rules import StepRule, Timings
from .following import PastFollowers
from .node import NodeStep
from .seams import as_task, is_async_task, scheduling_with, task_name
from .settings import NodeSettings

__all__ = ["TaskBudgets", "kept", "akept"]


@dataclasses.dataclass(frozen=True, slots=True)
class TaskBudgets:
    """How an entrypoint's tasks are budgeted: a cap and a `min_viable` per task name, and the
    cap of the tasks not named; a task's retries as LangGraph's (its own policy, else the
    entrypoint's). With a latency `book`, each task keeps back the time of the tasks that
    followed it in past runs (`past`, learned from each run's records: `learn`), at their
    learned high quantile (their `min_viable` while the book is cold: `floors`)."""

    caps: Mapping[str, float | StepRule | None]
    min_viable: Mapping[str, float | StepRule]
    default_cap: float | None = None
    retry: Any = None  # the entrypoint's RetryPolicy: LangGraph's for tasks without their own
    called: _Called = dataclasses.field(default_factory=lambda: _Called(set()))
    book: Timings | None = None
    floors: Mapping[str, float] = dataclasses.field(default_factory=dict)
    past: PastFollowers = dataclasses.field(default_factory=PastFollowers)

    def scheduler(self, schedule: Callable[..., Any]) -> Callable[..., Any]:
        """LangGraph's task scheduler, scheduling each task with its body budgeted."""

        def budgeted_schedule(func: Callable[..., Any], input: Any, *args: Any, **kw: Any) -> Any:
            return schedule(self.body(func, kw.get("retry_policy")), input, *args, **kw)

        return budgeted_schedule

    def body(self, func: Callable[..., Any], retry: Any) -> Callable[..., Any]:
        """`func`, a task's body, as a budgeted step. Made for each call: LangGraph builds the
        task's runnable for each call of a body it cannot find in its module (as this one), and
        a wrapper kept per body would keep every task ever called (tasks made per run too)."""
        name = task_name(func)
        self.called.names.add(name)
        cap = self.caps.get(name, self.default_cap)
        if self.book is not None:
            cap = self.past.cap(name, cap, self.book, dict(self.floors))
        settings = NodeSettings(
            cap=cap,
            min_viable=self.min_viable.get(name, 0.0),
            retry=retry or self.retry,  # a retry that cannot fit is not waited for
            optional=True,  # cut at its cap: `DeadlineExceeded` to its caller, who decides
        )
        return _budgeted(func, NodeStep(name, settings), self)

    def learn(self, records: Iterable[StepRecord]) -> None:
        """What followed each task in one run, from its records (with a book only)."""
        if self.book is None:
            return
        names = self.called.names
        self.past.learn(
            (r.name, r.started_at, r.started_at + r.elapsed_ms / 1000.0)
            for r in records
            if r.kind == "node"
            and r.name in names
            and r.started_at is not None
            and r.status is not StepStatus.SKIPPED
        )

    def check_names(self, entrypoint: str) -> None:
        """Warn, once, of names in `caps` or `min_viable` that are neither the entrypoint nor a
        task called by the run that just finished (a typo leaves the task it meant on the
        defaults): LangGraph knows an entrypoint's tasks only once they are called."""
        called = self.called
        if called.told:
            return
        called.told = True
        known = called.names | {entrypoint}
        for label, table in (("caps", self.caps), ("min_viable", self.min_viable)):
            unknown = sorted(set(table) - known)
            if unknown:
                warnings.warn(
                    f"with_deadlines({label}=...) names {unknown}, which no task of the "
                    f"entrypoint's first run was called (tasks called: {sorted(called.names)}; "
                    f"the entrypoint is {entrypoint!r}): a typo?",
                    UserWarning,
                    stacklevel=2,
                )


@dataclasses.dataclass(slots=True)
class _Called:
    """The task names an entrypoint's runs called, and whether its settings were checked."""

    names: set[str]
    told: bool = False


def _budgeted(func: Callable[..., Any], step: NodeStep, tasks: TaskBudgets) -> Callable[..., Any]:
    wrapper: Callable[..., Any]
    if is_async_task(func):

        async def budgeted_task(*args: Any, **kwargs: Any) -> Any:
            with scheduling_with(get_config(), tasks.scheduler) as config:
                body = functools.partial(akept, func, args, kwargs)
                return (await step.acall(None, config, body))[0]

        wrapper = budgeted_task
    else:

        def budgeted_task_sync(*args: Any, **kwargs: Any) -> Any:
            with scheduling_with(get_config(), tasks.scheduler) as config:
                # The body's thread runs in a copy of this context: with the config set above.
                return step.call(None, config, lambda _: kept(func, args, kwargs))[0]

        wrapper = budgeted_task_sync
    as_task(wrapper, func)
    return wrapper


def kept(func: Callable[..., Any], args: Any, kwargs: Mapping[str, Any]) -> tuple[Any]:
    """`func(*args, **kwargs)`, its value boxed: a step's value is the user's, never read as a
    state update (`ending.finish` reads a node's)."""
    return (func(*args, **kwargs),)


async def akept(
    func: Callable[..., Awaitable[Any]], args: Any, kwargs: Mapping[str, Any]
) -> tuple[Any]:
    """`await func(*args, **kwargs)`, its value boxed (see `kept`)."""
    return (await func(*args, **kwargs),)
