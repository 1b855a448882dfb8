"""The deadline in state the way users write it, on real checkpointers (in memory, SQLite,
PostgreSQL): a `Deadline` anywhere a state update goes, and a new deadline on a used thread."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_deadline import Deadline, DeadlineState, Terminal, budgeted, with_deadlines


class State(DeadlineState):
    text: str


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemorySaver()
    elif request.param == "sqlite":
        conn = sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False)
        yield SqliteSaver(conn)
        conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        url = request.getfixturevalue("postgres")
        with PostgresSaver.from_conn_string(url) as pg:
            pg.setup()
            yield pg


def _thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def _ask(state: State) -> dict[str, Any]:
    answer = interrupt("go on?")
    return {"text": f"{state['text']} {answer}"}


def _echo(state: State) -> dict[str, Any]:
    return {"text": state["text"] + "!"}


def _graph(node: Any) -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b


def test_a_deadline_object_in_the_input_is_checkpointed_as_plain_data(saver: Any) -> None:
    graph = with_deadlines(_graph(_echo), checkpointer=saver)
    cfg = _thread()
    d = Deadline.after(5)
    out = graph.invoke({"text": "hi", "deadline": d}, cfg)
    assert out["deadline"] == d.timestamp
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert graph.get_state(cfg).values["deadline"] == d.timestamp


def test_a_deadline_object_in_update_state_and_in_a_resume_command(saver: Any) -> None:
    graph = with_deadlines(_graph(_ask), checkpointer=saver)
    cfg = _thread()
    first = Deadline.after(30)
    graph.invoke({"text": "q", "deadline": first}, cfg)
    sooner = Deadline.after(20)
    graph.update_state(cfg, {"deadline": sooner})
    assert graph.get_state(cfg).values["deadline"] == sooner.timestamp
    out = graph.invoke(Command(resume="yes", update={"deadline": Deadline.after(10)}), cfg)
    assert out["text"] == "q yes"
    assert out["deadline"] < sooner.timestamp  # earlier: taken
    assert graph.get_state(cfg).values["deadline"] == out["deadline"]


def test_a_node_returning_a_command_with_a_deadline_object(saver: Any) -> None:
    def tighten(state: State) -> Command[Any]:
        return Command(update={"deadline": Deadline.after(1)})

    graph = with_deadlines(_graph(tighten), timeout=60, checkpointer=saver)
    out = graph.invoke({"text": "x"}, _thread())
    assert out["deadline"] - time.time() < 1.5


@pytest.mark.parametrize("wrapped", [True, False], ids=["with_deadlines", "compiled"])
def test_a_new_run_on_a_used_thread_takes_the_deadline_in_its_input(
    saver: Any, wrapped: bool
) -> None:
    builder = _graph(budgeted(_echo))
    graph: Any = with_deadlines(builder, checkpointer=saver) if wrapped else builder.compile(saver)
    cfg = _thread()
    first = Deadline.after(0.5)
    out = graph.invoke({"text": "turn 1", "deadline": first if wrapped else first.timestamp}, cfg)
    assert out["text"] == "turn 1!"
    time.sleep(first.remaining() + 0.05)  # turn 1's deadline has passed
    second = Deadline.after(30)
    out = graph.invoke({"text": "turn 2", "deadline": second if wrapped else second.timestamp}, cfg)
    assert out["text"] == "turn 2!"
    assert out["deadline"] == second.timestamp
    assert [r.status.value for r in out["deadline_trace"]][-1] == "completed"


def test_an_agent_chat_turn_on_a_used_thread_takes_the_deadline_in_its_input(saver: Any) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from langgraph_deadline.agents import DeadlineMiddleware
    from tests.chat_models import ScriptedChatModel

    agent = create_agent(
        ScriptedChatModel(), [], middleware=[DeadlineMiddleware()], checkpointer=saver
    )
    cfg = _thread()
    agent.invoke({"messages": [HumanMessage("1")], "deadline": Deadline.after(0.05).timestamp}, cfg)
    time.sleep(0.1)
    second = Deadline.after(30).timestamp
    out = agent.invoke({"messages": [HumanMessage("2")], "deadline": second}, cfg)
    assert out["deadline"] == second
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["messages"][-1].content == "done"


def test_a_resume_keeps_the_checkpointed_deadline_on_a_compiled_graph(saver: Any) -> None:
    graph = _graph(_ask).compile(saver)
    cfg = _thread()
    first = Deadline.after(5).timestamp
    graph.invoke({"text": "q", "deadline": first}, cfg)
    out = graph.invoke(Command(resume="y", update={"deadline": time.time() + 3600}), cfg)
    assert out["deadline"] == first


STRICT_SCRIPT = """
import logging, sqlite3, sys, time, uuid
logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from langgraph_deadline import Deadline, DeadlineState, Terminal, with_deadlines

class S(DeadlineState):
    text: str

def ask(state):
    return {"text": interrupt("go on?")}

b = StateGraph(S)
b.add_node("ask", ask)
b.add_edge(START, "ask")
b.add_edge("ask", END)

def check(saver):
    cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
    g = with_deadlines(b, timeout=30, checkpointer=saver)
    g.invoke({"text": "q", "deadline": Deadline.after(20)}, cfg)
    g.update_state(cfg, {"deadline": Deadline.after(10)})
    out = g.invoke(Command(resume="y", update={"deadline": Deadline.after(5)}), cfg)
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED, out
    g = with_deadlines(b, timeout=30, checkpointer=saver)  # read back from storage
    values = g.get_state(cfg).values
    assert isinstance(values["deadline"], float), values
    assert values["deadline_trace"][0].name == "ask", values
    second = g.invoke({"text": "again", "deadline": Deadline.after(25)}, cfg)
    assert second["deadline"] > out["deadline"] + 15, (second, out)

check(InMemorySaver())
conn = sqlite3.connect(sys.argv[1], check_same_thread=False)
check(SqliteSaver(conn))
with PostgresSaver.from_conn_string(sys.argv[2]) as pg:
    pg.setup()
    check(pg)
print("OK")
"""


def test_deadline_objects_round_trip_under_strict_msgpack_without_warnings(
    tmp_path: Path, postgres: str
) -> None:
    """LANGGRAPH_STRICT_MSGPACK is read at import time: check it in a fresh interpreter."""
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    args = [sys.executable, "-c", STRICT_SCRIPT, str(tmp_path / "cp.sqlite"), postgres]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OK", proc.stdout  # no warning logged: nothing unregistered


def test_after_a_run_that_ran_out_the_next_run_takes_the_deadline_in_its_input(
    saver: Any,
) -> None:
    def slow(state: State) -> dict[str, Any]:
        time.sleep(0.2)
        return {"text": state["text"] + "!"}

    graph = _graph(budgeted(slow)).compile(saver)
    cfg = _thread()
    first = graph.invoke({"text": "1", "deadline": Deadline.after(0.05).timestamp}, cfg)
    assert first["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    second = Deadline.after(30).timestamp
    out = graph.invoke({"text": "2", "deadline": second, "deadline_outcome": None}, cfg)
    assert out["deadline"] == second
    assert out["text"] == "2!"
