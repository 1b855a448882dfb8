"""A run as its graph knows it (`GraphRun`: the core's `RunTracker` and what the graph layer keeps
beside it), what its input and stream say about it (a deadline given in the input, the latest
full state seen in the stream, an interrupt), and the last chunks that tell how it ended."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, NoReturn

from langgraph.types import Command, Overwrite

from .._core.cut import Cut
from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.plan import RunTracker, run_from_config
from .._core.records import Outcome, Terminal
from .state import TRACE_WINDOW, deadline_from_state, missing_records, traced

__all__ = [
    "GraphRun",
    "NotedStream",
    "closing_chunks",
    "deadline_given",
    "graph_run",
]

log = logging.getLogger("langgraph_deadline")


@dataclasses.dataclass(slots=True, eq=False)
class GraphRun(RunTracker):
    """A run of a wrapped graph: the engine's bookkeeping (`RunTracker`) and what the graph layer
    keeps of the run beside it, for its entry, its nodes and its end. Made by the graph's entry
    (`graph.py`), carried in its config as the tracker is."""

    outcome: Outcome | None = None  # set by the step that ended the run early
    interrupted: bool = False  # paused on an interrupt: not ended
    emitted: bool = False  # its end was told to the observers (once)
    # The framework's names for this run (LangGraph's `run_id`, the `thread_id`), for the log.
    origin: tuple[tuple[str, str], ...] = ()
    entry: object = None  # the graph whose ainvoke prepared this run, until its astream starts
    resumable: bool = False  # checkpointed: a step cut mid-superstep can stay pending there
    final: Any = None  # the state a run that ended early returns
    final_news: bool = False  # that state says more than the stream did
    keep_partial: bool = False  # a node cut mid-answer keeps the text it had streamed ...
    partial: str = ""  # ... here, for the closing reply
    owed: tuple[Any, ...] = ()  # answers (ToolMessages) a cut step owes the tool calls it was
    # running, written with the outcome (a tuple: most runs owe none, and keep no list for it)
    # Failed attempts so far per task of the framework's that retries them (made on first use).
    failures: dict[str, int] | None = None
    # The run's entry (`with_deadlines`) writes its records to the state once, at its end:
    # its nodes leave them out of their updates (a checkpoint per step stays the size of the
    # run's own data, not of its trace).
    trace_at_end: bool = False
    # Under `ainvoke`: the output keys its values are read with (`select`), and once a node of
    # its graph has run, the reader of the graph's channels (LangGraph's; the latest node's, so
    # a finished node's task is let go), which `latest` asks instead of a note of every chunk
    # of the stream.
    select: Any = None
    read: Callable[[], Any] | None = None
    noted: Any = None  # the latest full state its stream showed (`latest`)

    @property
    def latest(self) -> Any:
        """The run's latest full state: its graph's channels as they are now, when read from
        them, else the last one its stream showed (None: none yet)."""
        if self.read is not None:
            try:
                return self.read()
            except Exception:  # a LangGraph that reads otherwise: what the stream showed
                log.warning("could not read the run's state from its graph", exc_info=True)
                self.read = None
        return self.noted

    @latest.setter
    def latest(self, state: Any) -> None:
        self.noted = state

    def note(self, chunk: Any, mode: Any) -> None:
        """Keep the latest full state seen in the stream, for a run that must end early."""
        if type(chunk) is tuple and len(chunk) == 2 and type(mode) is not str:
            # `(mode, payload)`: the two chunks of every step under LangGraph's `ainvoke`, first and
            # in short (a pair under one mode is `(namespace, payload)`: noted the same way below)
            kind, payload = chunk
            if isinstance(payload, dict) and "__interrupt__" in payload:
                self.interrupted = True
            if kind == "values":
                self.latest = payload
            return
        last = chunk[-1] if isinstance(chunk, tuple) and chunk else chunk
        if isinstance(last, dict) and "__interrupt__" in last:
            self.interrupted = True
        if mode == "values":
            if isinstance(chunk, dict) and chunk.get("type") == "values" and "data" in chunk:
                if not chunk.get("ns"):
                    self.latest = chunk["data"]
            else:
                self.latest = chunk
        elif isinstance(chunk, tuple):
            if len(chunk) == 2 and chunk[0] == "values":
                self.latest = chunk[1]
            elif len(chunk) == 3 and chunk[1] == "values" and not chunk[0]:
                self.latest = chunk[2]
        elif isinstance(chunk, dict) and chunk.get("type") == "values" and not chunk.get("ns"):
            self.latest = chunk.get("data")

    def failed_attempt(self, error: Exception, name: str) -> int:
        """This failure's attempt number: the failures so far of the task that raised `error`.

        LangGraph's retry loop notes on the error which task it ran ("During task with name ...
        and id ...") before it asks: that note names the task, whose attempts the run counts.
        Without it, the node's name does (its tasks of one run counted together: a backoff taken
        as longer than it is, never shorter)."""
        notes = getattr(error, "__notes__", None)
        key = notes[-1] if notes and isinstance(notes[-1], str) else name
        if self.failures is None:
            self.failures = {}
        count = self.failures.get(key, 0) + 1
        self.failures[key] = count
        return count

    def backstop(self, cut: Cut) -> None:
        """The run's deadline passed: close the steps still in flight, then cancel the run (its
        `cut`, around LangGraph's `ainvoke`)."""
        self.fire_backstop()
        cut.cancel()

    # -- how it ended ----------

    def final_outcome(self, state: Any) -> Outcome | None:
        """The outcome of a run that returned normally: the early end in its state (a
        sub-agent's, a subgraph's), else completed, in this run's time (None while it is paused
        on an interrupt)."""
        if isinstance(state, Mapping) and isinstance(state.get("deadline_outcome"), Outcome):
            found: Outcome = state["deadline_outcome"]
            if not found.ok:
                return found
        if self.outcome is not None:
            return self.outcome
        if self.interrupted:
            return None
        elapsed = round((self.clock_now() - self.started) * 1000.0, 3)
        return Outcome(terminal=Terminal.COMPLETED, elapsed_ms=elapsed)

    def ran_out(self, why: str | None, step: str | None = None) -> Outcome:
        """A `deadline_exceeded` outcome naming `step`, else the steps of this run that ran out
        (`why`: the reason, else one naming them)."""
        if step is None:
            steps = sorted({r.name for r in self.records if r.status.ran_out})
            step = ", ".join(steps) if steps else None
        if why is None:
            why = f"{step} ran out of budget" if step else "the deadline passed"
        elapsed = (self.clock_now() - self.started) * 1000.0
        return Outcome(
            terminal=Terminal.DEADLINE_EXCEEDED, step=step, reason=why, elapsed_ms=round(elapsed, 3)
        )

    def ran_out_at_the_end(self, values: Any = None) -> bool:
        """True when a run that LangGraph finished ended early all the same: a step ran out at
        its very end, or a sub-agent or a node in a subgraph wrote the outcome into the state
        (its last `values`, when the caller has them; else the run's `latest`)."""
        if self.outcome is not None:
            return True
        if values is None:
            values = self.latest
        outcome = values.get("deadline_outcome") if isinstance(values, Mapping) else None
        return isinstance(outcome, Outcome) and outcome.terminal is not Terminal.COMPLETED

    def reraise_with_state(self, exc: DeadlineExceeded) -> NoReturn:
        """Re-raise `exc`; one that carries no state yet is raised again, complete, with the
        run's latest state (never set on the error after it was raised)."""
        if exc.state is not None:
            raise exc
        raise DeadlineExceeded(
            str(exc),
            deadline=exc.deadline,
            step=exc.step,
            outcome=exc.outcome,
            scopes=exc.scopes,
            state=self.latest,
        ) from exc

    def records_update(self, latest: Any) -> dict[str, Any]:
        """The write that gives the run's checkpoint the records its state lacks (under
        `with_deadlines` its steps leave them out of their updates: `trace_at_end`), appended
        in the order they ended; given no state (a stream that did not carry values), the run's
        last records."""
        values: Mapping[str, Any] = latest if isinstance(latest, Mapping) else {}
        missing = missing_records(values, self.records)[-TRACE_WINDOW:]  # the field keeps no more
        # Plain data, as the fields' channels checkpoint it (LangGraph stores these writes as
        # they are, and a strict msgpack loader refuses our classes).
        return {"deadline_trace": [r.to_dict() for r in missing]} if missing else {}

    # -- the chunks that end its stream ----------

    def closing(
        self, state: Any, mode: Any, kwargs: Mapping[str, Any], *, news: bool = False
    ) -> list[Any]:
        """The chunks that tell a stream's consumer how the run ended early (none when the
        stream already said all of it: the step that ran out wrote its outcome itself; `news`
        when it did not run at all). `kwargs` are the stream's (`subgraphs`, `version`)."""
        self.final = state
        if not (self.final_news or news) or not isinstance(state, Mapping):
            return []
        outcome = state.get("deadline_outcome")
        step = outcome.step if isinstance(outcome, Outcome) else None
        return closing_chunks(
            state,
            step,
            mode,
            subgraphs=bool(kwargs.get("subgraphs", False)),
            version=str(kwargs.get("version", "v1")),
        )

    def completed_chunks(
        self, has_fields: bool, outcome: Outcome | None, mode: Any, kwargs: Mapping[str, Any]
    ) -> list[Any]:
        """The chunks that tell a stream's consumer its run completed (a state `has_fields`):
        the outcome's update with the run's trace (with the records its nodes left out of their
        updates), and the last values with them, as the thread holds them."""
        if not (has_fields and outcome is not None and outcome.ok):
            return []
        latest = self.latest if isinstance(self.latest, Mapping) else {}
        return closing_chunks(
            {**latest, "deadline_outcome": outcome, "deadline_trace": traced(latest, self.records)},
            None,
            mode,
            subgraphs=bool(kwargs.get("subgraphs", False)),
            version=str(kwargs.get("version", "v1")),
        )


def graph_run(config: Mapping[str, Any] | None) -> GraphRun | None:
    """The run of a wrapped graph that `config` belongs to (None: none, or a tracker the graph
    layer did not make): the core's `run_from_config`, of the graph's kind."""
    run = run_from_config(config)
    return run if isinstance(run, GraphRun) else None


def deadline_given(input: Any) -> Deadline | None:
    """The deadline a run's input (a state update, or a `Command`'s update) sets, if any."""
    update = input.update if isinstance(input, Command) else input
    if not isinstance(update, Mapping):
        return None
    value = update.get("deadline")
    if isinstance(value, Overwrite):
        value = value.value
    return None if value is None else deadline_from_state({"deadline": value})


class NotedStream:
    """A stream of LangGraph's with each chunk noted (`GraphRun.note`) on its way: an object, not
    one more generator frame, for every run `DeadlineGraph.ainvoke` makes. Once the run reads
    its state from its graph (`GraphRun.read`, given by its first node), the chunks pass as
    they are. It closes as the stream it wraps does (`aclose`, for a reader that closes what
    it reads)."""

    __slots__ = ("_inner", "_mode", "_run")

    def __init__(self, inner: AsyncGenerator[Any, None], run: GraphRun, mode: Any) -> None:
        self._inner = inner
        self._run = run
        self._mode = mode

    def __aiter__(self) -> NotedStream:
        return self

    def __anext__(self) -> Awaitable[Any]:
        if self._run.read is not None:  # its state is read from its graph: nothing to note
            return self._inner.__anext__()
        return self._noted()

    async def _noted(self) -> Any:
        chunk = await self._inner.__anext__()
        self._run.note(chunk, self._mode)
        return chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def closing_chunks(
    state: Mapping[str, Any],
    step: str | None,
    mode: Any,
    *,
    subgraphs: bool,
    version: str,
    kinds: tuple[str, ...] = ("updates", "values"),
    fields: tuple[str, ...] = ("deadline_outcome", "deadline_trace"),
) -> list[Any]:
    """The last chunks of a stream that ended early, in the caller's stream format: an update
    from the step that ran out (its `fields`: outcome, trace) and the final values (of those
    `kinds` that the caller's modes ask for)."""
    tagged = not isinstance(mode, str)  # a list of modes, even of one: LangGraph tags chunks
    modes = list(mode) if tagged else [mode]
    update = {k: state[k] for k in fields if k in state}
    parts = []
    if "updates" in modes and "updates" in kinds:
        parts.append(("updates", {step or "deadline": update}))
    if "values" in modes and "values" in kinds:
        parts.append(("values", dict(state)))
    chunks: list[Any] = []
    for kind, payload in parts:
        if version == "v2":
            chunks.append({"type": kind, "ns": (), "data": payload})
        elif subgraphs:
            chunks.append(((), kind, payload) if tagged else ((), payload))
        else:
            chunks.append((kind, payload) if tagged else payload)
    return chunks
