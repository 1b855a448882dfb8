"""What a run's input and stream say about it (a deadline given in the input, the latest full
state seen in the stream, an interrupt), and the last chunks that tell how it ended."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any

from langgraph.types import Command, Overwrite

from .._core.deadline import Deadline
from .._core.plan import RunTracker
from .._core.records import Outcome
from .state import deadline_from_state, traced

__all__ = [
    "NotedStream",
    "closing",
    "closing_chunks",
    "completed_chunks",
    "deadline_given",
    "note_chunk",
]


def deadline_given(input: Any) -> Deadline | None:
    """The deadline a run's input (a state update, or a `Command`'s update) sets, if any."""
    update = input.update if isinstance(input, Command) else input
    if not isinstance(update, Mapping):
        return None
    value = update.get("deadline")
    if isinstance(value, Overwrite):
        value = value.value
    return None if value is None else deadline_from_state({"deadline": value})


def note_chunk(run: RunTracker, chunk: Any, mode: Any) -> None:
    """Keep the latest full state seen in the stream, for a run that must end early."""
    if type(chunk) is tuple and len(chunk) == 2 and type(mode) is not str:
        # `(mode, payload)`: the two chunks of every step under LangGraph's `ainvoke`, first and
        # in short (a pair under one mode is `(namespace, payload)`: noted the same way below)
        kind, payload = chunk
        if isinstance(payload, dict) and "__interrupt__" in payload:
            run.interrupted = True
        if kind == "values":
            run.latest = payload
        return
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


class NotedStream:
    """A stream of LangGraph's with each chunk noted (`note_chunk`) on its way: an object, not
    one more generator frame, for every run `DeadlineGraph.ainvoke` makes. Once the run reads
    its state from its graph (`RunTracker.read`, given by its first node), the chunks pass as
    they are. It closes as the stream it wraps does (`aclose`, for a reader that closes what
    it reads)."""

    __slots__ = ("_inner", "_mode", "_run")

    def __init__(self, inner: AsyncGenerator[Any, None], run: RunTracker, mode: Any) -> None:
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
        note_chunk(self._run, chunk, self._mode)
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


def closing(
    state: Any, run: RunTracker, mode: Any, kwargs: Mapping[str, Any], *, news: bool = False
) -> list[Any]:
    """The chunks that tell a stream's consumer how the run ended early (none when the stream
    already said all of it: the step that ran out wrote its outcome itself; `news` when it
    did not run at all). `kwargs` are the stream's (`subgraphs`, `version`)."""
    run.final = state
    if not (run.final_news or news) or not isinstance(state, Mapping):
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
    has_fields: bool,
    outcome: Outcome | None,
    run: RunTracker,
    mode: Any,
    kwargs: Mapping[str, Any],
) -> list[Any]:
    """The chunks that tell a stream's consumer its run completed (a state `has_fields`): the
    outcome's update with the run's trace (with the records its nodes left out of their
    updates), and the last values with them, as the thread holds them."""
    if not (has_fields and outcome is not None and outcome.ok):
        return []
    latest = run.latest if isinstance(run.latest, Mapping) else {}
    return closing_chunks(
        {**latest, "deadline_outcome": outcome, "deadline_trace": traced(latest, run.records)},
        None,
        mode,
        subgraphs=bool(kwargs.get("subgraphs", False)),
        version=str(kwargs.get("version", "v1")),
    )
