"""The LangChain `create_agent` seams the middleware plugs into, in one place (checked against
langchain 1.5; `tests/agents/test_dropin.py` fails loudly when one changes shape).

`create_agent` decides from a middleware's class whether it "wraps tool calls": when one does,
it gives even a tool-less agent a `tools` node (whose edge obeys any `jump_to`) and leaves out
its check that every tool the model is offered can be run (the middleware might run tools added
at run time). `DeadlineMiddleware` wraps tool calls only to budget the agent's own tools, so it
says it wraps them only when the agent has tools to run, or another middleware wraps them too:
the agent's graph and checks are then those it has without it.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any, Final, Generic, TypeVar

from langchain.agents.middleware import AgentMiddleware

__all__ = ["ToolHook"]

F = TypeVar("F", bound=Callable[..., Any])

_FACTORY: Final = ("langchain.agents.factory", "create_agent")
"""Where `create_agent` lives, and the names of its arguments read here (`tools`, `middleware`)."""

_HOOKS: Final = ("wrap_tool_call", "awrap_tool_call")


class ToolHook(Generic[F]):
    """A tool-call hook (`wrap_tool_call`, `awrap_tool_call`) that `create_agent` sees on the
    middleware's class only when the agent it is building runs tools (its own, a middleware's,
    or others' wrapped tool calls); to anyone else, and on an instance, it is the hook."""

    def __init__(self, func: F) -> None:
        self.func = func
        self.name = func.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is not None:
            return types.MethodType(self.func, instance)
        if owner is not None and _building_a_tool_less_agent(owner):
            return getattr(AgentMiddleware, self.name)
        return self.func


def _building_a_tool_less_agent(owner: type) -> bool:
    """True when asked from inside `create_agent` for an agent with no tool to run: none given,
    none from a middleware, and no other middleware wrapping tool calls."""
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(4):  # the factory, or a comprehension of it (Python 3.11)
        if frame is None:
            return False
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) == _FACTORY:
            break
        frame = frame.f_back
    else:
        return False
    tools: Iterable[Any] = frame.f_locals.get("tools") or ()
    middleware: Iterable[Any] = frame.f_locals.get("middleware") or ()
    if any(not isinstance(t, dict) for t in tools):  # dicts are the provider's own tools
        return False
    for m in middleware:
        if getattr(m, "tools", None):
            return False
        if _wraps_tool_calls(type(m)):
            return False
    return True


def _wraps_tool_calls(cls: type) -> bool:
    """`create_agent`'s own test of a middleware class, for the others: a `ToolHook` (this
    middleware, or another of its kind) is left out."""
    for hook in _HOOKS:
        own = inspect.getattr_static(cls, hook)
        if not isinstance(own, ToolHook) and own is not inspect.getattr_static(
            AgentMiddleware, hook
        ):
            return True
    return False
