"""Reading a run's stream (the latest full state, an interrupt) and ending it in its own format."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.types import Command, Overwrite

from langgraph_deadline import Deadline
from langgraph_deadline._core.tracker import RunTracker
from langgraph_deadline._graph.chunks import closing_chunks, deadline_given, note_chunk


@pytest.mark.parametrize(
    ("mode", "chunk"),
    [
        ("values", {"n": 1}),
        (["updates", "values"], ("values", {"n": 1})),
        (["values"], ((), "values", {"n": 1})),
        ("values", {"type": "values", "ns": (), "data": {"n": 1}}),
    ],
)
def test_the_latest_full_state_is_kept_from_every_stream_format(mode: Any, chunk: Any) -> None:
    run = RunTracker(deadline=None)
    note_chunk(run, chunk, mode)
    assert run.latest == {"n": 1}


def test_an_interrupt_in_the_stream_is_noticed_and_subgraph_values_are_not_the_state() -> None:
    run = RunTracker(deadline=None)
    note_chunk(run, ("updates", {"__interrupt__": ()}), ["updates", "values"])
    assert run.interrupted
    note_chunk(run, (("sub",), "values", {"inner": 1}), ["values"])
    assert run.latest is None


def test_the_deadline_a_runs_input_gives() -> None:
    d = Deadline.after(5)
    given = deadline_given({"deadline": d.timestamp})
    assert given is not None and given.timestamp == d.timestamp
    command = deadline_given(Command(update={"deadline": Overwrite(d.timestamp)}))
    assert command is not None and command.timestamp == d.timestamp
    assert deadline_given({"other": 1}) is None
    assert deadline_given(None) is None


@pytest.mark.parametrize(
    ("mode", "subgraphs", "version", "expected"),
    [
        ("values", False, "v1", [{"deadline_outcome": "o", "x": 1}]),
        (["updates", "values"], False, "v1", ["updates", "values"]),
        (["values"], True, "v1", [((), {"deadline_outcome": "o", "x": 1})]),
        ("values", False, "v2", ["values"]),
        ("messages", False, "v1", []),
    ],
)
def test_closing_chunks_follow_the_callers_stream_format(
    mode: Any, subgraphs: bool, version: str, expected: list[Any]
) -> None:
    chunks = closing_chunks(
        {"deadline_outcome": "o", "x": 1}, "step", mode, subgraphs=subgraphs, version=version
    )
    if expected and isinstance(expected[0], str):
        kinds = [c["type"] if isinstance(c, dict) and "type" in c else c[0] for c in chunks]
        assert kinds == expected
    else:
        assert chunks == expected
