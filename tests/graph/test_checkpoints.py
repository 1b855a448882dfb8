"""Deadlines across checkpoints: a real SQLite checkpointer, interrupts and resumes."""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.errors import NodeTimeoutError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, TimeoutPolicy, interrupt

from langgraph_deadline import (
    DeadlineState,
    Terminal,
    deadline_input,
    remaining,
    terminal_of,
    with_deadlines,
)
from langgraph_deadline.types import StepStatus


class State(DeadlineState):
    log: list[str]


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


def _slow_then_fast() -> StateGraph[Any, Any, Any, Any]:
    def work(state: State) -> dict[str, Any]:
        delay = 2.0 if not state["log"] else 0.0
        time.sleep(delay)
        return {"log": [*state["log"], "work"]}

    b = StateGraph(State)
    b.add_node("work", work)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b


def test_second_run_on_the_same_thread_gets_its_own_deadline(saver: SqliteSaver) -> None:
    graph = with_deadlines(_slow_then_fast(), timeout=0.5, checkpointer=saver)
    cfg = {"configurable": {"thread_id": "same"}}
    first = graph.invoke({"log": []}, cfg)
    assert first["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    stored = graph.get_state(cfg).values
    assert stored["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED  # in the checkpoint

    time.sleep(0.6)  # the first deadline is long gone
    second = graph.invoke({"log": ["again"]}, cfg)
    assert second["deadline_outcome"].terminal is Terminal.COMPLETED
    assert second["log"] == ["again", "work"]
    assert second["deadline"] > first["deadline"]
    assert [r.status for r in second["deadline_trace"]] == [StepStatus.COMPLETED]


def _approval_graph(calls: list[str]) -> StateGraph[Any, Any, Any, Any]:
    def ask(state: State) -> dict[str, Any]:
        calls.append("ask")
        answer = interrupt("approve?")
        return {"log": [*state["log"], f"answer:{answer}"]}

    def after(state: State) -> dict[str, Any]:
        calls.append("after")
        return {"log": [*state["log"], "after"]}

    b = StateGraph(State)
    b.add_node("ask", ask)
    b.add_node("after", after)
    b.add_edge(START, "ask")
    b.add_edge("ask", "after")
    return b


def test_resume_after_the_deadline_ends_at_once_without_rerunning_nodes(
    saver: SqliteSaver,
) -> None:
    calls: list[str] = []
    graph = with_deadlines(_approval_graph(calls), timeout=0.5, checkpointer=saver)
    cfg = {"configurable": {"thread_id": "hitl"}}
    paused = graph.invoke({"log": []}, cfg)
    assert "__interrupt__" in paused
    assert paused.get("deadline_outcome") is None  # paused, not ended
    time.sleep(0.6)

    t0 = time.monotonic()
    out = graph.invoke(Command(resume="yes"), cfg)
    assert time.monotonic() - t0 < 0.5
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "ask"
    assert calls == ["ask"]  # the interrupted node's body did not run again
    # The checkpoint is left as it was: the run is still paused at "ask", so a resume that
    # grants a new deadline continues there and the answer is not lost.
    snapshot = graph.get_state(cfg)
    assert snapshot.next == ("ask",)
    assert snapshot.values.get("deadline_outcome") is None
    out = graph.invoke(Command(resume="late yes", update=deadline_input(5.0)), cfg)
    assert out["log"] == ["answer:late yes", "after"]
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED


class Branches(DeadlineState):
    log: Annotated[list[str], operator.add]


def _question_beside_a_slow_step(slow: Any) -> StateGraph[Any, Any, Any, Any]:
    """START -> "ask" (asks a person) and "slow" side by side."""

    def ask(state: Branches) -> dict[str, Any]:
        return {"log": [f"answer:{interrupt('approve?')}"]}

    b = StateGraph(Branches)
    b.add_node("ask", ask)
    b.add_node("slow", slow)
    b.add_edge(START, "ask")
    b.add_edge(START, "slow")
    return b


def test_a_question_asked_beside_a_step_the_deadline_cut_is_returned_with_the_outcome(
    saver: SqliteSaver,
) -> None:
    # LangGraph's own run returns a branch's pending question in `__interrupt__` beside what
    # the other branches finished; a run the deadline ended returns it too, or the caller does
    # not know a person has something to answer (it is in the checkpoint all the same).
    sleeps = iter([2.0])

    def slow(state: Branches) -> dict[str, Any]:
        time.sleep(next(sleeps, 0.0))
        return {"log": ["slow"]}

    graph = with_deadlines(_question_beside_a_slow_step(slow), checkpointer=saver)
    cfg = {"configurable": {"thread_id": "asked"}}
    out = graph.invoke({"log": [], **deadline_input(0.5)}, cfg)
    assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "slow"
    assert [i.value for i in out["__interrupt__"]] == ["approve?"]
    assert [i.id for i in out["__interrupt__"]] == [i.id for i in graph.get_state(cfg).interrupts]
    # The answer, with more time: the question's branch takes it, the cut step runs again.
    done = graph.invoke(Command(resume="yes", update=deadline_input(10.0)), cfg)
    assert done["deadline_outcome"].terminal is Terminal.COMPLETED
    assert sorted(done["log"]) == ["answer:yes", "slow"]
    assert "__interrupt__" not in done


@pytest.mark.anyio
async def test_a_question_asked_beside_a_step_the_deadline_cut_is_returned_async(
    tmp_path: Path,
) -> None:
    sleeps = iter([10.0])

    async def slow(state: Branches) -> dict[str, Any]:
        await asyncio.sleep(next(sleeps, 0.0))
        return {"log": ["slow"]}

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        graph = with_deadlines(_question_beside_a_slow_step(slow), checkpointer=saver)
        cfg = {"configurable": {"thread_id": "asked"}}
        t0 = time.monotonic()
        out = await graph.ainvoke({"log": [], **deadline_input(0.5)}, cfg)
        assert time.monotonic() - t0 < 5.0  # cut, not slept out
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED
        assert [i.value for i in out["__interrupt__"]] == ["approve?"]
        done = await graph.ainvoke(Command(resume="yes", update=deadline_input(10.0)), cfg)
    assert done["deadline_outcome"].terminal is Terminal.COMPLETED
    assert sorted(done["log"]) == ["answer:yes", "slow"]


def test_a_new_budget_can_be_granted_explicitly_on_resume(saver: SqliteSaver) -> None:
    calls: list[str] = []
    graph = with_deadlines(_approval_graph(calls), timeout=0.5, checkpointer=saver)
    cfg = {"configurable": {"thread_id": "hitl-grant"}}
    graph.invoke({"log": []}, cfg)
    time.sleep(0.6)
    out = graph.invoke(Command(resume="yes", update=deadline_input(5.0)), cfg)
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["log"] == ["answer:yes", "after"]


@pytest.mark.anyio
async def test_a_resumed_run_keeps_its_original_deadline(tmp_path: Path) -> None:
    """Resume in a fresh saver (as another worker would): the budget is not refreshed."""
    calls: list[str] = []
    path = tmp_path / "resume.sqlite"
    cfg = {"configurable": {"thread_id": "keep"}}
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        graph = with_deadlines(_approval_graph(calls), timeout=2.0, checkpointer=saver)
        await graph.ainvoke({"log": []}, cfg)
        original = (await graph.aget_state(cfg)).values["deadline"]
    await asyncio.sleep(0.5)
    seen: list[float] = []

    async def after(state: State) -> dict[str, Any]:
        seen.append(remaining())
        return {}

    b = _approval_graph(calls)
    b.nodes.pop("after")
    b.add_node("after", after)
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        graph = with_deadlines(b, timeout=60.0, checkpointer=saver)  # its timeout does not apply
        out = await graph.ainvoke(Command(resume="ok"), cfg)
    assert out["deadline"] == original
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert seen
    assert seen[0] < 1.6


@pytest.mark.anyio
async def test_tools_in_a_tool_node_see_the_runs_deadline_through_the_context() -> None:
    @tool
    async def probe(query: str) -> str:
        """Report the time left."""
        return f"{remaining():.3f}"

    class Msgs(MessagesState, DeadlineState):
        pass

    def agent(state: Msgs) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done")]}
        call = {"name": "probe", "args": {"query": "x"}, "id": "call-1", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    b = StateGraph(Msgs)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode([probe]))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    b.add_edge("tools", "agent")
    out = await with_deadlines(b, timeout=5.0, caps={"tools": 1.0}).ainvoke(
        {"messages": [("user", "hi")]}
    )
    tool_msg = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert 0 < float(tool_msg.content) <= 1.0
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED


@pytest.mark.anyio
@pytest.mark.parametrize(("policy", "deadline", "limit"), [(0.3, 5.0, 0.3), (5.0, 0.3, 0.3)])
async def test_timeout_policy_and_budget_the_smaller_wins(
    policy: float, deadline: float, limit: float
) -> None:
    async def hang(state: State) -> dict[str, Any]:
        await asyncio.sleep(10)
        return {}

    b = StateGraph(State)
    b.add_node("hang", hang, timeout=TimeoutPolicy(run_timeout=policy))
    b.add_edge(START, "hang")
    graph = with_deadlines(b, timeout=deadline)
    t0 = time.monotonic()
    error: BaseException | None = None
    out: dict[str, Any] = {}
    try:
        out = await graph.ainvoke({"log": []})
    except Exception as exc:  # LangGraph's own node timeout error, when the policy wins
        error = exc
    assert time.monotonic() - t0 < limit + 0.5
    if policy < deadline:
        assert isinstance(error, NodeTimeoutError), repr(error)
        assert terminal_of(error) is Terminal.DEADLINE_EXCEEDED
    else:
        assert error is None
        assert out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED


def test_a_thread_without_a_new_deadline_does_not_inherit_the_old_one(saver: SqliteSaver) -> None:
    def work(state: State) -> dict[str, Any]:
        return {"log": [*state["log"], "work"]}

    b = StateGraph(State)
    b.add_node("work", work)
    b.add_edge(START, "work")
    cfg = {"configurable": {"thread_id": "no-timeout"}}
    with_deadlines(b, timeout=0.05, checkpointer=saver).invoke({"log": []}, cfg)
    time.sleep(0.1)  # that deadline has passed
    out = with_deadlines(b, checkpointer=saver).invoke({"log": []}, cfg)  # no timeout at all
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    assert out["deadline"] is None


def test_a_node_returning_a_deadline_object_is_checkpointed_as_plain_data(
    saver: SqliteSaver,
) -> None:
    from langgraph_deadline import Deadline

    def tighten(state: State) -> dict[str, Any]:
        return {"deadline": Deadline.after(1.0)}

    b = StateGraph(State)
    b.add_node("tighten", tighten)
    b.add_edge(START, "tighten")
    cfg = {"configurable": {"thread_id": "tighten"}}
    out = with_deadlines(b, timeout=60, checkpointer=saver).invoke({"log": []}, cfg)
    assert out["deadline"] - time.time() < 1.5  # brought forward, stored as epoch seconds
    stored = saver.get_tuple(cfg).checkpoint["channel_values"]["deadline"]
    assert stored == {"at": out["deadline"], "over": True}  # plain data; the run finished


def test_caps_for_a_node_already_budgeted_are_refused() -> None:
    from langgraph_deadline import budgeted

    @budgeted(cap=1.0)
    def node(state: State) -> dict[str, Any]:
        return {}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    with pytest.raises(ValueError, match="already wrapped with budgeted"):
        with_deadlines(b, caps={"node": 2.0})
    with_deadlines(b)  # without caps it keeps its own budget
