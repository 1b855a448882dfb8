"""MCP tools whose calls are cancelled on the server when their deadline cuts them.

The MCP client never tells the server that it stopped waiting for a call, so with
`langchain-mcp-adapters`' tools the server's handler runs on to its end over streamable HTTP (with
its session per call, whose closing `DELETE` is cancelled with the call, or in a session kept
open), and over stdio in a session kept open; a session per call over stdio stops the server's
process, a few hundred ms late. `mcp_tools` keeps one session per server open and, when a call is
cut, sends MCP's `notifications/cancelled` for it: the server cancels the handler at once.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from langchain_core.tools import BaseTool, StructuredTool

from .._core.extras import needs_extra
from .._core.rules import StepRule
from .cache import StaleCache
from .hedge import Hedge
from .make import deadline_tools
from .tool import DeadlineTool

if TYPE_CHECKING:
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from mcp import ClientSession

__all__ = ["mcp_tools"]

log = logging.getLogger(__name__)

_CALL: contextvars.ContextVar[list[int]] = contextvars.ContextVar("langgraph_deadline_mcp_call")
"""The request ids a tool call in this context has sent (one, unless an interceptor retries)."""


@asynccontextmanager
async def mcp_tools(
    client: MultiServerMCPClient,
    *,
    server_name: str | None = None,
    caps: Mapping[str, float | StepRule | None] | None = None,
    default_cap: float | StepRule | None = None,
    read_only: Sequence[str] = (),
    cache: StaleCache | None = None,
    hedge: Hedge | None = None,
    idle_cap: float | StepRule | None = None,
    cancel_grace: float = 0.5,
) -> AsyncIterator[list[DeadlineTool]]:
    """The client's tools (of `server_name`, else of every server) as deadline tools, over one
    session per server kept open inside the `async with`; a call cut by its budget is cancelled
    on the server too (MCP `notifications/cancelled`, sent within `cancel_grace` s).

    `caps`, `default_cap`, `read_only`, `cache`, `hedge` and `idle_cap` are `deadline_tools`'
    (a hedged call's losing copy is cancelled on the server too). Use the tools inside the
    block, in the event loop that opened it:

    ```python
    async with mcp_tools(client, default_cap=5.0) as tools:
        agent = create_agent(model, tools, middleware=[DeadlineMiddleware(timeout=20)])
        await agent.ainvoke({"messages": [("user", "...")]})
    ```

    Raises:
        ValueError: an unknown `server_name`, or `caps` / `read_only` naming an unknown tool.
    """
    with needs_extra("mcp", "mcp_tools"):
        from langchain_mcp_adapters.tools import load_mcp_tools

    names = [server_name] if server_name is not None else list(client.connections)
    async with AsyncExitStack() as stack:
        sessions = []
        for name in names:
            calls = _InFlight(name if client.tool_name_prefix else None)
            session = await stack.enter_async_context(_session(client, name, calls))
            _note_call_ids(session)
            tools = await load_mcp_tools(
                session,
                callbacks=client.callbacks,
                tool_interceptors=client.tool_interceptors,
                server_name=name,
                tool_name_prefix=client.tool_name_prefix,
                handle_tool_errors=client.handle_tool_errors,
            )
            sessions.append((session, tools, calls))
        # Entered last, left first: cancellations still on their way go out before the close.
        tasks = await stack.enter_async_context(anyio.create_task_group())
        loaded = [
            _cancelling(t, session, tasks, calls, grace=cancel_grace)
            for session, tools, calls in sessions
            for t in tools
        ]
        yield deadline_tools(
            loaded,
            caps=caps,
            default_cap=default_cap,
            read_only=read_only,
            cache=cache,
            hedge=hedge,
            idle_cap=idle_cap,
        )


class _InFlight:
    """The tool calls in flight on one server's session, by MCP tool name: what its session-wide
    callbacks (logging, elicitation) are told they are about, as a session per call tells them
    (`client.get_tools()`). With several calls in flight at once, a message cannot be told
    apart: their `tool_name` is None then, as outside any call."""

    def __init__(self, prefix: str | None) -> None:
        self.prefix = None if prefix is None else f"{prefix}_"  # `tool_name_prefix`'s
        self.names: list[str] = []

    def enter(self, tool: str) -> str:
        name = tool.removeprefix(self.prefix) if self.prefix else tool
        self.names.append(name)
        return name

    def leave(self, name: str) -> None:
        self.names.remove(name)

    def only(self) -> str | None:
        return self.names[0] if len(set(self.names)) == 1 else None

    def callbacks(self, callbacks: Any, server: str) -> Any:
        """`callbacks` (the client's) telling their session-wide callbacks the call in flight."""
        from langchain_mcp_adapters.callbacks import CallbackContext, Callbacks

        def in_flight() -> CallbackContext:
            return CallbackContext(server_name=server, tool_name=self.only())

        on_log, on_elicit = callbacks.on_logging_message, callbacks.on_elicitation

        async def log(params: Any, context: Any) -> None:  # the session's, without the call
            assert on_log is not None
            await on_log(params, in_flight())

        async def elicit(mcp_context: Any, params: Any, context: Any) -> Any:
            assert on_elicit is not None
            return await on_elicit(mcp_context, params, in_flight())

        return Callbacks(
            on_logging_message=None if on_log is None else log,
            on_progress=callbacks.on_progress,  # per call: the adapters name its tool
            on_elicitation=None if on_elicit is None else elicit,
        )


@asynccontextmanager
async def _session(
    client: MultiServerMCPClient, name: str, calls: _InFlight
) -> AsyncIterator[ClientSession]:
    """`client.session(name)`, whose session-wide callbacks are told which tool call they are
    about (`_InFlight`), and whose close does not fail on a reply that arrives while it
    closes: the server answers a cancelled call ("Request cancelled"), and mcp's stdio reader,
    forwarding that answer to a session that stopped listening, raises `BrokenResourceError`.
    Any other error on close, and any error before the session opened (a server that dies at
    start), is raised as it is."""
    named = copy.copy(client)
    named.callbacks = calls.callbacks(client.callbacks, name)
    opened = False
    try:
        async with named.session(name) as session:
            opened = True
            yield session
    except BaseExceptionGroup as group:
        _, rest = group.split(anyio.BrokenResourceError)
        if rest is not None or not opened:
            raise
        log.debug("MCP session %r: a reply arrived while it closed; dropped", name)


def _note_call_ids(session: ClientSession) -> None:
    """Make `session` note the id of each `tools/call` it sends for the current tool call.

    MCP gives a request its id inside `send_request` (`_request_id`, read as it is taken: no
    await comes between), and offers no other way to learn it."""
    from mcp.types import CallToolRequest

    send = session.send_request

    @functools.wraps(send)
    async def send_request(request: Any, *args: Any, **kwargs: Any) -> Any:
        sent = _CALL.get(None)
        if sent is not None and isinstance(request.root, CallToolRequest):
            sent.append(session._request_id)
        return await send(request, *args, **kwargs)

    session.send_request = send_request  # type: ignore[method-assign]


def _cancelling(
    tool: BaseTool,
    session: ClientSession,
    tasks: anyio.abc.TaskGroup,
    calls: _InFlight,
    *,
    grace: float,
) -> BaseTool:
    """`tool` whose calls, when cancelled, tell the server to cancel them too (from `tasks`),
    and are counted in flight (`calls`) while they run."""
    if not isinstance(tool, StructuredTool) or tool.coroutine is None:
        return tool
    call: Callable[..., Awaitable[Any]] = tool.coroutine

    @functools.wraps(call)
    async def cancellable(*args: Any, **kwargs: Any) -> Any:
        sent: list[int] = []
        token = _CALL.set(sent)
        name = calls.enter(tool.name)
        try:
            return await call(*args, **kwargs)
        except anyio.get_cancelled_exc_class():
            # Not from here: LangChain runs the call in a task of its own, which the cut keeps
            # cancelling, shield or no shield.
            for request_id in sent:
                tasks.start_soon(_cancel, session, request_id, grace)
            raise
        finally:
            calls.leave(name)
            _CALL.reset(token)

    return tool.model_copy(update={"coroutine": cancellable})


async def _cancel(session: ClientSession, request_id: int, grace: float) -> None:
    """Tell the server to stop request `request_id`; give up after `grace` s."""
    from mcp.types import CancelledNotification, CancelledNotificationParams, ClientNotification

    params = CancelledNotificationParams(requestId=request_id, reason="deadline exceeded")
    with anyio.move_on_after(grace):
        await session.send_notification(ClientNotification(CancelledNotification(params=params)))
