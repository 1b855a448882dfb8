"""A new run whose deadline passed before it started (a served run that waited in the queue too
long, a caller out of time): no node runs, and it ends as every run ends, on every entry point.

With the deadline fields, the run's input is applied as a run's input is, with the outcome, and
the run stops before its first node: `invoke` returns that state, `stream` yields it in the
modes asked for (a last `updates` chunk carries the outcome), and a checkpointed thread holds
it, its first node pending (a resume that grants time runs it). LangGraph Server reads its
answer from that stream and its thread from that checkpoint. Without the fields,
`DeadlineExceeded` is raised and nothing is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Overwrite

from .._core.plan import RunTracker
from .._core.records import Outcome, Terminal
from .chunks import closing_chunks
from .resume import saved
from .terminal import emit_run_outcome, exceeded

if TYPE_CHECKING:
    from .graph import DeadlineRuns

__all__ = ["alate_chunks", "alate_result", "late_chunks", "late_result", "too_late"]

_FIELDS: Final = frozenset({"deadline", "deadline_outcome", "deadline_trace"})
_REASON: Final = "the run's deadline had passed before it started: nothing was run"


def too_late(graph: DeadlineRuns, run: RunTracker, input: Any) -> Any:
    """The state a new run whose deadline had passed before it started ends with (its input and
    the outcome), or None to go on. Graphs without deadline fields raise `DeadlineExceeded`."""
    d = run.deadline
    if d is None or not d.expired:
        return None
    outcome = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, reason=_REASON, elapsed_ms=0.0)
    run.outcome = outcome
    emit_run_outcome(run, outcome)
    state = (
        {k: v for k, v in input.items() if k not in _FIELDS} if isinstance(input, Mapping) else {}
    )
    if not graph.deadline_settings.has_fields:
        raise exceeded(outcome, d, state if graph.deadline_settings.has_state else None)
    return {**state, "deadline": d.timestamp, "deadline_outcome": outcome, "deadline_trace": []}


def _applied(
    graph: DeadlineRuns, run: RunTracker, input: Any, cfg: RunnableConfig
) -> dict[str, Any] | None:
    """The input LangGraph applies for the late run (the outcome in it), or None when there is
    no thread to write to (the caller gets the input and the outcome, at the cost of a dict) or
    the input is not a state (a `Command` granting a deadline: nothing is applied)."""
    if not isinstance(input, Mapping) or run.outcome is None or not saved(graph, cfg):
        return None
    return {
        **input,
        "deadline_outcome": Overwrite(run.outcome.to_dict()),
        "deadline_trace": Overwrite([]),
    }


def _kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    # Interrupting before every node stops the run once its input is applied (and checkpointed),
    # with the input's values streamed as any run's; the interrupt itself is not passed on.
    return {**kwargs, "interrupt_before": "*"}


def _interrupt(chunk: Any) -> bool:
    """True for the `{"__interrupt__": ()}` update of the stop before the first node."""
    payload = chunk.get("data") if isinstance(chunk, dict) and "type" in chunk else chunk
    if isinstance(payload, tuple) and payload:
        payload = payload[-1]
    return isinstance(payload, dict) and set(payload) == {"__interrupt__"}


def _last_update(
    graph: DeadlineRuns, state: Mapping[str, Any], kwargs: Mapping[str, Any], values_seen: bool
) -> list[Any]:
    """The chunks LangGraph's stream of the late run did not give: the update with the outcome
    (no node ran to give it), and the values when none were streamed (a `Command` input)."""
    return closing_chunks(
        state,
        None,
        kwargs.get("stream_mode") or graph.stream_mode,
        subgraphs=bool(kwargs.get("subgraphs", False)),
        version=str(kwargs.get("version", "v1")),
        kinds=("updates",) if values_seen else ("updates", "values"),
    )


def late_chunks(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig, **kw: Any
) -> Iterator[Any]:
    """The stream of a late run (see the module's docstring)."""
    applied = _applied(graph, run, input, cfg)
    seen = False
    if applied is not None:
        for chunk in CompiledStateGraph.stream(graph, applied, cfg, **_kwargs(kw)):
            if not _interrupt(chunk):
                seen = True
                yield chunk
    yield from _last_update(graph, refused, kw, seen)


async def alate_chunks(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig, **kw: Any
) -> AsyncIterator[Any]:
    """`late_chunks`, asynchronously."""
    applied = _applied(graph, run, input, cfg)
    seen = False
    if applied is not None:
        async for chunk in CompiledStateGraph.astream(graph, applied, cfg, **_kwargs(kw)):
            if not _interrupt(chunk):
                seen = True
                yield chunk
    for chunk in _last_update(graph, refused, kw, seen):
        yield chunk


def late_result(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig
) -> Any:
    """What `invoke` returns for a late run: the state its stream ends with."""
    state = refused
    if saved(graph, cfg):
        for chunk in late_chunks(graph, run, refused, input, cfg, stream_mode="values"):
            state = chunk
    return state


async def alate_result(
    graph: DeadlineRuns, run: RunTracker, refused: Any, input: Any, cfg: RunnableConfig
) -> Any:
    """`late_result`, asynchronously."""
    state = refused
    if saved(graph, cfg):
        async for chunk in alate_chunks(graph, run, refused, input, cfg, stream_mode="values"):
            state = chunk
    return state
