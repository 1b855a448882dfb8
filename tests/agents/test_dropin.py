"""`DeadlineMiddleware` as a drop-in: an agent with it (a deadline nobody reaches) behaves as the
same agent without it, wherever it is listed and under `with_deadlines` too. Each test builds
the agent plain and with the middleware and compares (scripts/agents_suite runs LangChain's own
agent tests the same way)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from blockbuster import blockbuster_ctx
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.errors import GraphRecursionError
from langgraph.runtime import Runtime
from langgraph.types import Command

from langgraph_deadline import Terminal, with_deadlines
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.types import StepStatus
from tests.agents.support import ask
from tests.chat_models import ScriptedChatModel
from tests.conftest import collecting

TIMEOUT = 600.0  # nobody reaches it


@tool
def lookup(query: str) -> str:
    """Look up an order."""
    return f"found {query}"


def _calls_lookup(n: int) -> list[AIMessage | Callable[[list[BaseMessage]], AIMessage]]:
    """A model that calls `lookup` `n` times, one round each, then answers."""
    rounds: list[AIMessage | Callable[[list[BaseMessage]], AIMessage]] = [
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": str(i)}, "id": f"c{i}"}])
        for i in range(n)
    ]
    return [*rounds, AIMessage("done")]


def _agent(
    with_ours: bool,
    *,
    tools: Sequence[Any] = (),
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    script: list[AIMessage | Callable[[list[BaseMessage]], AIMessage]] | None = None,
    last: bool = False,
) -> Any:
    model = ScriptedChatModel(script=list(script or []))
    listed = list(middleware)
    if with_ours:
        ours = DeadlineMiddleware(timeout=TIMEOUT)
        listed = [*listed, ours] if last else [ours, *listed]
    return create_agent(model, list(tools), middleware=listed)


def _messages(out: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(type(m).__name__, m.content) for m in out["messages"]]


# -- 1. both documented ways at once -------------------------------------------------------------


@pytest.mark.anyio
async def test_the_middleware_inside_with_deadlines_runs_as_the_agent_alone() -> None:
    plain = await _agent(False, tools=[lookup], script=_calls_lookup(1)).ainvoke(ask())
    agent = _agent(True, tools=[lookup], script=_calls_lookup(1))
    out = await with_deadlines(agent, timeout=TIMEOUT).ainvoke(ask())
    assert _messages(out) == _messages(plain)
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    kinds = [r.kind for r in out["deadline_trace"]]
    assert kinds.count("model") == 2 and kinds.count("tool") == 1


@pytest.mark.anyio
async def test_the_middleware_inside_with_deadlines_leaves_the_runs_records_in_their_order(
    tmp_path: Path,
) -> None:
    """The run writes its records once, at its end: the middleware's calls among them, in the
    order they ended, each told to the observers as one of the run's steps."""
    agent = _agent(True, tools=[lookup], script=_calls_lookup(1))
    cfg: Any = {"configurable": {"thread_id": "order"}}
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        graph = with_deadlines(agent, timeout=TIMEOUT, checkpointer=saver)
        with collecting() as told:
            out = await graph.ainvoke(ask(), cfg)
        stored = (await graph.aget_state(cfg)).values["deadline_trace"]
    # Old code: the middleware's calls first (written as they ended), the nodes' after them.
    assert out["deadline_trace"] == told.records
    assert [(r.kind, r.name) for r in told.records if r.kind != "node"] == [
        ("model", "model"),
        ("tool", "lookup"),
        ("model", "model"),
    ]
    [run] = told.runs
    assert {e.run_id for e in told.events} == {run.run_id}  # old code: None for the calls
    assert stored == out["deadline_trace"]


# -- 2. the agent's graph and LangChain's checks -------------------------------------------------


class _AddsAnUnknownTool(AgentMiddleware[AgentState[Any], Any, Any]):
    """Offers the model a tool no one can run (LangChain refuses it before the model call)."""

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(request.override(tools=[*request.tools, lookup]))


class _JumpsToModel(AgentMiddleware[AgentState[Any], Any, Any]):
    """Asks for a jump it did not declare (`can_jump_to`): LangChain ignores it."""

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        return {"jump_to": "model"}


@pytest.mark.parametrize("last", [False, True])
def test_a_tool_less_agent_has_the_same_graph(last: bool) -> None:
    plain = _agent(False).get_graph()
    ours = _agent(True, last=last).get_graph()
    assert "tools" not in plain.nodes
    assert "tools" not in ours.nodes


def test_a_tool_less_agent_keeps_langchains_check_of_unknown_tools() -> None:
    for with_ours in (False, True):
        agent = _agent(with_ours, middleware=[_AddsAnUnknownTool()])
        with pytest.raises(ValueError, match="doesn't know how to execute"):
            agent.invoke(ask())


def test_an_undeclared_jump_is_ignored_as_without_the_middleware() -> None:
    config: Any = {"recursion_limit": 12}
    plain = _agent(False, middleware=[_JumpsToModel()]).invoke(ask(), config)
    out = _agent(True, middleware=[_JumpsToModel()]).invoke(ask(), config)
    assert _messages(out) == _messages(plain)


class _RunsADynamicTool(_AddsAnUnknownTool):
    """LangChain's pattern for a tool added at run time: offered in `wrap_model_call`, run in
    `wrap_tool_call`."""

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        if request.tool_call["name"] == "lookup":
            return handler(request.override(tool=lookup))
        return handler(request)


def test_a_tool_less_agent_whose_middleware_runs_a_dynamic_tool_gets_it_budgeted() -> None:
    plain = _agent(False, middleware=[_RunsADynamicTool()], script=_calls_lookup(1)).invoke(ask())
    out = _agent(True, middleware=[_RunsADynamicTool()], script=_calls_lookup(1)).invoke(ask())
    assert _messages(out) == _messages(plain)
    assert [r.name for r in out["deadline_trace"] if r.kind == "tool"] == ["lookup"]


def test_to_anyone_but_create_agent_the_middleware_wraps_tool_calls() -> None:
    for hook in ("wrap_tool_call", "awrap_tool_call"):
        assert getattr(DeadlineMiddleware, hook) is not getattr(AgentMiddleware, hook)
        assert callable(getattr(DeadlineMiddleware(), hook))


def test_with_tools_the_middleware_budgets_them() -> None:
    out = _agent(True, tools=[lookup], script=_calls_lookup(1)).invoke(ask())
    (record,) = [r for r in out["deadline_trace"] if r.kind == "tool"]
    assert record.name == "lookup" and record.status is StepStatus.COMPLETED


# -- 3. steps against recursion_limit ------------------------------------------------------------


def _fewest_steps(with_ours: bool, rounds: int) -> int:
    for limit in range(1, 40):
        agent = _agent(with_ours, tools=[lookup], script=_calls_lookup(rounds))
        try:
            agent.invoke(ask(), {"recursion_limit": limit})
        except GraphRecursionError:
            continue
        return limit
    raise AssertionError("never finished")


@pytest.mark.parametrize("rounds", [1, 3])
def test_the_middleware_takes_two_steps_a_run_whatever_the_tool_rounds(rounds: int) -> None:
    """Its work is in the model and tool calls' wrappers: only the run's start and end are
    steps of their own (docs/howto/agents.md, "What a caller sees of it")."""
    assert _fewest_steps(True, rounds) == _fewest_steps(False, rounds) + 2


# -- 4. other middleware see the tool's own answer -----------------------------------------------


class _SeesToolAnswers(AgentMiddleware[AgentState[Any], Any, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[type] = []

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        answer = handler(request)
        self.seen.append(type(answer))
        return answer


@pytest.mark.parametrize("last", [False, True])
def test_a_middleware_listed_before_it_sees_the_tools_message(last: bool) -> None:
    spies = [_SeesToolAnswers(), _SeesToolAnswers()]
    plain = _agent(False, tools=[lookup], middleware=[spies[0]], script=_calls_lookup(1))
    ours = _agent(True, tools=[lookup], middleware=[spies[1]], script=_calls_lookup(1), last=last)
    plain.invoke(ask())
    out = ours.invoke(ask())
    assert spies[1].seen == spies[0].seen == [ToolMessage]
    assert [r.name for r in out["deadline_trace"] if r.kind == "tool"] == ["lookup"]


# -- 5. sync invoke from async code --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("with_ours", [False, True])
async def test_sync_invoke_from_async_code_does_not_block_the_loop_on_a_lock(
    with_ours: bool,
) -> None:
    """LangGraph's sync runner runs a lone node on the caller's thread, here the loop's: the
    middleware's model call runs there too instead of on a worker waited for on a lock."""
    agent = _agent(with_ours)
    with blockbuster_ctx():
        out = agent.invoke(ask())
    assert out["messages"][-1].content == "done"
    if with_ours:
        assert [r.status for r in out["deadline_trace"]] == [StepStatus.COMPLETED]


# -- 6. the output is JSON-friendly --------------------------------------------------------------


def test_the_outputs_fields_other_than_messages_dump_to_json_as_without_it() -> None:
    plain = _agent(False, tools=[lookup], script=_calls_lookup(1)).invoke(ask())
    out = _agent(True, tools=[lookup], script=_calls_lookup(1)).invoke(ask())
    others = {k: v for k, v in out.items() if k != "messages"}
    assert set(others) == {"deadline", "deadline_outcome", "deadline_trace"} | set(plain) - {
        "messages"
    }
    data = json.loads(json.dumps(others))
    assert data["deadline_outcome"]["terminal"] == "completed"
    assert [r["kind"] for r in data["deadline_trace"]] == ["model", "tool", "model"]
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED  # the public type, as before
