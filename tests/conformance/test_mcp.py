"""MCP tools (langchain-mcp-adapters, a local FastMCP server) in a `create_agent` run under
`DeadlineMiddleware`: the run ends by its deadline and the model reads the timeout message on
every transport; whether the server's tool is cancelled depends on the path, and with
`mcp_tools` (the recommended one) it is, over stdio and streamable HTTP alike."""

from __future__ import annotations

import contextlib
import gc
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from langgraph_deadline import Hedge, Terminal, deadline_tools
from langgraph_deadline.agents import DeadlineMiddleware
from langgraph_deadline.mcp import mcp_tools
from langgraph_deadline.types import DeadlineTool
from tests.chat_models import ScriptedChatModel, tool_calls

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SERVER = Path(__file__).with_name("mcp_server.py")
MARGIN = 0.5  # a loaded 2-core machine
RUN = 3.0  # the run's timeout
CAP = 1.0  # the tool's


class ServerLog:
    """What the server wrote about each call (`start`, `finished`, `cancelled` + the call's id)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def of(self, call: str) -> list[str]:
        lines = self.path.read_text().splitlines()
        return [w for w, c in (line.split(" ", 1) for line in lines) if c == call]

    async def wait_for_end(self, call: str, *, within: float) -> list[str]:
        for _ in range(int(within / 0.05)):
            if {"finished", "cancelled"} & set(self.of(call)):
                break
            await anyio.sleep(0.05)
        return self.of(call)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerLog]]:
    log = ServerLog(tmp_path_factory.mktemp("mcp") / "http.log")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(log.path), "http", str(port)],
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        proc.terminate()
        proc.wait(5)


@pytest.fixture
def stdio_log(tmp_path: Path) -> ServerLog:
    return ServerLog(tmp_path / "stdio.log")


def stdio_client(log: ServerLog) -> MultiServerMCPClient:
    args = [str(SERVER), str(log.path), "stdio"]
    return MultiServerMCPClient(
        {"slow": {"transport": "stdio", "command": sys.executable, "args": args}}
    )


def http_client(url: str) -> MultiServerMCPClient:
    return MultiServerMCPClient({"slow": {"transport": "streamable_http", "url": url}})


async def run_agent(tools: list[BaseTool], call: str) -> tuple[float, ToolMessage]:
    """Run an agent (3 s) whose model calls `slow_lookup` (capped at 1 s) once: how long the
    run took, and what the model read back."""
    model = ScriptedChatModel(
        script=[tool_calls(("slow_lookup", {"call": call, "seconds": 4})), AIMessage("sorry")]
    )
    agent = create_agent(model, tools, middleware=[DeadlineMiddleware(timeout=RUN)])
    start = time.monotonic()
    out = await agent.ainvoke({"messages": [("user", "look it up")]})
    elapsed = time.monotonic() - start
    assert out["deadline_outcome"].terminal is Terminal.COMPLETED
    answers = [m for m in model.calls[-1] if isinstance(m, ToolMessage)]
    assert len(answers) == 1
    return elapsed, answers[0]


def assert_timeout_answer(message: ToolMessage) -> None:
    assert message.status == "error"
    assert "timeout" in str(message.content).lower()
    assert message.artifact["langgraph_deadline"]["status"] == "timed_out"


async def test_mcp_tools_over_stdio_cancel_the_server_handler_at_the_deadline(
    stdio_log: ServerLog,
) -> None:
    async with mcp_tools(stdio_client(stdio_log), default_cap=CAP) as tools:
        elapsed, answer = await run_agent(tools, "stdio-kept")
    assert elapsed < CAP + MARGIN
    assert_timeout_answer(answer)
    assert await stdio_log.wait_for_end("stdio-kept", within=2) == ["start", "cancelled"]


async def test_mcp_tools_take_deadline_tools_settings_by_their_names(stdio_log: ServerLog) -> None:
    """`mcp_tools(default_cap=, idle_cap=)` are `deadline_tools`' own: every tool gets them."""
    async with mcp_tools(stdio_client(stdio_log), default_cap=3.0, idle_cap=0.4) as tools:
        assert {t.name: (t.options.cap, t.options.idle_cap) for t in tools} == {
            "slow_lookup": (3.0, 0.4),
            "straggling_lookup": (3.0, 0.4),
            "noisy_lookup": (3.0, 0.4),
        }


async def test_mcp_tools_over_streamable_http_cancel_the_server_handler_at_the_deadline(
    http_server: tuple[str, ServerLog],
) -> None:
    url, log = http_server
    async with mcp_tools(http_client(url), default_cap=CAP) as tools:
        elapsed, answer = await run_agent(tools, "http-kept")
    assert elapsed < CAP + MARGIN
    assert_timeout_answer(answer)
    assert await log.wait_for_end("http-kept", within=2) == ["start", "cancelled"]


async def test_a_hedged_mcp_tool_answers_from_the_second_copy_and_the_server_cancels_the_first(
    http_server: tuple[str, ServerLog],
) -> None:
    url, log = http_server
    hedge = Hedge(after=0.2)
    client = http_client(url)
    async with mcp_tools(
        client, default_cap=3.0, read_only=["straggling_lookup"], hedge=hedge
    ) as tools:
        [lookup] = [t for t in tools if t.name == "straggling_lookup"]
        call = {"type": "tool_call", "id": "c1", "name": lookup.name, "args": {"call": "hedged"}}
        start = time.monotonic()
        message = await lookup.ainvoke(call)
        elapsed = time.monotonic() - start
        for _ in range(40):  # the cancellation reaches the server's log
            if "cancelled" in log.of("hedged"):
                break
            await anyio.sleep(0.05)
    assert message.status == "success" and "found hedged" in str(message.content)
    assert elapsed < 1.0 + MARGIN
    assert sorted(log.of("hedged")) == ["cancelled", "finished", "start", "start"]


async def test_default_tools_over_stdio_stop_the_server_process_with_the_call(
    stdio_log: ServerLog,
) -> None:
    # A new session (a new server process) per call: its start is part of the call's budget,
    # and closing it waits for the process to exit (so the answer comes a little late).
    tools = deadline_tools(await stdio_client(stdio_log).get_tools(), default_cap=2 * CAP)
    elapsed, answer = await run_agent(tools, "stdio-per-call")
    assert elapsed < 2 * CAP + MARGIN + 1.0
    assert_timeout_answer(answer)
    assert await stdio_log.wait_for_end("stdio-per-call", within=2) == ["start", "cancelled"]
    # The cut session leaves its process's pipes to the garbage collector (mcp's stdio client):
    # collect them while the loop still runs, not in a later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        await anyio.sleep(0.05)


async def test_default_tools_over_streamable_http_stop_the_server_tool_as_the_session_closes(
    http_server: tuple[str, ServerLog],
) -> None:
    url, log = http_server
    # A new session per call, closed as the call is cut: the cut lets the MCP client's own
    # clean-up run (it sends the session's closing request), and the server stops the tool.
    tools = deadline_tools(await http_client(url).get_tools(), default_cap=CAP)
    elapsed, answer = await run_agent(tools, "http-per-call")
    assert elapsed < CAP + MARGIN
    assert_timeout_answer(answer)
    assert await log.wait_for_end("http-per-call", within=10) == ["start", "cancelled"]


async def test_mcp_tools_are_the_servers_tools_with_their_caps(stdio_log: ServerLog) -> None:
    client = stdio_client(stdio_log)
    plain = {t.name: t for t in await client.get_tools()}
    async with mcp_tools(client, caps={"slow_lookup": 2.0}) as tools:
        assert sorted(t.name for t in tools) == sorted(plain)
        [lookup] = [t for t in tools if t.name == "slow_lookup"]
        assert isinstance(lookup, DeadlineTool)
        assert lookup.options.cap == 2.0
        assert lookup.tool_call_schema == plain["slow_lookup"].tool_call_schema
        call = {"type": "tool_call", "id": "c1", "name": "slow_lookup"}
        answer = await lookup.ainvoke({**call, "args": {"call": "quick", "seconds": 0}})
        assert answer.status == "success"
        assert [b["text"] for b in answer.content] == ["found quick"]
    with pytest.raises(ValueError, match="nowhere"):
        async with mcp_tools(client, server_name="nowhere"):
            pass


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
async def test_a_session_kept_open_by_hand_leaves_the_server_tool_running(
    transport: str, stdio_log: ServerLog, http_server: tuple[str, ServerLog]
) -> None:
    # The MCP client does not tell the server about a request it stops waiting for: keeping
    # the session open is not enough, `mcp_tools` sends the cancellation.
    url, http_log = http_server
    client, log = (
        (stdio_client(stdio_log), stdio_log)
        if transport == "stdio"
        else (http_client(url), http_log)
    )
    call = f"{transport}-by-hand"
    async with client.session("slow") as session:
        tools = deadline_tools(await load_mcp_tools(session), default_cap=CAP)
        elapsed, answer = await run_agent(tools, call)
        assert elapsed < CAP + MARGIN
        assert_timeout_answer(answer)
        assert await log.wait_for_end(call, within=10) == ["start", "finished"]
        # The server logs "finished" just before it sends the late reply; closing the session
        # while the stdio client's reader forwards that reply makes the mcp client raise
        # BrokenResourceError from its task group (seen once on a loaded machine): let it land.
        await anyio.sleep(0.5)


class _ClosingWith(MultiServerMCPClient):
    """A real stdio client whose sessions end as mcp's stdio transport does when a reply comes
    in while the session closes (its reader raises from the transport's task group)."""

    def __init__(self, log: ServerLog, error: BaseException) -> None:
        super().__init__(stdio_client(log).connections)
        self.error = error

    @contextlib.asynccontextmanager
    async def session(self, server_name: str, **kwargs: Any) -> AsyncIterator[Any]:
        async with super().session(server_name, **kwargs) as session:
            yield session
        raise BaseExceptionGroup("unhandled errors in a TaskGroup", [self.error])


async def test_a_reply_arriving_while_mcp_tools_closes_is_dropped(stdio_log: ServerLog) -> None:
    client = _ClosingWith(stdio_log, anyio.BrokenResourceError())
    async with mcp_tools(client, default_cap=CAP) as tools:
        assert [t.name for t in tools] == ["slow_lookup", "straggling_lookup", "noisy_lookup"]


async def test_any_other_error_on_closing_mcp_tools_is_raised(stdio_log: ServerLog) -> None:
    client = _ClosingWith(stdio_log, OSError("pipe"))
    with pytest.raises(BaseExceptionGroup) as caught:
        async with mcp_tools(client, default_cap=CAP):
            pass
    assert caught.group_contains(OSError)


def _leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in _leaves(e)]
    return [group]


async def test_a_server_that_dies_at_start_raises_the_adapters_own_error() -> None:
    dead = {"transport": "stdio", "command": sys.executable, "args": ["-c", "raise SystemExit(1)"]}
    client = MultiServerMCPClient({"dead": dead})  # type: ignore[dict-item]
    with pytest.raises(BaseExceptionGroup) as plain:
        await client.get_tools()
    with pytest.raises(BaseExceptionGroup) as ours:
        async with mcp_tools(client):
            pass
    assert type(ours.value) is type(plain.value)
    assert [repr(e) for e in _leaves(ours.value)] == [repr(e) for e in _leaves(plain.value)]


class _BrokenAtStart(MultiServerMCPClient):
    """A client whose transport breaks while the session starts, as mcp's stdio transport does
    when the server's pipe closes under it: an `anyio.BrokenResourceError` in a group."""

    @contextlib.asynccontextmanager
    async def session(self, server_name: str, *, auto_initialize: bool = True) -> Any:
        raise BaseExceptionGroup("transport", [anyio.BrokenResourceError()])
        yield  # an async generator, as the adapters' own


async def test_a_transport_broken_at_start_raises_its_error_not_generator_didnt_yield() -> None:
    client = _BrokenAtStart({"dead": {"transport": "stdio", "command": "none", "args": []}})
    with pytest.raises(BaseExceptionGroup) as plain:
        async with client.session("dead"):
            pass
    with pytest.raises(BaseExceptionGroup) as ours:
        async with mcp_tools(client):
            pass
    assert _leaves(ours.value)[0].__class__ is _leaves(plain.value)[0].__class__


async def test_session_wide_callbacks_are_told_the_tool_call_as_with_a_session_per_call(
    stdio_log: ServerLog,
) -> None:
    from langchain_mcp_adapters.callbacks import CallbackContext, Callbacks

    told: list[CallbackContext] = []

    async def on_logging_message(params: Any, context: CallbackContext) -> None:
        told.append(context)

    client = stdio_client(stdio_log)
    client.callbacks = Callbacks(on_logging_message=on_logging_message)
    (plain,) = [t for t in await client.get_tools() if t.name == "noisy_lookup"]
    await plain.ainvoke({"call": "a"})
    async with mcp_tools(client) as tools:
        (ours,) = [t for t in tools if t.name == "noisy_lookup"]
        await ours.ainvoke({"call": "b"})
    assert [(c.server_name, c.tool_name) for c in told] == [("slow", "noisy_lookup")] * 2
