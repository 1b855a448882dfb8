"""A LangGraph graph on Temporal (the official plugin) under one deadline, on a real dev server."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict, cast

import anyio
import httpx
import pytest
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.langgraph import LangGraphPlugin, graph
from temporalio.langgraph import entrypoint as temporal_entrypoint
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from langgraph_deadline import Terminal
from langgraph_deadline.temporal import (
    DEADLINE_EXCEEDED,
    DeadlineInterceptor,
    deadline_memo,
    deadline_result,
    workflow_grant,
)
from langgraph_deadline.types import StepStatus
from tests.conftest import collecting

pytestmark = [pytest.mark.temporal, pytest.mark.serial, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SEEN: dict[str, Any] = {}


class State(TypedDict, total=False):
    url: str
    log: list[str]


async def first(state: State) -> State:
    return {"log": [*state.get("log", []), "first"]}


async def hang(state: State) -> State:
    async with httpx.AsyncClient() as client:
        await client.get(state["url"])  # the loopback server never answers
    return {"log": [*state.get("log", []), "hang"]}


def _chain(*nodes: tuple[str, Callable[..., Any]]) -> StateGraph[Any, Any, Any, Any]:
    """Nodes in a line, each an activity with a fixed per-node timeout: what users write today
    (5 minutes, far longer than the request has)."""
    b: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    opts = {"execute_in": "activity", "start_to_close_timeout": timedelta(minutes=5)}
    previous = START
    for name, node in nodes:
        b.add_node(name, node, metadata=opts)
        b.add_edge(previous, name)
        previous = name
    return b


def _builder() -> StateGraph[Any, Any, Any, Any]:
    return _chain(("first", first), ("hang", hang), ("late", first))


@workflow.defn
class HangWorkflow:
    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("hang").compile().ainvoke(state))


class _Server:
    """A loopback HTTP server that accepts, reads the request, never answers; records the close."""

    def __init__(self) -> None:
        self.closed_at: list[float] = []
        self.opened_at: list[float] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened_at.append(time.time())
        while await reader.read(1024):
            pass
        self.closed_at.append(time.time())
        writer.close()


def _worker_of(client: Client, queue: str, workflow_class: type, ends: _Ends) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=[workflow_class],
        plugins=[ends.plugin],
        interceptors=[ends.interceptor],
        workflow_runner=ends.runner(),
    )


@dataclasses.dataclass
class _Ends:
    """How a test's run is hosted: its plugin, the interceptor, the sandbox or not."""

    plugin: LangGraphPlugin
    interceptor: DeadlineInterceptor = dataclasses.field(
        default_factory=lambda: DeadlineInterceptor(reserve=0.3, heartbeat=1.0)
    )
    sandboxed: bool = False

    def runner(self) -> Any:
        return SandboxedWorkflowRunner() if self.sandboxed else UnsandboxedWorkflowRunner()


@dataclasses.dataclass
class _Ended:
    """A run started with a deadline that failed: what the tests read of it."""

    error: WorkflowFailureError
    started: float
    ended: float
    history: WorkflowHistory
    server: _Server

    @property
    def result(self) -> dict[str, Any]:
        result = deadline_result(self.error)
        assert result is not None, self.error
        return result


async def _run_to_its_end(
    address: str,
    workflow_class: type,
    ends: _Ends,
    input: Callable[[str], Any],
    timeout: float,
    meanwhile: Callable[[WorkflowHandle[Any, Any]], Awaitable[None]] | None = None,
    *,
    as_execution_timeout: bool = False,
) -> _Ended:
    """Start `workflow_class` on a fresh queue with a `timeout` deadline (in the memo, or as
    Temporal's own `execution_timeout`) and `input(url)` (the URL of a server that never
    answers), do `meanwhile` with its handle, wait for it to fail, and replay its last run's
    history (Temporal's replayer: no non-determinism error)."""
    server = _Server()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    client = await Client.connect(address)
    queue = f"q-{uuid.uuid4()}"
    async with srv, _worker_of(client, queue, workflow_class, ends):
        started = time.time()
        handle = await client.start_workflow(
            workflow_class.__name__,
            input(url),
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
            memo=None if as_execution_timeout else deadline_memo(timeout, now=started),
            execution_timeout=timedelta(seconds=timeout) if as_execution_timeout else None,
        )
        if meanwhile is not None:
            await meanwhile(handle)
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()  # (follows a continue-as-new)
        ended = time.time()
        history = await client.get_workflow_handle(handle.id).fetch_history()  # the last run
    await Replayer(
        workflows=[workflow_class],
        plugins=[ends.plugin],
        interceptors=[ends.interceptor],
        workflow_runner=ends.runner(),
    ).replay_workflow(history)
    return _Ended(info.value, started, ended, history, server)


def _activity_ends(history: WorkflowHistory) -> list[str]:
    """How the run's activities that did not complete ended: the type of the error each failed
    with, or "timed out" for one that Temporal timed out."""
    ends = []
    for e in history.events:
        if e.HasField("activity_task_failed_event_attributes"):
            ends.append(
                e.activity_task_failed_event_attributes.failure.application_failure_info.type
            )
        elif e.HasField("activity_task_timed_out_event_attributes"):
            ends.append("timed out")
    return ends


async def test_hanging_activity_is_cut_at_the_deadline_and_the_run_ends_named(
    temporal_address: str,
) -> None:
    timeout = 3.0
    ends = _Ends(LangGraphPlugin(graphs={"hang": _builder()}))
    with collecting() as seen:  # the observers of the workflow's worker (this process)
        run = await _run_to_its_end(
            temporal_address, HangWorkflow, ends, lambda url: {"url": url, "log": []}, timeout
        )
    # they were told each activity as it ended and the run's end, once (not again by the
    # replay), under the workflow's id (what else they heard: a thread an earlier test left
    # running in this process, ending now)
    (ended,) = [r for r in seen.runs if r.run_id.startswith("wf-")]
    assert ended.outcome.terminal is Terminal.DEADLINE_EXCEEDED
    assert [(e.record.name, e.record.status) for e in seen.events if e.run_id == ended.run_id] == [
        ("hang.first", StepStatus.COMPLETED),
        ("hang.hang", StepStatus.TIMED_OUT),
    ]
    assert ended.deadline_at == pytest.approx(run.started + timeout)
    # the run ends in the named terminal, by the deadline (not after the node's 5 minutes)
    terminal = _terminal(run.error)
    assert terminal is not None and terminal.type == DEADLINE_EXCEEDED
    assert run.ended - run.started < timeout + 2.0
    # ... with what with_deadlines returns in one process: the last state, outcome and trace
    result = run.result
    assert result["log"] == ["first"]  # the state "hang" started from: "first" had run
    outcome = result["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "hang.hang"
    assert outcome.elapsed_ms is not None and outcome.elapsed_ms < (timeout + 1.0) * 1000
    first_rec, hang_rec = result["deadline_trace"]  # "late" never scheduled: no record
    assert (first_rec.name, first_rec.status) == ("hang.first", StepStatus.COMPLETED)
    assert (hang_rec.name, hang_rec.status) == ("hang.hang", StepStatus.TIMED_OUT)
    assert hang_rec.requested_ms == 300_000 and hang_rec.clamped  # its own 5 minutes, cut
    assert hang_rec.allocated_ms is not None and hang_rec.allocated_ms < timeout * 1000
    assert "hang.hang" in outcome.reason
    # the server saw the request close near the deadline, not at the node's own timeout
    assert run.server.opened_at and run.server.closed_at
    assert run.server.closed_at[0] - run.started < timeout + 1.0
    # ... cut in its worker at its budget, before the deadline: it failed in the named terminal,
    # not timed out by Temporal (whose cancellation reaches an activity with a heartbeat, later)
    assert _activity_ends(run.history) == [DEADLINE_EXCEEDED]
    # each activity got its timeouts from what was left: schedule_to_close within the deadline
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in run.history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert len(scheduled) == 2  # first, hang; "late" never scheduled
    for attrs in scheduled:
        assert attrs.schedule_to_close_timeout.ToTimedelta() <= timedelta(seconds=timeout)
        assert attrs.start_to_close_timeout.ToTimedelta() <= timedelta(seconds=timeout)


ATTEMPTS: list[tuple[float, int, float | None]] = []


async def flaky(state: State) -> State:
    from temporalio import activity

    from langgraph_deadline import current_deadline

    d = current_deadline()
    ATTEMPTS.append((time.time(), activity.info().attempt, None if d is None else d.timestamp))
    if state.get("url") == "sleep":
        await asyncio.sleep(100)
    raise RuntimeError("upstream 503")


def _flaky_builder() -> StateGraph[Any, Any, Any, Any]:
    b: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    b.add_node(
        "flaky",
        flaky,
        metadata={
            "execute_in": "activity",
            "start_to_close_timeout": timedelta(minutes=5),
            # what users write today: retry forever, each attempt with a fresh 5 minutes
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(seconds=0.4), backoff_coefficient=1.0
            ),
        },
    )
    b.add_edge(START, "flaky")
    return b


@workflow.defn
class FlakyWorkflow:
    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("flaky").compile().ainvoke(state))


def _flaky_worker(client: Client, queue: str) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=[FlakyWorkflow],
        plugins=[LangGraphPlugin(graphs={"flaky": _flaky_builder()})],
        interceptors=[DeadlineInterceptor(reserve=0.3, heartbeat=0.6)],
        workflow_runner=UnsandboxedWorkflowRunner(),
        graceful_shutdown_timeout=timedelta(0),
    )


def _terminal(error: WorkflowFailureError) -> ApplicationError | None:
    cause: BaseException | None = error.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    return cause


async def _replay(history: WorkflowHistory) -> None:
    await Replayer(
        workflows=[FlakyWorkflow],
        plugins=[LangGraphPlugin(graphs={"flaky": _flaky_builder()})],
        interceptors=[DeadlineInterceptor(reserve=0.3, heartbeat=0.6)],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ).replay_workflow(history)


async def test_retries_share_the_budget_and_none_starts_after_the_deadline(
    temporal_address: str,
) -> None:
    ATTEMPTS.clear()
    client = await Client.connect(temporal_address)
    queue = f"q-{uuid.uuid4()}"
    timeout = 3.0
    async with _flaky_worker(client, queue):
        started = time.time()
        handle = await client.start_workflow(
            "FlakyWorkflow",
            {"url": "fail", "log": []},
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
            memo=deadline_memo(timeout, now=started),
        )
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        ended = time.time()
        history = await handle.fetch_history()
    terminal = _terminal(info.value)
    assert terminal is not None and terminal.type == DEADLINE_EXCEEDED
    assert ended - started < timeout + 2.0  # not retried for the 5 minutes a fresh budget gives
    assert len(ATTEMPTS) >= 3  # it did retry, within the one budget
    assert all(at < started + timeout for at, _, _ in ATTEMPTS)  # none started after it
    result = deadline_result(info.value)  # one record for the activity and all its retries
    assert result is not None and result["url"] == "fail"
    (record,) = result["deadline_trace"]
    assert record.status is StepStatus.TIMED_OUT and record.name == "flaky.flaky"
    assert [d for _, _, d in ATTEMPTS] == [pytest.approx(started + timeout - 0.4)] * len(ATTEMPTS)
    await _replay(history)


# Stopping the first worker evicts the workflow from its cache mid-run; the plugin's LangGraph
# generator is then collected unfinished (Temporal's eviction, not this library).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_worker_stopped_mid_activity_leaves_the_retry_only_the_time_left(
    temporal_address: str,
) -> None:
    """A workflow-and-activity worker dies mid-run; a new one resumes with the same deadline."""
    ATTEMPTS.clear()
    client = await Client.connect(temporal_address)
    queue = f"q-{uuid.uuid4()}"
    timeout = 5.0
    started = time.time()
    async with _flaky_worker(client, queue):
        handle = await client.start_workflow(
            "FlakyWorkflow",
            {"url": "sleep", "log": []},
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
            memo=deadline_memo(timeout, now=started),
        )
        with anyio.fail_after(timeout):
            while not ATTEMPTS:  # noqa: ASYNC110 - the activity appends from the worker's task
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
    gc.collect()  # collect the evicted run's generator here, under this test's filter
    # the first worker is gone mid-activity; a fresh one (new workflow cache) picks the run up
    async with _flaky_worker(client, queue):
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        ended = time.time()
        history = await handle.fetch_history()
    terminal = _terminal(info.value)
    assert terminal is not None and terminal.type == DEADLINE_EXCEEDED
    assert ended - started < timeout + 2.0
    assert len(ATTEMPTS) >= 2 and ATTEMPTS[-1][1] >= 2  # retried on the new worker
    # every attempt, on either worker, ran to the one deadline: the retry got only the time left
    assert [d for _, _, d in ATTEMPTS] == [pytest.approx(started + timeout - 0.4)] * len(ATTEMPTS)
    assert all(at < started + timeout for at, _, _ in ATTEMPTS)
    await _replay(history)
    gc.collect()


async def test_the_default_sandbox_needs_nothing_more(temporal_address: str) -> None:
    """A workflow module as users write one (tests/temporal/sandboxed.py), run in Temporal's
    default sandbox: the interceptor alone gives it the deadline, the named terminal and the
    closed request, and the sandboxed replayer replays its history."""
    from tests.temporal.sandboxed import SandboxedHangWorkflow

    timeout = 3.0
    ends = _Ends(LangGraphPlugin(graphs={"hang": _builder()}), sandboxed=True)
    run = await _run_to_its_end(
        temporal_address, SandboxedHangWorkflow, ends, lambda url: {"url": url, "log": []}, timeout
    )
    terminal = _terminal(run.error)
    assert terminal is not None and terminal.type == DEADLINE_EXCEEDED
    assert run.ended - run.started < timeout + 2.0
    assert run.server.closed_at and run.server.closed_at[0] - run.started < timeout + 1.0


async def slow(state: State) -> State:
    await asyncio.sleep(0.8)
    return {"log": [*state.get("log", []), "slow"]}


def _refusing_builder() -> StateGraph[Any, Any, Any, Any]:
    return _chain(("slow", slow), ("next", first))


@workflow.defn
class RefusingWorkflow:
    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("refusing").compile().ainvoke(state))


async def test_an_activity_that_cannot_fit_is_not_scheduled_and_the_run_says_so(
    temporal_address: str,
) -> None:
    """After "slow" took 0.8 s of 1.5, "next" would get under its min_viable (0.5 s): it is not
    scheduled, and the run ends in the named terminal with the state "slow" left and a
    `skipped` record, as `with_deadlines` ends a run whose next node cannot fit."""
    ends = _Ends(
        LangGraphPlugin(graphs={"refusing": _refusing_builder()}),
        DeadlineInterceptor(reserve=0.3, min_viable=0.5, heartbeat=1.0),
    )
    run = await _run_to_its_end(
        temporal_address, RefusingWorkflow, ends, lambda _: {"log": []}, 1.5
    )
    result = run.result
    assert result["log"] == ["slow"]
    outcome = result["deadline_outcome"]
    assert outcome.terminal is Terminal.DEADLINE_EXCEEDED and outcome.step == "refusing.next"
    ran, refused = result["deadline_trace"]
    assert (ran.name, ran.status) == ("refusing.slow", StepStatus.COMPLETED)
    assert (refused.name, refused.status) == ("refusing.next", StepStatus.SKIPPED)
    assert refused.allocated_ms is not None and refused.allocated_ms < 500
    assert "not started" in outcome.reason


@task
async def fetch(url: str) -> str:
    """A `@task` that waits on a server that never answers."""
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    return response.text


@task
async def note(text: str) -> str:
    return f"noted {text}"


@entrypoint()
async def research(url: str) -> list[str]:
    first_note = await note("start")
    page = await fetch(url)
    return [first_note, page]


@workflow.defn
class ResearchWorkflow:
    @workflow.run
    async def run(self, url: str) -> list[str]:
        return cast(list[str], await temporal_entrypoint("research").ainvoke(url))


async def test_an_entrypoints_hanging_task_is_cut_at_the_deadline(temporal_address: str) -> None:
    """The Functional API on the plugin (`entrypoint(name)`, each `@task` an activity): the
    hanging task's request is closed by the deadline and the run ends in the named terminal,
    with the task that ran before it in the trace."""
    timeout = 3.0
    own = {"execute_in": "activity", "start_to_close_timeout": timedelta(minutes=5)}
    plugin = LangGraphPlugin(
        entrypoints={"research": research},
        tasks=[fetch, note],
        activity_options={"fetch": own, "note": own},
    )
    run = await _run_to_its_end(
        temporal_address, ResearchWorkflow, _Ends(plugin), lambda url: url, timeout
    )
    result = run.result
    assert result["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert run.ended - run.started < timeout + 2.0
    assert run.server.closed_at and run.server.closed_at[0] - run.started < timeout + 1.0
    statuses = [(r.name, r.status) for r in result["deadline_trace"]]
    assert statuses[-1][1] is StepStatus.TIMED_OUT and "fetch" in statuses[-1][0]
    assert (statuses[0][1], "note" in statuses[0][0]) == (StepStatus.COMPLETED, True)


KILLED: list[tuple[float, int, float | None]] = []
_ROOT = Path(__file__).resolve().parents[2]  # the checkout: the other process imports `tests`


async def hang_noted(state: State) -> State:
    """Note the attempt (in this process) and its deadline, then wait on a server that never
    answers."""
    from temporalio import activity

    from langgraph_deadline import current_deadline

    d = current_deadline()
    KILLED.append((time.time(), activity.info().attempt, None if d is None else d.timestamp))
    async with httpx.AsyncClient() as client:
        await client.get(state["url"])
    return {"log": [*state.get("log", []), "hang"]}


def _killable_builder() -> StateGraph[Any, Any, Any, Any]:
    return _chain(("first", first), ("hang", hang_noted))


@workflow.defn
class KillableWorkflow:
    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("killable").compile().ainvoke(state))


def killable_worker(client: Client, queue: str) -> Worker:
    """The worker of the SIGKILL test, the same in both processes. A dead worker's sticky
    workflow queue is given up after 1 s (Temporal's default: 10 s, past the deadline)."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[KillableWorkflow],
        plugins=[LangGraphPlugin(graphs={"killable": _killable_builder()})],
        interceptors=[DeadlineInterceptor(reserve=0.3, heartbeat=1.0)],
        workflow_runner=UnsandboxedWorkflowRunner(),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(0),
    )


async def test_a_worker_killed_mid_activity_leaves_the_retry_on_another_only_the_time_left(
    temporal_address: str,
) -> None:
    """Two workers, one in a process of its own. That one runs the workflow and its hanging
    activity and is killed (SIGKILL: no clean-up, no last heartbeat). Temporal sees it dead
    within the heartbeat timeout (1 s) and retries the activity on the other worker, which
    gets only the time left (the same deadline, not a fresh budget), is cut at it, and the run
    ends in the named terminal; the history replays."""
    import os
    import signal
    import subprocess
    import sys

    KILLED.clear()
    server = _Server()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = await Client.connect(temporal_address)
    queue = f"q-{uuid.uuid4()}"
    timeout = 6.0
    other = subprocess.Popen(  # noqa: ASYNC220 - started once, killed below
        [sys.executable, "-m", "tests.temporal.worker_process", temporal_address, queue],
        cwd=_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        assert await anyio.to_thread.run_sync(other.stdout.readline) == "ready\n"
        async with srv:
            started = time.time()
            handle = await client.start_workflow(
                "KillableWorkflow",
                {"url": f"http://127.0.0.1:{port}/", "log": []},
                id=f"wf-{uuid.uuid4()}",
                task_queue=queue,
                memo=deadline_memo(timeout, now=started),
            )
            with anyio.fail_after(timeout):  # the other process's attempt is waiting
                while not server.opened_at:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            os.kill(other.pid, signal.SIGKILL)
            killed = time.time()
            async with killable_worker(client, queue):
                with pytest.raises(WorkflowFailureError) as info:
                    await handle.result()
                ended = time.time()
                history = await handle.fetch_history()
    finally:
        other.kill()
        other.wait(10)
    result = deadline_result(info.value)
    assert result is not None
    assert result["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert ended - started < timeout + 2.0
    # the retry ran here (attempt 2 or later), started before the deadline, with the same end
    assert KILLED and all(attempt >= 2 for _, attempt, _ in KILLED)
    assert all(killed < at < started + timeout for at, _, _ in KILLED)
    assert [d for _, _, d in KILLED] == [pytest.approx(started + timeout - 0.4)] * len(KILLED)
    assert len(server.opened_at) >= 2  # the killed attempt's request, and the retry's
    await Replayer(
        workflows=[KillableWorkflow],
        plugins=[LangGraphPlugin(graphs={"killable": _killable_builder()})],
        interceptors=[DeadlineInterceptor(reserve=0.3, heartbeat=1.0)],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ).replay_workflow(history)


@workflow.defn
class ContinuedWorkflow:
    """Continues as new once before it runs the graph (as a long workflow does to keep its
    history short): the new run keeps the memo, so the deadline, by Temporal's default."""

    @workflow.run
    async def run(self, state: State) -> State:
        if not state.get("log"):
            workflow.continue_as_new({**state, "log": ["continued"]})
        return cast(State, await graph("killable").compile().ainvoke(state))


async def test_a_continue_as_new_keeps_the_deadline(temporal_address: str) -> None:
    KILLED.clear()
    timeout = 3.0
    ends = _Ends(LangGraphPlugin(graphs={"killable": _killable_builder()}))
    run = await _run_to_its_end(
        temporal_address, ContinuedWorkflow, ends, lambda url: {"url": url}, timeout
    )
    assert run.result["log"] == ["continued", "first"]
    assert run.ended - run.started < timeout + 2.0
    # the continued run's activity ran to the first run's deadline: not a fresh one
    assert [d for _, _, d in KILLED] == [pytest.approx(run.started + timeout - 0.4)]


async def ask(state: State) -> State:
    from langgraph.types import interrupt

    answer = interrupt("approve the lookup?")
    return {"log": [*state.get("log", []), f"asked: {answer}"]}


def _asking_builder() -> StateGraph[Any, Any, Any, Any]:
    return _chain(("ask", ask), ("hang", hang_noted))


@workflow.defn
class AskingWorkflow:
    """A human-in-the-loop run: the graph pauses at `interrupt()`, the workflow waits for the
    `approve` signal, then resumes the graph with the answer (the plugin's checkpointer)."""

    def __init__(self) -> None:
        self.answer: str | None = None
        self.grant: float | None = None

    @workflow.signal
    def approve(self, answer: str, grant: float | None = None) -> None:
        self.answer = answer
        self.grant = grant

    @workflow.run
    async def run(self, state: State) -> State:
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.types import Command

        g = graph("asking").compile(checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t"}}
        out = await g.ainvoke(state, config)
        if "__interrupt__" in out:
            await workflow.wait_condition(lambda: self.answer is not None)
            if self.grant is not None:  # the approver gives the rest of the run more time
                workflow_grant(self.grant)
            out = await g.ainvoke(Command(resume=self.answer), config)
        return cast(State, out)


@pytest.mark.parametrize("grant", [None, 3.0], ids=["kept", "granted"])
async def test_a_resume_after_an_interrupt_keeps_the_deadline_unless_granted(
    temporal_address: str, grant: float | None
) -> None:
    """The rules a with_deadlines run keeps (docs/howto/resume.md): the human's wait counts
    against the run's one deadline, and the resumed run's steps get only what is left; a grant
    (`workflow_grant`) gives them a new deadline, explicitly."""
    KILLED.clear()
    timeout = 4.0
    approved: list[float] = []

    async def the_human(handle: WorkflowHandle[Any, Any]) -> None:
        await asyncio.sleep(1.5)  # the human takes 1.5 s of the 4
        approved.append(time.time())
        await handle.signal(AskingWorkflow.approve, args=["yes", grant])

    ends = _Ends(LangGraphPlugin(graphs={"asking": _asking_builder()}))
    run = await _run_to_its_end(
        temporal_address,
        AskingWorkflow,
        ends,
        lambda url: {"url": url, "log": []},
        timeout,
        meanwhile=the_human,
    )
    result = run.result
    assert result["log"] == ["asked: yes"]
    assert result["deadline_outcome"].step == "asking.hang"
    (attempt,) = KILLED
    assert attempt[0] - run.started > 1.5
    if grant is None:  # the resumed step ran to the run's first deadline: the wait not given back
        assert run.ended - run.started < timeout + 2.0
        assert attempt[2] == pytest.approx(run.started + timeout - 0.4)
    else:  # a new deadline, `grant` from the approval (by the workflow's clock)
        assert attempt[2] == pytest.approx(approved[0] + grant - 0.4, abs=0.5)
        assert attempt[2] is not None and attempt[2] > run.started + timeout
        assert run.ended - approved[0] < grant + 2.0


async def traced(state: State) -> State:
    """A node that opens a span of its own (as an instrumented client would), then hangs."""
    from opentelemetry import trace

    with trace.get_tracer("the user's").start_as_current_span("inside hang"):
        return await hang(state)


def _traced_builder(activities: str) -> StateGraph[Any, Any, Any, Any]:
    """`first`, then `traced`, each an activity on the `activities` queue (another worker)."""
    b: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    opts = {
        "execute_in": "activity",
        "start_to_close_timeout": timedelta(minutes=5),
        "task_queue": activities,
    }
    b.add_node("first", first, metadata=opts)
    b.add_node("traced", traced, metadata=opts)
    b.add_edge(START, "first")
    b.add_edge("first", "traced")
    return b


@workflow.defn
class TracedWorkflow:
    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("traced").compile().ainvoke(state))


def _replay_safe_provider() -> Any:
    """The process's tracer provider, a replay-safe one as Temporal's `OpenTelemetryPlugin`
    requires (set once: OpenTelemetry's global provider cannot be replaced)."""
    from opentelemetry import trace
    from temporalio.contrib.opentelemetry import create_tracer_provider
    from temporalio.contrib.opentelemetry._tracer_provider import ReplaySafeTracerProvider

    if not isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider):
        trace.set_tracer_provider(create_tracer_provider())
    return trace.get_tracer_provider()


async def test_a_runs_steps_on_several_workers_form_one_trace(temporal_address: str) -> None:
    """Temporal's `OpenTelemetryPlugin` on the client carries the caller's trace into the
    workflow and its activities; `OtelObserver` on the workflow's worker then writes each
    activity's span and the run's span into that trace, beside the spans the activities made on
    the other worker: one trace from the request to the cut."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    from langgraph_deadline.instrument import OtelObserver, get_observers, set_observers

    provider = _replay_safe_provider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = _Server()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/"
    client = await Client.connect(temporal_address, plugins=[OpenTelemetryPlugin()])
    queue, activities = f"q-{uuid.uuid4()}", f"a-{uuid.uuid4()}"
    plugin = LangGraphPlugin(graphs={"traced": _traced_builder(activities)})
    interceptor = DeadlineInterceptor(reserve=0.3, heartbeat=1.0)
    workers = [  # the workflow's worker (it polls no activity of the run), and the activities'
        Worker(
            client,
            task_queue=q,
            workflows=[TracedWorkflow],
            plugins=[plugin],
            interceptors=[interceptor],
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        for q in (queue, activities)
    ]
    saved = get_observers()
    set_observers([OtelObserver(tracer_provider=provider)])
    try:
        async with srv, workers[0], workers[1]:
            with trace.get_tracer("the caller's").start_as_current_span("request") as request:
                handle = await client.start_workflow(
                    "TracedWorkflow",
                    {"url": url, "log": []},
                    id=f"wf-{uuid.uuid4()}",
                    task_queue=queue,
                    memo=deadline_memo(3.0),
                )
            with pytest.raises(WorkflowFailureError) as info:
                await handle.result()
    finally:
        set_observers(saved)
    assert deadline_result(info.value) is not None
    spans = {s.name: s for s in exporter.get_finished_spans()}
    ours = ["node traced.first", "node traced.traced", "langgraph_deadline.run"]
    assert set(ours) <= set(spans), sorted(spans)
    trace_id = request.get_span_context().trace_id
    for name in [*ours, "inside hang"]:
        context = spans[name].context
        assert context is not None and context.trace_id == trace_id, name
    assert (spans["node traced.traced"].attributes or {})["deadline.status"] == "timed_out"


STALLS: list[tuple[int, float]] = []  # (attempt, when its read was cut)


async def reading(state: State) -> State:
    """Reads a body that trickles in for 1.5 s, longer than its 1 s heartbeat timeout; on the
    first attempt the body then stops for good (a stalled upstream), on the next it ends."""
    from temporalio import activity

    from langgraph_deadline.http import deadline_hooks

    attempt = activity.info().attempt
    query = "chunks=40&interval=0.1&stall_after=15" if attempt == 1 else "chunks=5&interval=0.1"
    try:
        async with (
            httpx.AsyncClient(event_hooks=deadline_hooks()) as client,
            client.stream("GET", f"{state['url']}trickle?{query}") as response,
        ):
            body = b"".join([chunk async for chunk in response.aiter_bytes()])
    except asyncio.CancelledError:
        STALLS.append((attempt, time.time()))
        raise
    return {"log": [*state.get("log", []), f"read {len(body)} bytes on attempt {attempt}"]}


@workflow.defn
class ReadingWorkflow:
    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("reading").compile().ainvoke(state))


async def test_a_heartbeat_timeout_of_the_nodes_own_is_its_stall_limit(
    temporal_address: str,
) -> None:
    """A node's own `heartbeat_timeout` (1 s) is its stall limit: the activity heartbeats on its
    step's progress (each chunk of a body read with `deadline_hooks()`), not on a timer, so a
    read that keeps arriving for longer than that lives on, and one that stops is cut 1 s into
    the silence, named `Stalled`, and retried by Temporal with the time left, which answers
    well before the 8 s deadline. (Heartbeating on a timer kept the stalled read alive until
    its read timeout, cut to the deadline: the retry answered 0.4 s before it.)"""
    from langgraph_deadline.testing import SlowServer

    STALLS.clear()
    b: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    own = {
        "execute_in": "activity",
        "start_to_close_timeout": timedelta(minutes=5),
        "heartbeat_timeout": timedelta(seconds=1),
        "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=0.2)),
    }
    b.add_node("read", reading, metadata=own).add_edge(START, "read")
    plugin = LangGraphPlugin(graphs={"reading": b})
    client = await Client.connect(temporal_address)
    queue = f"q-{uuid.uuid4()}"
    timeout = 8.0
    ends = _Ends(plugin)
    with SlowServer() as upstream:
        async with _worker_of(client, queue, ReadingWorkflow, ends):
            started, started_mono = time.time(), time.monotonic()
            handle = await client.start_workflow(
                "ReadingWorkflow",
                {"url": upstream.url("/"), "log": []},
                id=f"wf-{uuid.uuid4()}",
                task_queue=queue,
                memo=deadline_memo(timeout, now=started),
                result_type=dict,
            )
            out = await handle.result()
            ended = time.time()
        stalled = upstream.requests[0]  # the first attempt's read: its connection closed at the cut
        assert stalled.disconnected is not None and stalled.disconnected - started_mono < 4.5
    await Replayer(
        workflows=[ReadingWorkflow],
        plugins=[ends.plugin],
        interceptors=[ends.interceptor],
        workflow_runner=ends.runner(),
    ).replay_workflow(await handle.fetch_history())
    assert len(out["log"]) == 1 and out["log"][0].endswith("on attempt 2")
    ((attempt, cut),) = STALLS
    assert attempt == 1
    # cut after the 1.5 s the body flowed, about 1 s into the silence, long before the deadline
    assert 2.0 < cut - started < 4.5
    assert ended - started < timeout - 1.0


async def talk(state: State) -> State:
    """Streams three tokens through LangGraph's stream writer, then waits on a server that never
    answers."""
    from langgraph.config import get_stream_writer

    writer = get_stream_writer()
    for i in range(3):
        writer(f"token {i}")
        await asyncio.sleep(0.1)
    return await hang(state)


@workflow.defn
class StreamingWorkflow:
    @workflow.init
    def __init__(self, state: State) -> None:
        from temporalio.contrib.workflow_streams import WorkflowStream

        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, state: State) -> State:
        return cast(State, await graph("streaming").compile().ainvoke(state))


# The subscriber's long poll (an update) is still open when the run fails: Temporal warns.
@pytest.mark.filterwarnings("ignore::temporalio.workflow.UnfinishedUpdateHandlersWarning")
async def test_the_plugins_streaming_delivers_what_came_before_the_cut(
    temporal_address: str,
) -> None:
    """The plugin's streaming (`streaming_topic`: a node's stream writer publishes to the
    workflow's stream, which the caller subscribes to) keeps working under the deadline: the
    tokens the node wrote before it was cut reach the subscriber as they come, and the run ends
    in the named terminal, by the deadline."""
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    timeout = 3.0
    plugin = LangGraphPlugin(
        graphs={"streaming": _chain(("talk", talk))},
        streaming_topic="tokens",
        streaming_batch_interval=timedelta(milliseconds=50),
    )
    tokens: list[Any] = []
    following: list[asyncio.Future[None]] = []

    async def subscribe(handle: WorkflowHandle[Any, Any]) -> None:
        async def follow() -> None:
            stream = WorkflowStreamClient(handle)
            async for item in stream.subscribe("tokens", poll_cooldown=timedelta(milliseconds=50)):
                tokens.append(item.data)

        following.append(asyncio.ensure_future(follow()))

    run = await _run_to_its_end(
        temporal_address,
        StreamingWorkflow,
        _Ends(plugin),
        lambda url: {"url": url, "log": []},
        timeout,
        meanwhile=subscribe,
    )
    following[0].cancel()  # (a finished run's stream is read by a query its worker answers)
    assert tokens == ["token 0", "token 1", "token 2"]  # as they came, before the cut
    assert run.result["deadline_outcome"].step == "streaming.talk"
    assert run.ended - run.started < timeout + 2.0
    assert run.server.closed_at and run.server.closed_at[0] - run.started < timeout + 1.0


async def test_a_workflows_own_execution_timeout_is_its_deadline(temporal_address: str) -> None:
    """A workflow started with Temporal's own `execution_timeout` and no memo: the interceptor
    takes the timeout's end as the run's deadline, so the hanging node is cut before Temporal
    would end the run unnamed (status TIMED_OUT, no state, no trace), and the run fails in the
    named terminal with its last state and trace instead."""
    timeout = 3.0
    ends = _Ends(LangGraphPlugin(graphs={"hang": _builder()}))
    run = await _run_to_its_end(
        temporal_address,
        HangWorkflow,
        ends,
        lambda url: {"url": url, "log": []},
        timeout,
        as_execution_timeout=True,
    )
    result = run.result  # (a run Temporal timed out has no such result)
    assert result["log"] == ["first"]
    assert result["deadline_outcome"].step == "hang.hang"
    assert [r.status for r in result["deadline_trace"]] == [
        StepStatus.COMPLETED,
        StepStatus.TIMED_OUT,
    ]
    # (the deadline counts from the workflow's start event, a little after the client's call)
    assert run.ended - run.started < timeout + 1.0
    assert _activity_ends(run.history) == [DEADLINE_EXCEEDED]  # cut in its worker, in time
    assert run.server.closed_at and run.server.closed_at[0] - run.started < timeout + 1.0
