"""LangChain's and LangGraph's prebuilt agents and tool nodes under `with_deadlines` and
`DeadlineMiddleware`: `create_agent`, `create_react_agent`, `ToolNode` + `tools_condition` with
every `handle_tool_errors` variant. With plenty of time they answer as they do unwrapped; with a
hanging model or tool they end by the deadline, the server sees the request closed, every tool
call is answered and the user gets a reply."""

from __future__ import annotations

import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import Field

from langgraph_deadline import DeadlineState, Terminal, terminal_of, with_deadlines
from langgraph_deadline.agents import DeadlineAgentState, DeadlineMiddleware
from langgraph_deadline.testing import ChatReply, FakeOpenAIServer, SlowServer
from langgraph_deadline.types import StepStatus
from tests.agents.support import MARGIN, SLOW, ask, assert_valid_history
from tests.chat_models import ScriptedChatModel, tool_calls
from tests.chat_models import openai_chat as chat
from tests.conformance.support import shape

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langgraph.prebuilt import create_react_agent
    from langgraph.prebuilt.chat_agent_executor import AgentState

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


class ReactDeadlineState(AgentState, DeadlineState):  # type: ignore[misc]
    """`create_react_agent`'s state with the deadline fields."""


def _react_agent(model: Any, tools: list[Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(model, tools, state_schema=ReactDeadlineState)


FACTORIES: dict[str, Callable[[Any, list[Any]], Any]] = {
    "create_agent": lambda model, tools: create_agent(
        model, tools, state_schema=DeadlineAgentState
    ),
    "create_react_agent": _react_agent,
}


def _lookup(query: str) -> str:
    return f"order 42 shipped on Monday ({query})"


async def _alookup(query: str) -> str:
    return _lookup(query)


orders = StructuredTool.from_function(
    func=_lookup, coroutine=_alookup, name="orders", description="Look up an order."
)


class ModeModel(ScriptedChatModel):
    """A scripted model that notes whether it was called through its sync or async body."""

    modes: list[str] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.modes.append("sync")
        return super()._generate(messages, *args, **kwargs)

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.modes.append("async")
        return super()._next(messages)


def _script() -> list[AIMessage | Callable[[list[BaseMessage]], AIMessage]]:
    return [tool_calls(("orders", {"query": "42"})), AIMessage("order 42 shipped")]


# -- create_agent and create_react_agent under with_deadlines ---------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("factory", FACTORIES)
async def test_a_prebuilt_agent_with_plenty_of_time_answers_as_unwrapped(factory: str) -> None:
    make = FACTORIES[factory]
    plain = await make(ScriptedChatModel(script=_script()), [orders]).ainvoke(ask())
    wrapped = with_deadlines(make(ScriptedChatModel(script=_script()), [orders]), timeout=10.0)
    out = await wrapped.ainvoke(ask())
    assert shape(out["messages"]) == shape(plain["messages"])
    assert terminal_of(out) is Terminal.COMPLETED


@pytest.mark.anyio
@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("call", ["ainvoke", "astream", "invoke"])
async def test_a_prebuilt_agent_runs_the_body_that_matches_the_call(
    factory: str, call: str
) -> None:
    model = ModeModel(script=_script())
    graph = with_deadlines(FACTORIES[factory](model, [orders]), timeout=10.0)
    if call == "ainvoke":
        await graph.ainvoke(ask())
    elif call == "astream":
        async for _ in graph.astream(ask()):
            pass
    else:
        graph.invoke(ask())
    assert model.modes == ["sync", "sync"] if call == "invoke" else ["async", "async"]


@pytest.mark.anyio
@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("call", ["ainvoke", "astream"])
async def test_a_prebuilt_agents_hanging_model_stream_is_closed_at_the_deadline(
    server: FakeOpenAIServer, factory: str, call: str
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    graph = with_deadlines(FACTORIES[factory](chat(server), [orders]), timeout=1.0, reserve=0.2)
    t0 = time.monotonic()
    if call == "ainvoke":
        out = await graph.ainvoke(ask())
    else:
        chunks = [chunk async for chunk in graph.astream(ask(), stream_mode="values")]
        out = chunks[-1]
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert server.wait_disconnected(MARGIN)
    (request,) = server.requests
    assert request.disconnected is not None
    assert request.disconnected - t0 < 1.0 + 0.25  # promptly: the async body was cut
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert_valid_history(out["messages"])


def _hang_under_invoke(server: FakeOpenAIServer) -> tuple[dict[str, Any], float]:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], state_schema=DeadlineAgentState)
    graph = with_deadlines(agent, timeout=1.0, reserve=0.2)
    t0 = time.monotonic()
    out = graph.invoke(ask())
    return out, time.monotonic() - t0


def test_a_prebuilt_agents_hanging_model_ends_by_the_deadline_under_invoke(
    server: FakeOpenAIServer,
) -> None:
    out, elapsed = _hang_under_invoke(server)
    assert elapsed < 1.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert_valid_history(out["messages"])
    (record,) = out["deadline_trace"]
    assert record.status is StepStatus.ABANDONED  # a sync body's thread cannot be killed


def test_a_prebuilt_agents_sync_model_stream_stops_at_the_deadline_under_invoke(
    server: FakeOpenAIServer,
) -> None:
    _hang_under_invoke(server)
    assert server.wait_disconnected(MARGIN)


def test_create_agent_with_the_middleware_stops_a_sync_model_stream_under_invoke(
    server: FakeOpenAIServer,
) -> None:
    server.enqueue(ChatReply.counting(200, chunk_interval=SLOW))
    agent = create_agent(chat(server), [orders], middleware=[DeadlineMiddleware(timeout=1.0)])
    t0 = time.monotonic()
    out = agent.invoke(ask())
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert server.wait_disconnected(MARGIN)  # the stream stops at its next chunk
    assert_valid_history(out["messages"])


class AsyncOnly(AgentMiddleware[Any, Any, Any]):
    """A middleware with only `awrap_model_call`, as many third-party ones are."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        self.calls += 1
        return await handler(request)


@pytest.mark.anyio
async def test_an_agent_whose_middleware_has_only_awrap_model_call_runs_under_with_deadlines() -> (
    None
):
    spy = AsyncOnly()
    agent = create_agent(ScriptedChatModel(script=_script()), [orders], middleware=[spy])
    out = await with_deadlines(agent, timeout=10.0).ainvoke(ask())
    assert spy.calls == 2
    assert out["messages"][-1].text == "order 42 shipped"
    assert terminal_of(out) is Terminal.COMPLETED


# -- create_agent under DeadlineMiddleware -----------------------------------------------------


@pytest.mark.anyio
async def test_create_agent_with_the_middleware_and_plenty_of_time_answers_as_without_it() -> None:
    plain = await create_agent(ScriptedChatModel(script=_script()), [orders]).ainvoke(ask())
    agent = create_agent(
        ScriptedChatModel(script=_script()), [orders], middleware=[DeadlineMiddleware(timeout=10)]
    )
    out = await agent.ainvoke(ask())
    assert shape(out["messages"]) == shape(plain["messages"])
    assert terminal_of(out) is Terminal.COMPLETED


def _fetch(slow_server: SlowServer) -> Any:
    @tool
    async def fetch(query: str) -> str:
        """Fetch a page (it hangs)."""
        async with httpx.AsyncClient() as client:
            await client.get(slow_server.url("/slow?delay=30"))
        return "never"

    return fetch


@pytest.mark.anyio
async def test_create_agent_with_the_middleware_answers_a_hanging_tool_and_goes_on(
    server: FakeOpenAIServer, slow_server: SlowServer
) -> None:
    server.enqueue(ChatReply.tool_call("fetch", {"query": "x"}), ChatReply.text("no page, sorry"))
    middleware = DeadlineMiddleware(timeout=5.0, default_tool_cap=0.5)
    agent = create_agent(chat(server), [_fetch(slow_server)], middleware=[middleware])
    t0 = time.monotonic()
    out = await agent.ainvoke(ask())
    assert time.monotonic() - t0 < 0.5 + MARGIN
    assert slow_server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])
    assert out["messages"][-1].text == "no page, sorry"
    assert terminal_of(out) is Terminal.COMPLETED


# -- ToolNode + tools_condition, every handle_tool_errors ----------------------------------------


class State(MessagesState, DeadlineState):
    pass


@tool
async def broken(query: str) -> str:
    """A lookup that fails."""
    raise ValueError(f"no such order: {query}")


HANDLERS: dict[str, Any] = {
    "true": True,
    "false": False,
    "str": "the lookup failed",
    "callable": lambda exc: f"handled: {exc}",
    "types": (ValueError,),
}


def _tool_graph(model: Any, tools: list[Any], handle: Any) -> StateGraph[Any, Any, Any, Any]:
    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=handle))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    builder.add_edge("agent", END)
    return builder


async def _outcome(graph: Any) -> Any:
    try:
        return await graph.ainvoke(ask())
    except Exception as exc:
        return exc


@pytest.mark.anyio
@pytest.mark.parametrize("handle", HANDLERS)
async def test_a_tool_node_with_plenty_of_time_handles_tool_errors_as_unwrapped(
    handle: str,
) -> None:
    def script() -> ScriptedChatModel:
        return ScriptedChatModel(script=[tool_calls(("broken", {"query": "7"})), AIMessage("ok")])

    plain = await _outcome(_tool_graph(script(), [broken], HANDLERS[handle]).compile())
    graph = with_deadlines(_tool_graph(script(), [broken], HANDLERS[handle]), timeout=10.0)
    wrapped = await _outcome(graph)
    if isinstance(plain, Exception):  # handle_tool_errors=False: the error is the user's
        assert type(wrapped) is type(plain) and str(wrapped) == str(plain)
        return
    assert shape(wrapped["messages"]) == shape(plain["messages"])
    assert terminal_of(wrapped) is Terminal.COMPLETED


@pytest.mark.anyio
@pytest.mark.parametrize("handle", HANDLERS)
async def test_a_tool_node_with_a_hanging_tool_ends_by_the_deadline_whatever_handles_errors(
    slow_server: SlowServer, handle: str
) -> None:
    model = ScriptedChatModel(script=[tool_calls(("fetch", {"query": "x"}))])
    builder = _tool_graph(model, [_fetch(slow_server)], HANDLERS[handle])
    graph = with_deadlines(builder, timeout=1.0, reserve=0.2)
    t0 = time.monotonic()
    out = await graph.ainvoke(ask())
    assert time.monotonic() - t0 < 1.0 + MARGIN
    assert terminal_of(out) is Terminal.DEADLINE_EXCEEDED
    assert out["deadline_outcome"].step == "tools"
    assert slow_server.wait_disconnected(MARGIN)
    assert_valid_history(out["messages"])  # the call answered, and a closing reply
