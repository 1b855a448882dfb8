"""What a run's input may carry in `deadline`: refused at the entry when it is no deadline, and
never able to push the run's deadline back."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Overwrite, interrupt

from langgraph_deadline import Deadline, DeadlineState, with_deadlines
from langgraph_deadline._core.deadline import SYSTEM_CLOCK
from langgraph_deadline._graph.inputs import entry_input, plain_input


class State(DeadlineState):
    text: str


def _graph(node: Any) -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b


def _echo(state: State) -> dict[str, Any]:
    return {"text": state["text"]}


def test_plain_input_turns_deadlines_into_epoch_seconds_everywhere() -> None:
    d = Deadline.after(5)
    assert plain_input({"deadline": d, "x": 1}) == {"deadline": d.timestamp, "x": 1}
    cmd = plain_input(Command(resume=1, update={"deadline": d}))
    assert cmd.update == {"deadline": d.timestamp} and cmd.resume == 1
    listed = plain_input(Command(update=[("deadline", d)]))
    assert listed.update == [("deadline", d.timestamp)]
    grant = plain_input({"deadline": Overwrite(d)})["deadline"]
    assert isinstance(grant, Overwrite) and grant.value == d.timestamp
    late, early = 1_800_000_010.0, 1_800_000_005.0  # epoch seconds
    assert plain_input({"deadline": late}, not_after=early) == {"deadline": early}
    assert plain_input(None) is None and plain_input("text") == "text"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-1.0, ValueError),
        (1_796_208_303_752.0, ValueError),  # milliseconds (2026-12-02 as epoch milliseconds)
        ("2030-01-01", TypeError),
        (dt.datetime(2026, 12, 2, tzinfo=dt.UTC), TypeError),
    ],
    ids=["nan", "inf", "negative", "milliseconds", "a-string", "a-datetime"],
)
def test_a_bad_deadline_in_the_input_is_refused_at_the_entry_naming_the_field(
    value: object, error: type[Exception]
) -> None:
    graph = with_deadlines(_graph(_echo), timeout=5)
    with pytest.raises(error, match="'deadline'"):
        graph.invoke({"text": "x", "deadline": value})


@pytest.mark.parametrize("value", [5, 0, 30.0, 946_684_799.0])  # before 2000-01-01
def test_a_duration_given_as_the_input_deadline_is_refused_pointing_to_deadline_after(
    value: float,
) -> None:
    ran: list[str] = []

    async def node(state: State) -> dict[str, Any]:
        ran.append(state["text"])
        return {"text": "done"}

    graph = with_deadlines(_graph(node), timeout=5)
    hint = rf"'deadline' must be epoch seconds after 2000-01-01.*Deadline\.after\({value!r}\)"
    with pytest.raises(ValueError, match=hint):
        graph.invoke({"text": "x", "deadline": value})
    with pytest.raises(ValueError, match=hint):
        asyncio.run(graph.ainvoke({"text": "x", "deadline": value}))
    with pytest.raises(ValueError, match=hint):
        list(graph.stream({"text": "x", "deadline": value}))
    assert ran == []  # refused at the entry, not "the deadline had passed before it started"


def test_a_resume_with_a_later_deadline_does_not_extend_the_run() -> None:
    def ask(state: State) -> dict[str, Any]:
        return {"text": interrupt("go on?")}

    graph = with_deadlines(_graph(ask), timeout=5, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"text": "q"}, cfg)["deadline"]
    out = graph.invoke(Command(resume="y", update={"deadline": time.time() + 3600}), cfg)
    assert out["text"] == "y"
    assert out["deadline"] == first


def test_update_state_cannot_push_a_finished_runs_deadline_back() -> None:
    graph = with_deadlines(_graph(_echo), timeout=5, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"text": "q"}, cfg)["deadline"]
    graph.update_state(cfg, {"deadline": Deadline.after(3600)})
    assert graph.get_state(cfg).values["deadline"] == first


T = 1_800_000_000.0  # epoch seconds in 2027: a deadline, not a duration


def test_plain_input_brings_every_deadline_back_to_the_limit_a_grant_and_none_included() -> None:
    assert plain_input({"deadline": T + 10}, limit=T + 5) == {"deadline": T + 5}
    assert plain_input({"deadline": T + 3}, not_after=T + 4, limit=T + 5) == {"deadline": T + 3}
    assert plain_input({"deadline": None}, limit=T + 5) == {"deadline": T + 5}
    grant = plain_input({"deadline": Overwrite(T + 10)}, not_after=T + 1, limit=T + 5)
    assert isinstance(grant["deadline"], Overwrite)
    assert grant["deadline"].value == T + 5  # a grant ignores not_after
    cleared = plain_input(Command(update={"deadline": Overwrite(None)}), limit=T + 5).update
    assert cleared["deadline"].value == T + 5
    listed = plain_input(
        Command(update=[("deadline", T + 10)]), limit=Deadline._at(T + 5, SYSTEM_CLOCK)
    )
    assert listed.update == [("deadline", T + 5)]
    assert plain_input({"deadline": None}) == {"deadline": None}  # no limit: no deadline stays


def test_entry_input_reads_a_resume_command_as_a_command_not_as_a_state() -> None:
    resume = Command(resume="y", update={"deadline": T + 10})
    entered = entry_input(resume, Deadline._at(T + 5, SYSTEM_CLOCK), fields=True)
    assert isinstance(entered, Command) and entered.resume == "y"
    assert entered.update == {"deadline": T + 5}
