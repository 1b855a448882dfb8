"""What a client of a served graph can do to its budget: shorten it, never lengthen it.

Whatever enters a `with_deadlines` graph from outside (a run's input, a `Command`, a resume,
`update_state`) stores no deadline later than `timeout` from now and the deadline in context;
an explicit grant (`deadline_input`) replaces the thread's, within the same limit. And any
input that is not a resume starts a new run, whatever form its state takes. On real
checkpointers, in memory and SQLite, through `interrupt()` and resume.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Overwrite, interrupt

from langgraph_deadline import (
    Deadline,
    DeadlineDataclass,
    DeadlineModel,
    DeadlineState,
    Terminal,
    deadline_input,
    deadline_scope,
    remaining,
    with_deadlines,
)

TIMEOUT = 5.0
HOUR = 3600.0


class State(DeadlineState):
    text: str


@pytest.fixture(params=["memory", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemorySaver()
        return
    conn = sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


def _thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def _ask(state: Any) -> dict[str, Any]:
    """Pause for an answer, then say how much time the resumed node had."""
    answer = interrupt("go on?")
    return {"text": f"{answer} {remaining():.3f}"}


def _asking() -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(State)
    b.add_node("ask", _ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    return b


def _left(out: dict[str, Any]) -> float:
    """The time the resumed node had, as it said."""
    return float(out["text"].split()[-1])


def _stored(graph: Any, cfg: dict[str, Any]) -> float:
    """Seconds from now to the deadline the thread's checkpoint holds."""
    return float(graph.get_state(cfg).values["deadline"]) - time.time()


# -- Command input and resume -------------------------------------------------------------------


def test_a_command_on_a_fresh_thread_cannot_set_a_later_deadline(saver: Any) -> None:
    graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
    cfg = _thread()
    paused = graph.invoke(Command(update={"deadline": time.time() + HOUR}), cfg)
    assert "__interrupt__" in paused
    assert _stored(graph, cfg) <= TIMEOUT
    out = graph.invoke(Command(resume="y"), cfg)
    assert out["text"].startswith("y ")
    assert 0 < _left(out) <= TIMEOUT
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED


def test_a_command_may_still_set_an_earlier_deadline(saver: Any) -> None:
    graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
    cfg = _thread()
    sooner = Deadline.after(2.0)
    graph.invoke(Command(update={"deadline": sooner}), cfg)
    assert graph.get_state(cfg).values["deadline"] == sooner.timestamp
    out = graph.invoke(Command(resume="y"), cfg)
    assert _left(out) <= 2.0


@pytest.mark.parametrize(
    "later",
    [None, Overwrite(None), time.time() + HOUR],
    ids=["none", "overwrite-none", "an-hour"],
)
def test_a_resume_cannot_clear_or_push_back_the_deadline(saver: Any, later: Any) -> None:
    graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
    cfg = _thread()
    graph.invoke(Command(update={"deadline": later}), cfg)
    assert _stored(graph, cfg) <= TIMEOUT  # not None: no deadline is later than any
    out = graph.invoke(Command(resume="y", update={"deadline": later}), cfg)
    assert 0 < _left(out) <= TIMEOUT
    assert out["deadline"] - time.time() <= TIMEOUT


def test_a_thread_a_command_started_keeps_one_deadline_across_resumes(saver: Any) -> None:
    def twice(state: State) -> dict[str, Any]:
        first, second = interrupt("one?"), interrupt("two?")
        return {"text": f"{first} {second}"}

    b = StateGraph(State)
    b.add_node("ask", twice)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    graph = with_deadlines(b, timeout=0.6, checkpointer=saver)
    cfg = _thread()
    graph.invoke(Command(update={"text": "x"}), cfg)  # no deadline sent: the run's is kept
    assert _stored(graph, cfg) <= 0.6
    time.sleep(0.35)
    assert "__interrupt__" in graph.invoke(Command(resume="a"), cfg)
    time.sleep(0.35)
    out = graph.invoke(Command(resume="b"), cfg)  # 0.7 s after the start: not 0.6 s afresh
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


def test_a_grant_on_resume_gives_a_fresh_budget_within_the_timeout(saver: Any) -> None:
    graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
    cfg = _thread()
    graph.invoke({"text": "q"}, cfg)
    out = graph.invoke(Command(resume="y", update=deadline_input(HOUR)), cfg)
    assert 0 < _left(out) <= TIMEOUT
    assert out["deadline"] - time.time() <= TIMEOUT
    assert _stored(graph, cfg) <= TIMEOUT


def test_a_grant_after_the_deadline_passed_resumes_within_the_timeout(saver: Any) -> None:
    graph = with_deadlines(_asking(), timeout=0.3, checkpointer=saver)
    cfg = _thread()
    graph.invoke({"text": "q"}, cfg)
    time.sleep(0.35)
    late = graph.invoke(Command(resume="y"), cfg)
    assert late["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    out = graph.invoke(Command(resume="y", update=deadline_input(HOUR)), cfg)
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert 0 < _left(out) <= 0.3


def test_the_deadline_in_context_bounds_what_a_command_sets(saver: Any) -> None:
    graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
    cfg = _thread()
    with deadline_scope(1.0):
        graph.invoke(Command(update=deadline_input(HOUR)), cfg)
    assert _stored(graph, cfg) <= 1.0


@pytest.mark.anyio
async def test_a_command_cannot_extend_the_budget_on_async_sqlite(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
        cfg = _thread()
        await graph.ainvoke(Command(update={"deadline": time.time() + HOUR}), cfg)
        stored = (await graph.aget_state(cfg)).values["deadline"]
        assert stored - time.time() <= TIMEOUT
        chunks = [c async for c in graph.astream(Command(resume="y"), cfg, stream_mode="values")]
        assert 0 < _left(chunks[-1]) <= TIMEOUT
        await graph.aupdate_state(cfg, deadline_input(HOUR))
        stored = (await graph.aget_state(cfg)).values["deadline"]
        assert stored - time.time() <= TIMEOUT


# -- update_state ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "update",
    [{"deadline": time.time() + HOUR}, deadline_input(HOUR), {"deadline": None}],
    ids=["later", "grant", "none"],
)
def test_update_state_stores_no_deadline_later_than_the_timeout(
    saver: Any, update: dict[str, Any]
) -> None:
    graph = with_deadlines(_asking(), timeout=TIMEOUT, checkpointer=saver)
    fresh, paused = _thread(), _thread()
    graph.update_state(fresh, {"text": "x", **update})
    assert _stored(graph, fresh) <= TIMEOUT
    graph.invoke({"text": "q"}, paused)
    graph.update_state(paused, update)
    assert _stored(graph, paused) <= TIMEOUT
    out = graph.invoke(Command(resume="y"), paused)
    assert 0 < _left(out) <= TIMEOUT


# -- a state instance as a new run's input ---------------------------------------------------------


class ModelState(DeadlineModel):
    text: str


@dataclasses.dataclass
class DataclassState(DeadlineDataclass):
    text: str


FORMS = pytest.mark.parametrize(
    "schema", [ModelState, DataclassState], ids=["pydantic", "dataclass"]
)


def _calls(schema: type[Any], calls: list[str]) -> StateGraph[Any, Any, Any, Any]:
    def work(state: Any) -> dict[str, Any]:
        calls.append(state.text)
        if state.text == "slow":
            time.sleep(0.3)
        return {"text": state.text + "!"}

    b = StateGraph(schema)
    b.add_node("work", work)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b


@FORMS
def test_a_state_instance_starts_a_new_run_after_one_that_ran_out(
    schema: type[Any], saver: Any
) -> None:
    calls: list[str] = []
    graph = with_deadlines(_calls(schema, calls), timeout=0.1, checkpointer=saver)
    cfg = _thread()
    first = graph.invoke(schema(text="slow"), cfg)
    assert first["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    second = graph.invoke(schema(text="fast"), cfg)
    assert calls == ["slow", "fast"]
    assert second["text"] == "fast!"
    assert second["deadline_outcome"].terminal is Terminal.COMPLETED
    assert [r.name for r in second["deadline_trace"]] == ["work"]
    assert second["deadline"] > first["deadline"]  # its own, fresh deadline


@FORMS
def test_a_state_instance_gives_its_deadline_within_the_timeout(
    schema: type[Any], saver: Any
) -> None:
    graph = with_deadlines(_calls(schema, []), timeout=TIMEOUT, checkpointer=saver)
    sooner = Deadline.after(2.0).timestamp
    out = graph.invoke(schema(text="a", deadline=sooner), _thread())
    assert out["deadline"] == sooner
    out = graph.invoke(schema(text="b", deadline=time.time() + HOUR), _thread())
    assert out["deadline"] - time.time() <= TIMEOUT


@FORMS
def test_update_state_with_a_state_instance_is_bounded_too(schema: type[Any], saver: Any) -> None:
    graph = with_deadlines(_calls(schema, []), timeout=TIMEOUT, checkpointer=saver)
    cfg = _thread()
    graph.update_state(cfg, schema(text="x", deadline=time.time() + HOUR))
    assert _stored(graph, cfg) <= TIMEOUT
