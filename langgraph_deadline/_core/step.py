"""A step, as one facade: its guard (the deadline in context, its cancellation at its budget, by
the run's one timer or by the cancel signal, entered and left as one block around its body), its
run (async: cancelled at its budget; sync: abandoned at it, as a thread cannot be killed), and its
record (the run's records, the enclosing node's trace, the observers).

The arithmetic (`plan.py`) and the cancellation live here once, for nodes, tools, model calls and
HTTP requests alike. Exceptions a framework uses for control flow (LangGraph's interrupts) are
passed through untouched: the framework's layer names them once (`let_through`).

The guard is a context manager rather than a coroutine wrapped around the body: every node, tool,
model call and HTTP request opens one, and one coroutine more per step is one frame more kept
alive while the step runs. On asyncio the cancellation is a `Cut`; off asyncio (trio) an anyio
cancel scope.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Final, Generic, NamedTuple, NoReturn, Self, TypeVar

import anyio

from .context import (
    CancelSignal,
    current_scopes,
    current_signal,
    pop_step,
    push_step,
    step_scope,
    tools_until,
)
from .cut import Cut
from .deadline import Deadline
from .errors import DeadlineExceeded, ScopeFrame, Stalled
from .observe import emit_step
from .plan import PARENT, Plan, RunAlarm, RunTracker
from .records import STALLED, StepRecord, StepStatus
from .stall import StallWatch, current_watch, finite, stalled_note, unwatch, watching
from .sync_http import ensure as _ensure_http
from .workers import Job
from .workers import submit as _submit

__all__ = [
    "Amend",
    "StepGuard",
    "StepResult",
    "StepRun",
    "child_records",
    "commit_record",
    "cut_inside",
    "ends_its_run",
    "let_through",
    "named_run",
    "record_child",
    "refused",
    "run_async",
    "run_sync",
    "settle",
    "unbounded_guard",
    "watch_of",
]


# -- where a step's record goes ----------


def commit_record(record: StepRecord, run: RunTracker | None, key: int | None = None) -> None:
    """The one place a step record is kept: the run's records, the enclosing node's children
    (for the trace in state), and the observers."""
    sink = _CHILDREN.get() if record.kind != "node" else None
    if run is None and sink is not None:
        run = sink.run  # a call inside a node that did not name the run (a middleware's)
    if run is not None:
        if key is not None:
            if not run.close(key, record):
                return
        else:
            run.records.append(record)
    if sink is not None:
        sink.append(record)
    if run is not None:
        emit_step(record, run.run_id, run.deadline.timestamp if run.deadline else None)
    else:
        emit_step(record, *(_NAMED.get() or (None, None)))


_NAMED: Final[ContextVar[tuple[str, float | None] | None]] = ContextVar(
    "langgraph_deadline.named_run", default=None
)


@contextmanager
def named_run(run_id: str, deadline_at: float | None) -> Iterator[None]:
    """The steps recorded in the block belong to run `run_id` (deadline `deadline_at`, epoch
    seconds) in their events: for a run kept without a tracker (`DeadlineMiddleware` alone),
    so that the observers, and the report, group its steps with its run's end."""
    token = _NAMED.set((run_id, deadline_at))
    try:
        yield
    finally:
        _NAMED.reset(token)


class _Sink(list[StepRecord]):
    """The records of the steps inside a node, the node's run (None outside one), and the
    name of a step inside that ends the run by itself when cut (`ends_its_run`)."""

    __slots__ = ("ender", "run")

    def __init__(self, run: RunTracker | None) -> None:
        super().__init__()
        self.run = run
        self.ender: str | None = None


def ends_its_run(name: str) -> None:
    """The step `name`, about to run inside a node, ends its run itself when the run's time
    runs out in it (the agent middleware's model call closes the agent in words). Its cut is
    due a hand-off before the node's; on a busy loop both are due at once and the node's may be
    handled first: the node then still names this step (`cut_inside`)."""
    sink = _CHILDREN.get()
    if sink is not None:
        sink.ender = name


def cut_inside(children: Sequence[StepRecord]) -> StepRecord | None:
    """The last step inside a node, when it was cut by the run's deadline and ends its run
    itself (`ends_its_run`): where the run ran out, whichever cut was handled first."""
    if not isinstance(children, _Sink) or children.ender is None or not children:
        return None
    last = children[-1]
    if last.name != children.ender or last.cancel_source != "run_deadline":
        return None
    return last if last.status.cut else None


_CHILDREN: Final[ContextVar[_Sink | None]] = ContextVar("langgraph_deadline.children", default=None)


class child_records:
    """Collect the records of the steps (tools, model calls, HTTP) run inside a node, so the
    node can add them to the run's trace in state along with its own. Given the node's
    `link` (`parent`), the steps planned inside name it as their `parent`; given its `run`, a
    step recorded inside without one (a middleware's model or tool call) joins that run's
    records and events."""

    __slots__ = ("_parent", "_parent_token", "_run", "_token", "sink")

    def __init__(self, parent: str | None = None, run: RunTracker | None = None) -> None:
        self._parent = parent
        self._run = run

    def __enter__(self) -> list[StepRecord]:
        run = self._run
        if run is None and (outer := _CHILDREN.get()) is not None:
            run = outer.run  # a block inside a node's (a middleware's tool call)
        self.sink = _Sink(run)
        self._token = _CHILDREN.set(self.sink)
        self._parent_token = None if self._parent is None else PARENT.set(self._parent)
        return self.sink

    def __exit__(self, *exc: object) -> None:
        if self._parent_token is not None:
            PARENT.reset(self._parent_token)
        _CHILDREN.reset(self._token)


def record_child(record: StepRecord, run: RunTracker | None) -> None:
    """Record a step that did not run through `run_async`/`run_sync` (a skipped or stale one)."""
    commit_record(record, run)


# -- a step's guard ----------


class StepGuard:
    """Run the block with `deadline` in context, cancelled at that deadline and by the parent's
    "stop" (the cancel signal, Go's ctx.Done()), which reaches the step even in a task LangGraph
    made. A cancellation of its own leaves the block as `DeadlineExceeded` (or, when the signal
    caused it, as the caller's cancellation); any other passes through. A step that ends when
    the run's nodes end joins the run's one timer for that instant instead of arming its own."""

    __slots__ = (
        "_cut",
        "_deadline",
        "_inside",
        "_name",
        "_run",
        "_scope",
        "_signal",
        "_token",
        "_watch",
        "_watch_token",
    )

    def __init__(
        self,
        deadline: Deadline | None,
        name: str,
        signal: CancelSignal | None,
        run: RunTracker | None = None,
        inside: Deadline | None = None,
        watch: StallWatch | None = None,
    ) -> None:
        self._deadline = deadline
        self._inside = inside  # the deadline the block's own steps see, when earlier
        self._name = name
        self._signal = signal
        self._run = run
        self._cut: Cut | None = None
        self._token: Token[tuple[ScopeFrame, ...]] | None = None
        self._scope: tuple[AbstractContextManager[object], anyio.CancelScope] | None = None
        self._watch = watch  # its idle cap's watch (`stall.py`), when it has one
        self._watch_token: Token[StallWatch | None] | None = None

    def __enter__(self) -> Self:
        deadline, signal, watch = self._deadline, self._signal, self._watch
        if watch is not None:
            self._watch_token = watching(watch)
        if deadline is None and signal is None and watch is None:
            return self
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): an anyio scope does the same job
            return self._enter_anyio()
        task = asyncio.current_task(loop)
        if task is None:
            return self._enter_anyio()
        cut = self._cut = Cut(loop, task)
        if deadline is not None:
            alarm = _run_alarm(self._run, deadline, loop, signal)
            if alarm is None:
                cut.arm(deadline)
            else:
                if alarm.fired:
                    cut.cancel()
                cut.joined = True  # registered with the run's signal below: the alarm finds it
            self._token = push_step(self._inside or deadline, self._name)
        if signal is not None:
            signal.register(cut)
        if watch is not None:
            watch.start(loop, cut.cancel)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._watch_token is not None:
            unwatch(self._watch_token)
            self._watch_token = None
            assert self._watch is not None
            self._watch.stop()
        cut = self._cut
        if cut is None:
            return self._exit_anyio(exc_type, exc, tb) if self._scope is not None else False
        cut.__exit__(exc_type, exc, tb)
        if self._signal is not None:
            self._signal.unregister(cut)
        caught = cut.caught or (cut.fired and _timed_out(exc))
        chain = current_scopes() if caught else ()
        if self._token is not None:
            pop_step(self._token)
        if caught:  # the cut caught its own cancellation: which of the two was it?
            self._caught(chain)
        return False

    def _enter_anyio(self) -> Self:
        scope = anyio.CancelScope()
        if self._deadline is not None:
            scope.deadline = anyio.current_time() + self._deadline.remaining()
        if self._signal is not None:
            self._signal.register(scope)
        context = step_scope(self._inside or self._deadline, name=self._name)  # in context only
        context.__enter__()
        scope.__enter__()
        self._scope = (context, scope)
        return self

    def _exit_anyio(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._scope is not None
        context, scope = self._scope
        chain = current_scopes()
        try:
            caught = scope.__exit__(exc_type, exc, tb)
        finally:
            context.__exit__(None, None, None)
            if self._signal is not None:
                self._signal.unregister(scope)
        if caught or (scope.cancel_called and _timed_out(exc)):
            self._caught(chain)
        return False

    def _caught(self, chain: tuple[ScopeFrame, ...]) -> NoReturn:
        deadline, signal, name = self._deadline, self._signal, self._name
        watch = self._watch
        if watch is not None and watch.fired and not (signal is not None and signal.cancelled):
            raise Stalled(f"{name} stalled: {stalled_note(watch.gap)}", gap=watch.gap, step=name)
        if (
            signal is not None
            and signal.cancelled
            and not (deadline is not None and deadline.expired)
        ):
            raise anyio.get_cancelled_exc_class()("cancelled by the caller") from None
        raise DeadlineExceeded(
            f"deadline exceeded in {name}", deadline=deadline, step=name, scopes=chain
        ) from None


def _timed_out(exc: BaseException | None) -> bool:
    """True for a library's own timeout (a `TimeoutError`, or an error raised from one:
    httpx's `ReadTimeout`, openai's `APITimeoutError`), not a deadline of ours. Out of a body
    whose cut has fired, it is the cut: the hooks set a request's timeouts to the step's time
    left, so when a pause of the process (a collector pass, a loaded machine) makes both due in
    one turn of the loop, the library's may be the one that lands."""
    if exc is None or isinstance(exc, DeadlineExceeded):
        return False
    for _ in range(8):  # (a chain of causes is short; a cycle in it must not loop for ever)
        if isinstance(exc, TimeoutError):
            return True
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            return False
        exc = nxt
    return False


def _run_alarm(
    run: RunTracker | None,
    deadline: Deadline,
    loop: asyncio.AbstractEventLoop,
    signal: CancelSignal | None,
) -> RunAlarm | None:
    """The run's one timer, when this step ends at the instant the run's nodes end at (see
    `RunTracker.steps_end`) and answers the run's signal: armed by the first such step (or by
    `ainvoke`). None: the step arms its own."""
    if run is None or run.step_end is None or deadline is not run.step_end[1]:
        return None
    if signal is not run.signal:
        return None
    if run.alarm is None:
        run.alarm = RunAlarm(loop, deadline, run.signal)
    return run.alarm if run.alarm.loop is loop else None  # a run on two loops: its own timer


# -- a step's run ----------

T = TypeVar("T")


class StepResult(NamedTuple, Generic[T]):
    """How a step ran: its record, and its value or error (exactly one when completed/failed)."""

    record: StepRecord
    value: T | None = None
    error: BaseException | None = None

    @property
    def status(self) -> StepStatus:
        return self.record.status


Amend = Callable[[StepResult[Any]], StepResult[Any]]
"""What a step that records its own result adds to its record (`run_async(amend=)`)."""


async def run_async(
    plan: Plan,
    body: Callable[[], Awaitable[T]],
    *,
    run: RunTracker | None = None,
    commit: bool = True,
    amend: Amend | None = None,
) -> StepResult[T]:
    """Run an async step under its budget; a cut step is cancelled (its I/O closes), and one
    whose budget is below what it needs is not started (`refused`).

    A plan made with `sync=True` marks a body that waits on a thread (a sync function run in an
    executor): cutting it stops the waiting, not the thread, so it is recorded as `abandoned`.
    Caller cancellation is recorded as `cancelled` and re-raised; the step's own errors are
    returned, never rewritten. `commit=False` leaves recording the result to the caller
    (`record_child`), for steps that decide their final status afterwards (a stale answer);
    such a caller gives `amend`, what it adds to its record (attempts, copies): a cancellation
    goes up through it, and never returns the result, so the record is made here with `amend`
    applied. Without `amend`, `commit=False` steps are recorded by someone else.
    """
    if plan.skip:
        return refused(plan, run, commit=commit)
    with StepRun(plan, run, commit=commit, amend=amend) as step:
        step.value = await body()
    return step.result


def refused(plan: Plan, run: RunTracker | None = None, *, commit: bool = True) -> StepResult[Any]:
    """A step not started: what it has left is below what it needs (`Plan.skip`). Recorded
    `skipped` (by the caller when not `commit`); its face answers it as it answers a cut, since
    both ran out of time (`StepStatus.ran_out`)."""
    result = StepResult[Any](plan.record(StepStatus.SKIPPED))
    if commit:
        commit_record(result.record, run)
    return result


class StepRun(StepGuard):
    """`run_async` as a block, for a caller that is a coroutine already (a node): the step's
    guard, and on leaving it the step's result (`result`), recorded. Set `value` to what the
    body returned; an exception that ends the step is kept in `result`, any other goes on."""

    __slots__ = (
        "_amend",
        "_commit",
        "_key",
        "_plan",
        "_result",
        "_tools",
        "value",
    )

    def __init__(
        self,
        plan: Plan,
        run: RunTracker | None,
        *,
        commit: bool = True,
        amend: Amend | None = None,
    ) -> None:
        signal = run.signal if run is not None else current_signal()
        watch = watch_of(plan)
        super().__init__(plan.step_deadline(), plan.name, signal, run, plan.inside, watch)
        self._plan = plan
        self._commit = commit
        self._amend = amend
        self._key = id(plan)
        self._result: StepResult[Any] | None = None
        self._tools: Token[Deadline | None] | None = None
        self.value: Any = None

    def __enter__(self) -> Self:
        plan = self._plan
        if self._run is not None:
            self._run.in_flight[self._key] = plan
        super().__enter__()
        if plan.for_tools is not None:
            self._tools = tools_until(plan.for_tools)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._tools is not None:
            self._tools.var.reset(self._tools)
        try:
            super().__exit__(exc_type, exc, tb)
        except BaseException as own:  # the guard's cut, as `DeadlineExceeded` or the caller's
            if self._ended(own):
                # Kept in the result: without the frames it was raised through (ours, which hold
                # this block, which holds the result) nor the cancellation it replaced (whose
                # frames hold the body's), so that reference counting frees a cut step.
                own.__traceback__ = own.__context__ = None
                return True
            raise
        if exc is None:
            gap = None if self._watch is None else self._watch.close(cut=False)
            done = StepResult(self._plan.record(StepStatus.COMPLETED, gap=gap), value=self.value)
            self._result = _finish(self._run, self._key, self._commit, done)
            return False
        return self._ended(exc)

    def _ended(self, exc: BaseException) -> bool:
        plan, run, key = self._plan, self._run, self._key
        gap = None if self._watch is None else self._watch.close(cut=True)
        self._result = settle(
            exc,
            plan,
            run,
            commit=self._commit,
            key=key,
            gap=gap,
            amend=self._amend,
        )
        return self._result is not None

    @property
    def result(self) -> StepResult[Any]:
        """How the step ended (once the block is left without an exception)."""
        assert self._result is not None
        return self._result


def watch_of(plan: Plan) -> StallWatch | None:
    """The watch of a step with an idle cap (None: it has none): a node's gap clock runs from
    its start, a stream's from its first progress."""
    if plan.idle is None:
        return None
    return StallWatch(finite(plan.idle), armed=plan.kind == "node", parent=current_watch())


def unbounded_guard(name: str, run: RunTracker | None) -> StepGuard:
    """The guard of a step that nothing bounds (no deadline in force, no cap): no timer, only
    the cancel signal, for when the caller gives up. `settle` records the step if it does not
    complete; nothing else does."""
    return StepGuard(None, name, run.signal if run is not None else current_signal(), run)


_control_flow: tuple[type[BaseException], ...] = ()


def let_through(kind: type[BaseException]) -> None:
    """Make `kind` a framework's control flow, which every step lets go up untouched, recorded
    as nothing of its own (LangGraph's `GraphBubbleUp`: an interrupt, a `Command` to a parent
    graph, a drain). The core does not know the frameworks: their layer names theirs once, at
    import (`_graph/seams.py`), rather than every face handing it to every step."""
    global _control_flow
    if kind not in _control_flow:
        _control_flow = (*_control_flow, kind)


def settle(
    exc: BaseException,
    plan: Plan,
    run: RunTracker | None,
    *,
    commit: bool = True,
    key: int | None = None,
    gap: float | None = None,
    amend: Amend | None = None,
) -> StepResult[Any] | None:
    """How a step that raised `exc` ended, recorded. None: `exc` goes on up (the framework's
    control flow, a cancellation, a `BaseException`), recorded when it ends the step. A
    `DeadlineExceeded` past the step's own deadline is a cut; with time left, the step failed,
    unless it was cut at its idle cap (`Stalled`: `cancel_source="stalled"`). `gap`: the
    longest gap with no progress it showed (its record's `gap_ms`)."""
    key = id(plan) if key is None else key
    step_deadline = plan.step_deadline()
    if isinstance(exc, Stalled) and exc.step == plan.name:
        status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
        rec = plan.record(status, cancel_source=STALLED, note=stalled_note(exc.gap), gap=gap)
        return _finish(run, key, commit, StepResult(rec, error=exc))
    if isinstance(exc, DeadlineExceeded):
        if step_deadline is None or not step_deadline.expired:
            # Raised below this step (a shorter inner scope, a client) with time left: it failed.
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
        source = plan.cut_source
        return _finish(
            run, key, commit, StepResult(plan.record(status, cancel_source=source), error=exc)
        )
    if isinstance(exc, _control_flow):
        # Control flow on its way to the framework (LangGraph's interrupt or drain): not an end
        # of this step's budget.
        if run is not None:
            run.in_flight.pop(key, None)
        return None
    if isinstance(exc, Exception):
        return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
    if _is_cancellation(exc):
        late = plan.deadline is not None and plan.deadline.expired
        if (run is not None and run.backstop_fired) or late:
            # Cancelled because the run's time was up (by the backstop, or by an enclosing
            # scope that fired at the same deadline): a timeout, not the caller giving up.
            status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
            rec = plan.record(status, cancel_source="run_deadline")
        elif step_deadline is not None and step_deadline.expired:
            # Past its own budget, and the enclosing step's cut reached it first (its own was
            # still closing its I/O): cut at its budget all the same.
            status = StepStatus.ABANDONED if plan.sync else StepStatus.TIMED_OUT
            source = plan.cut_source
            rec = plan.record(status, cancel_source=source)
        else:
            rec = plan.record(StepStatus.CANCELLED, cancel_source="caller")
        # A caller that records its own result (`commit=False` with its `amend`) never gets
        # it: the cancellation goes on up through it. Recorded here, with what it would have
        # added. (`commit=False` without `amend`: a step another records, as the agent
        # middleware's wrapper of a `deadline_tool`, which records itself.)
        ended = StepResult[Any](rec)
        if not commit and amend is not None:
            commit, ended = True, amend(ended)
        _finish(run, key, commit, ended)
    return None


def _is_cancellation(exc: BaseException) -> bool:
    """True for the running async library's cancellation (never true in sync code)."""
    try:
        return isinstance(exc, anyio.get_cancelled_exc_class())
    except RuntimeError:  # no event loop here
        return False


def run_sync(
    plan: Plan,
    body: Callable[[], T],
    *,
    run: RunTracker | None = None,
    commit: bool = True,
) -> StepResult[T]:
    """Run a sync step under its budget (not started when it is below what the step needs:
    `refused`). A thread cannot be killed: past its budget the step is left running in its own
    thread, recorded as `abandoned`, and the caller goes on in time; the HTTP connections its
    body waits on are shut down then (`sync_http.py`). A body that ends past its budget by an
    error (a client timeout cut to it) lost a race with the wait: it is cut too, `timed_out`.

    Called on an event loop's thread (sync `invoke` from async code), the step runs on that
    thread instead: the caller's sync call holds the loop's thread until it returns whichever
    thread the step runs on, and waiting for a worker there would block the loop on a lock.
    The step then stops only where it checks its budget (a model's token stream, `check()`,
    an httpx request, cut to the budget by `sync_http.py`); one that ends past its budget is
    `timed_out`, its value let go, as if it had been cut there.
    """
    key = id(plan)
    if plan.skip:
        return refused(plan, run, commit=commit)
    if plan.budget is None and plan.idle is None:
        try:
            value = body()
        except Exception as exc:
            return _finish(run, key, commit, StepResult(plan.record(StepStatus.FAILED), error=exc))
        return _finish(run, key, commit, StepResult(plan.record(StepStatus.COMPLETED), value=value))
    if run is not None:
        run.in_flight[key] = plan
    _ensure_http()
    watch = watch_of(plan)
    job = _sync_job(plan, body, watch)
    cut = _sync_wait(job, plan, watch)
    if cut is not None:
        return _finish(run, key, commit, cut)
    err = job.error
    if err is None:
        gap = None if watch is None else watch.close(cut=False)
        done = StepResult(plan.record(StepStatus.COMPLETED, gap=gap), value=job.value)
        return _finish(run, key, commit, done)
    if isinstance(err, _control_flow):
        if run is not None:
            run.in_flight.pop(key, None)
        raise err
    if not isinstance(err, Exception):
        raise err
    return _finish(run, key, commit, _sync_failed(err, plan))


def _sync_job(plan: Plan, body: Callable[[], T], watch: StallWatch | None) -> Job[T]:
    """The job of a sync step's body: its copy of the context holds the step's watch (its
    stream's progress reaches it) and the deadline its tool calls see (`Plan.for_tools`)."""
    step_deadline = plan.step_deadline()
    if watch is None and plan.for_tools is None:
        return Job(body, step_deadline, plan.name)
    token = watching(watch) if watch is not None else None
    tools = tools_until(plan.for_tools) if plan.for_tools is not None else None
    try:
        return Job(body, step_deadline, plan.name)
    finally:
        if tools is not None:
            tools.var.reset(tools)
        if token is not None:
            unwatch(token)


def _sync_wait(job: Job[Any], plan: Plan, watch: StallWatch | None) -> StepResult[Any] | None:
    """Run `job` on a worker and wait for it until its budget (or its stall limit): the result
    of a step left running there (abandoned), or None once the job has ended. On an event
    loop's thread the job runs on that thread instead (see `run_sync`)."""
    step_deadline = plan.step_deadline()
    if watch is not None and watch.limit is not None and not _on_a_loop_thread():
        stalled = _wait_watched(_submit(job), plan.budget, watch)
        if stalled is not None:
            job.abandon()
            said = stalled_note(stalled)
            rec = plan.record(
                StepStatus.ABANDONED, cancel_source=STALLED, note=said, gap=watch.close(cut=True)
            )
            return StepResult(
                rec, error=Stalled(f"{plan.name} stalled: {said}", gap=stalled, step=plan.name)
            )
        if job.wait(0.0):
            return None
        overrun, note = _abandoned(job, plan, step_deadline)
        gap = watch.close(cut=True)
        rec = plan.record(StepStatus.ABANDONED, cancel_source=plan.cut_source, note=note, gap=gap)
        return StepResult(rec, error=overrun)
    if _on_a_loop_thread():
        job.run()
        if job.error is None and step_deadline is not None and step_deadline.expired:
            job.error = DeadlineExceeded(
                f"deadline exceeded in {plan.name} (ended past its budget, on the event loop's "
                "thread)",
                deadline=step_deadline,
                step=plan.name,
            )
        return None
    if _submit(job).wait(math.inf if plan.budget is None else plan.budget):
        return None
    overrun, note = _abandoned(job, plan, step_deadline)
    rec = plan.record(StepStatus.ABANDONED, cancel_source=plan.cut_source, note=note)
    return StepResult(rec, error=overrun)


def _sync_failed(err: Exception, plan: Plan) -> StepResult[Any]:
    """How a sync step whose body raised `err` ended. Past its budget it stopped at its budget
    (check(), a client timeout cut to it, a request closed or refused at it) and lost the race
    with the wait, which would have abandoned it an instant later: cut, not failed."""
    step_deadline = plan.step_deadline()
    if step_deadline is None or not step_deadline.expired:
        return StepResult(plan.record(StepStatus.FAILED), error=err)
    cut: BaseException = err
    if not isinstance(err, DeadlineExceeded):
        cut = DeadlineExceeded(
            f"deadline exceeded in {plan.name} (it ended past its budget with "
            f"{type(err).__name__})",
            deadline=step_deadline,
            step=plan.name,
        )
        cut.__cause__ = err
    rec = plan.record(StepStatus.TIMED_OUT, cancel_source=plan.cut_source)
    return StepResult(rec, error=cut)


def _abandoned(
    job: Job[Any], plan: Plan, deadline: Deadline | None
) -> tuple[DeadlineExceeded, str | None]:
    """Abandon `job` past its budget, its HTTP connections shut down (`sync_http.py`): the
    error that says so, and that its thread runs on; and its record's note (None: nothing
    was closed)."""
    closed = job.abandon()
    note = f"{closed} HTTP connection{'s' if closed > 1 else ''} closed" if closed else None
    error = DeadlineExceeded(
        f"deadline exceeded in {plan.name} (sync work abandoned, its thread still running"
        + (f"; {note})" if note else ")"),
        deadline=deadline,
        step=plan.name,
    )
    return error, note


def _wait_watched(job: Job[Any], budget: float | None, watch: StallWatch) -> float | None:
    """Wait for a sync step's job until it ends, its `budget` runs out (it is then still
    running: `job.wait(0)` is False) or it stalls; the gap it stalled at, or None."""
    limit = watch.limit
    assert limit is not None
    ends = time.monotonic() + (math.inf if budget is None else budget)
    while True:
        now = time.monotonic()
        if now >= ends:
            return None
        due = watch.last + limit if watch.armed else now + limit
        if job.wait(min(ends, due) - now):
            job.finish()  # (give the lock back: the caller's next look finds the job done)
            return None
        gap = watch.open_gap()
        if gap >= limit:
            watch.fired = True
            watch.gap = gap
            return gap


def _on_a_loop_thread() -> bool:
    """Whether this thread is running an asyncio event loop (sync code called from a coroutine)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _finish(run: RunTracker | None, key: int, commit: bool, result: StepResult[T]) -> StepResult[T]:
    if not commit:
        if run is not None:
            run.in_flight.pop(key, None)
        return result
    commit_record(result.record, run, key)
    return result
